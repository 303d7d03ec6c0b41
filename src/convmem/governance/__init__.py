"""Stage 2 value marking and memory governance (seed 002).

Markers label each turn (:class:`TurnMark`); code derives kept content, pins
(:class:`PinIntent`), notes and retention from those labels and the policy table.
"""

from __future__ import annotations

from convmem.governance.derive import Decision, Derived, NoteDraft, PinRecord, derive
from convmem.governance.llm import LLMMarker
from convmem.governance.marker import KeepAllMarker, Marker, MarkerBase, MarkTurn
from convmem.governance.policy import (
    DEFAULT_TTL_POLICY,
    GovernancePolicy,
    RetentionRule,
    load_policy,
    policy_key,
)
from convmem.governance.rules import RuleMarker, SaveIntent, save_intent, value_score
from convmem.governance.schema import (
    CATEGORIES,
    EVIDENCE_LEVELS,
    FORGET_POLICIES,
    SUBTYPES,
    KeptContent,
    MarkError,
    Note,
    PinIntent,
    Span,
    StoredMark,
    StoredPin,
    TurnMark,
    kept_content,
    parse_marks,
    validate_marks,
)

__all__ = [
    "CATEGORIES",
    "DEFAULT_TTL_POLICY",
    "EVIDENCE_LEVELS",
    "FORGET_POLICIES",
    "SUBTYPES",
    "Decision",
    "Derived",
    "GovernancePolicy",
    "KeepAllMarker",
    "KeptContent",
    "LLMMarker",
    "MarkError",
    "MarkTurn",
    "Marker",
    "MarkerBase",
    "Note",
    "NoteDraft",
    "PinIntent",
    "PinRecord",
    "RetentionRule",
    "RuleMarker",
    "SaveIntent",
    "Span",
    "StoredMark",
    "StoredPin",
    "TurnMark",
    "derive",
    "kept_content",
    "load_policy",
    "parse_marks",
    "policy_key",
    "resolve_marker",
    "save_intent",
    "validate_marks",
    "value_score",
]


def resolve_marker(
    name: str,
    *,
    llm_url: str | None = None,
    llm_model: str | None = None,
    llm_key: str | None = None,
) -> Marker:
    """A marker by name: ``rules`` (default), ``keep-all`` (marking off) or ``llm``.

    Raises:
        InvalidInputError: an unknown name, or ``llm`` without an endpoint and model.
    """
    from convmem.errors import InvalidInputError

    if name == "rules":
        return RuleMarker()
    if name == "keep-all":
        return KeepAllMarker()
    if name == "llm":
        if not llm_url or not llm_model:
            raise InvalidInputError(
                "the llm marker needs an OpenAI-compatible chat endpoint and model "
                "(CONVMEM_LLM_URL and CONVMEM_LLM_MODEL)",
                field="marker",
            )
        return LLMMarker(llm_url, llm_model, api_key=llm_key)
    raise InvalidInputError(f"marker must be rules, keep-all or llm, got {name!r}", field="marker")
