"""Stage 2 marking with any OpenAI-compatible chat endpoint.

The policy table is written into the prompt; the model picks keep/drop, labels and the
table row, and code enforces the rest: the output is validated strictly (seed 002 §5)
and any problem fails the whole call (the index job retries with backoff and records
``error_code`` and ``next_retry_at``; nothing is half-applied). TTL and forget policy
are then taken from the policy table, never from the model, and pins come from code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Unpack

from convmem.chat import ChatClient, ChatError, ChatOptions
from convmem.errors import MarkingError
from convmem.governance.marker import MarkerBase, MarkTurn
from convmem.governance.policy import GovernancePolicy, policy_key
from convmem.governance.schema import (
    CATEGORIES,
    EVIDENCE_LEVELS,
    FORGET_POLICIES,
    SUBTYPES,
    TurnMark,
    parse_marks,
)

__all__ = ["LLMMarker", "build_prompt"]

logger = logging.getLogger(__name__)

_INSTRUCTIONS = """You label conversation turns for a long-term memory service (Stage 2).
For EVERY turn under "turns" output one mark. Never rewrite or quote turn text.

Keep (keep=true) only:
1. stable user information: preferences, boundaries, identity, long-term background (S0 or S3);
2. tasks and commitments: requests, promises, deadlines, status (S0 or S3);
3. decisions and outcomes the user confirmed (S3, or S2);
4. facts that come from tool output (S2).
Drop (keep=false): assistant general knowledge, suggestions and speculation (S1), small
talk, and "facts" with neither tool evidence nor user confirmation. Always give a one-line
reason.

Retention is product policy. Pick the row that applies and copy its values exactly:
{table}

Output JSON only: {{"marks": [{{"turn_id": ..., "keep": true|false,
"span": {{"start": int, "end": int}} (optional; Python slice of the turn text in Unicode
code points, only when part of a turn is worth keeping), "user_triggered_save": false,
"category": one of {categories}, "subtype": one of {subtypes} or null,
"evidence_level": one of {evidence}, "requires_confirmation": true|false,
"importance": 0..1, "ttl_seconds": int, "forget_policy": one of {forget},
"reason": "..."}}]}}
"""


def build_prompt(
    turns: Sequence[MarkTurn], context: Sequence[MarkTurn], policy: GovernancePolicy
) -> list[dict[str, str]]:
    rows = "\n".join(
        f"| {key} | {rule.forget_policy} | {rule.ttl_seconds} |"
        for key, rule in policy.rules.items()
        if key != "pinned"
    )
    table = "| category | forget_policy | ttl_seconds |\n|---|---|---|\n" + rows
    system = _INSTRUCTIONS.format(
        table=table,
        categories="|".join(CATEGORIES),
        subtypes="|".join(SUBTYPES),
        evidence="|".join(EVIDENCE_LEVELS),
        forget="|".join(FORGET_POLICIES),
    )

    def show(turn: MarkTurn) -> dict[str, Any]:
        return {"turn_id": turn.turn_id, "role": turn.role, "text": turn.text}

    user = json.dumps(
        {"context": [show(t) for t in context], "turns": [show(t) for t in turns]},
        ensure_ascii=False,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class LLMMarker(MarkerBase):
    """Marks turns through ``POST {base_url}/chat/completions``.

    Raises :class:`~convmem.errors.MarkingError` with ``code`` ``marker_unavailable``
    (transport or HTTP error), ``marker_bad_json`` (not the JSON asked for) or
    ``marker_invalid_marks`` (fails validation; the message lists the problems).
    """

    def __init__(
        self, base_url: str, model: str, *, context_turns: int = 4, **client: Unpack[ChatOptions]
    ) -> None:
        self._chat = ChatClient(base_url, model, **client)
        self._base_url = base_url
        self.model = model
        self.context_turns = context_turns
        self.name = f"llm:{model}"

    def mark_turns(
        self, turns: list[MarkTurn], context: list[MarkTurn], policy: GovernancePolicy
    ) -> list[TurnMark]:
        before = context[len(context) - self.context_turns :] if self.context_turns > 0 else []
        messages = build_prompt(turns, before, policy)
        try:
            payload = self._chat.json_messages(messages)
        except ChatError as exc:
            code = "marker_bad_json" if exc.kind == "bad_json" else "marker_unavailable"
            raise MarkingError(f"marking endpoint {self._base_url}: {exc}", code=code) from None
        raw = payload.get("marks") if isinstance(payload, dict) else payload
        if not isinstance(raw, list):
            raise MarkingError(
                f"marking endpoint {self._base_url} did not return JSON marks: no 'marks' list",
                code="marker_bad_json",
            )
        marks, errors = parse_marks(turns, raw, require_all=True)
        if errors:
            shown = "; ".join(f"{e.code} at {e.field}: {e.message}" for e in errors[:5])
            more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
            raise MarkingError(
                f"model marks failed validation: {shown}{more}",
                code="marker_invalid_marks",
                errors=[e.as_dict() for e in errors],
            )
        return [self._enforce(mark, policy) for mark in marks]

    @staticmethod
    def _enforce(mark: TurnMark, policy: GovernancePolicy) -> TurnMark:
        """Retention from the table, not the model; pins come from code, not the model."""
        if not mark.keep or mark.category is None:
            return mark.model_copy(
                update={"ttl_seconds": 0, "forget_policy": None, "user_triggered_save": False}
            )
        done_ttl = policy.rule("task(done)").ttl_seconds
        open_ttl = policy.rule("task(open)").ttl_seconds
        done = mark.category == "task" and mark.ttl_seconds == done_ttl != open_ttl
        rule = policy.rule(policy_key(mark.category, mark.evidence_level, task_done=done))
        return mark.model_copy(
            update={
                "ttl_seconds": rule.ttl_seconds,
                "forget_policy": rule.forget_policy,
                "user_triggered_save": False,
            }
        )

    def close(self) -> None:
        self._chat.close()
