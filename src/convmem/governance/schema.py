"""Seed 002 contracts: ``TurnMark`` (TurnMarkV1), ``PinIntent``, strict validation, kept content.

A marker (rules or an LLM) says per turn whether it is worth remembering and with which
governance labels; it never rewrites text. Everything downstream (kept text, pins, notes,
chunks) is produced by code from the marks, so it can be validated and replayed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CATEGORIES",
    "EVIDENCE_LEVELS",
    "EVIDENCE_ORDER",
    "FORGET_POLICIES",
    "SUBTYPES",
    "KeptContent",
    "MarkError",
    "Note",
    "PinIntent",
    "Span",
    "StoredMark",
    "StoredPin",
    "TurnMark",
    "kept_content",
    "parse_marks",
    "validate_marks",
]

# The longest retention a mark or policy may ask for: 100 years (0 means long-term). Larger
# values overflow date arithmetic downstream and would stop the tenant's indexing.
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600

Category = Literal["fact", "preference", "task", "rule", "note"]
Subtype = Literal[
    "profile", "constraint", "commitment", "decision", "tool_grounded_fact", "user_pinned_note"
]
EvidenceLevel = Literal["S0_user_claim", "S1_ai_inference", "S2_tool_grounded", "S3_user_confirmed"]
ForgetPolicy = Literal["permanent", "until_changed", "temporary"]

CATEGORIES: tuple[str, ...] = ("fact", "preference", "task", "rule", "note")
SUBTYPES: tuple[str, ...] = (
    "profile",
    "constraint",
    "commitment",
    "decision",
    "tool_grounded_fact",
    "user_pinned_note",
)
EVIDENCE_LEVELS: tuple[str, ...] = (
    "S0_user_claim",
    "S1_ai_inference",
    "S2_tool_grounded",
    "S3_user_confirmed",
)
FORGET_POLICIES: tuple[str, ...] = ("permanent", "until_changed", "temporary")
# Weakest first: an AI inference is weaker than what the user says about themselves.
EVIDENCE_ORDER: dict[str, int] = {
    "S1_ai_inference": 0,
    "S0_user_claim": 1,
    "S2_tool_grounded": 2,
    "S3_user_confirmed": 3,
}

MARK_FIELDS = {
    "turn_id",
    "keep",
    "span",
    "user_triggered_save",
    "category",
    "subtype",
    "evidence_level",
    "requires_confirmation",
    "importance",
    "ttl_seconds",
    "forget_policy",
    "reason",
}
_ENUMS: dict[str, tuple[str, ...]] = {
    "category": CATEGORIES,
    "subtype": SUBTYPES,
    "evidence_level": EVIDENCE_LEVELS,
    "forget_policy": FORGET_POLICIES,
}


class Span(BaseModel):
    """Kept part of a turn: ``text[start:end]`` in Unicode code points (Python slicing)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    start: int = Field(ge=0)
    end: int = Field(ge=1)


class TurnMark(BaseModel):
    """TurnMarkV1 (seed 002 §3.1): one turn's keep/drop decision and governance labels.

    ``category`` and ``evidence_level`` are required when ``keep`` is true; a dropped turn
    needs only its ``reason``. ``ttl_seconds == 0`` means long-term.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_id: int | str
    keep: bool
    span: Span | None = None
    user_triggered_save: bool = False
    category: Category | None = None
    subtype: Subtype | None = None
    evidence_level: EvidenceLevel | None = None
    requires_confirmation: bool = False
    importance: float = Field(default=0.0, ge=0.0, le=1.0)
    ttl_seconds: int = Field(default=0, ge=0, le=MAX_TTL_SECONDS)
    forget_policy: ForgetPolicy | None = None
    reason: str = ""


class PinIntent(BaseModel):
    """A user's explicit save request (seed 002 §3.3), produced by code, persisted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pin_id: str
    trigger_turn_id: int | str
    target_turn_ids: list[int | str]
    reason: str = "user_explicit_save"
    importance_boost: float = Field(default=0.9, ge=0.0, le=1.0)
    ttl_seconds: int = Field(default=0, ge=0, le=MAX_TTL_SECONDS)
    requires_confirmation: bool = False


@dataclass(frozen=True)
class MarkError:
    """One validation problem: ``code`` is stable, ``field`` a path like ``marks[3].span``."""

    code: str
    turn_id: int | str | None
    field: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "turn_id": self.turn_id,
            "field": self.field,
            "message": self.message,
        }


def _turn_fields(turn: Any) -> tuple[Any, str]:
    if isinstance(turn, Mapping):
        return turn.get("turn_id"), str(turn.get("text") or "")
    return turn.turn_id, str(turn.text or "")


def _lookup(texts: Mapping[Any, str], turn_id: Any) -> tuple[Any, str] | None:
    """Find a turn by id; an LLM may write an int id as a string ("12" for 12)."""
    if isinstance(turn_id, bool) or not isinstance(turn_id, int | str):
        return None  # a list or an object names no turn (and cannot be looked up)
    if turn_id in texts:
        return turn_id, texts[turn_id]
    if isinstance(turn_id, str) and turn_id.isdigit() and int(turn_id) in texts:
        return int(turn_id), texts[int(turn_id)]
    return None


def validate_marks(
    turns: Sequence[Any], marks: Sequence[Any], *, require_all: bool = False
) -> list[MarkError]:
    """Check marks against seed 002 §5 and return every problem (empty: valid).

    ``turns`` are dicts or objects with ``turn_id`` and ``text``; ``marks`` are raw dicts
    (a model's JSON) or :class:`TurnMark`. Codes: ``not_object``, ``unknown_field``,
    ``missing_field``, ``unknown_turn``, ``duplicate_turn``, ``missing_turn`` (with
    ``require_all``), ``not_boolean``, ``not_integer``, ``not_number``, ``not_string``,
    ``bad_enum``, ``span_out_of_range``, ``importance_out_of_range``, ``ttl_negative``,
    ``missing_label`` (a kept turn without category or evidence level).
    """
    texts = {}
    for turn in turns:
        turn_id, text = _turn_fields(turn)
        texts[turn_id] = text
    errors: list[MarkError] = []
    seen: set[Any] = set()
    for index, raw in enumerate(marks):
        where = f"marks[{index}]"
        if isinstance(raw, TurnMark):
            raw = raw.model_dump()
        if not isinstance(raw, Mapping):
            errors.append(MarkError("not_object", None, where, f"{where} must be a JSON object"))
            continue
        turn_id = raw.get("turn_id")
        report_id = turn_id if isinstance(turn_id, int | str) else None

        def add(
            code: str, name: str, message: str, turn_id: Any = report_id, where: str = where
        ) -> None:
            errors.append(MarkError(code, turn_id, f"{where}.{name}", message))

        for name in sorted(set(raw) - MARK_FIELDS):
            add("unknown_field", name, f"'{name}' is not a TurnMarkV1 field")
        if "turn_id" not in raw:
            add("missing_field", "turn_id", "turn_id is required")
            found = None
        else:
            found = _lookup(texts, turn_id)
            if found is None:
                add("unknown_turn", "turn_id", f"turn_id {turn_id!r} is not among the turns")
            elif found[0] in seen:
                add("duplicate_turn", "turn_id", f"turn {turn_id!r} is marked more than once")
            else:
                seen.add(found[0])
        _field_errors(raw, add)
        span = raw.get("span")
        if span is not None:
            errors.extend(_span_errors(span, found, where, report_id))
        if raw.get("keep") is True:
            for name in ("category", "evidence_level"):
                if raw.get(name) is None:
                    add("missing_label", name, f"a kept turn needs {name}")
    if require_all:
        for turn_id in texts:
            if turn_id not in seen:
                errors.append(
                    MarkError("missing_turn", turn_id, "marks", f"turn {turn_id!r} has no mark")
                )
    return errors


class _Add(Protocol):
    def __call__(self, code: str, name: str, message: str) -> None: ...


def _field_errors(raw: Mapping[str, Any], add: _Add) -> None:
    """Problems with a raw mark's typed fields (booleans, enums, numbers, reason)."""
    if "keep" not in raw:
        add("missing_field", "keep", "keep is required (true or false)")
    for name in ("keep", "user_triggered_save", "requires_confirmation"):
        if name in raw and not isinstance(raw[name], bool):
            add("not_boolean", name, f"{name} must be true or false, got {raw[name]!r}")
    for name, allowed in _ENUMS.items():
        value = raw.get(name)
        if value is not None and value not in allowed:
            add("bad_enum", name, f"{name} {value!r} is not one of {', '.join(allowed)}")
    importance = raw.get("importance")
    if importance is not None:
        if isinstance(importance, bool) or not isinstance(importance, int | float):
            add("not_number", "importance", f"importance must be a number, got {importance!r}")
        elif not (math.isfinite(importance) and 0.0 <= importance <= 1.0):
            add("importance_out_of_range", "importance", f"importance {importance} not in [0, 1]")
    ttl = raw.get("ttl_seconds")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            add("not_integer", "ttl_seconds", f"ttl_seconds must be an integer, got {ttl!r}")
        elif ttl < 0:
            add("ttl_negative", "ttl_seconds", f"ttl_seconds must be >= 0, got {ttl}")
        elif ttl > MAX_TTL_SECONDS:
            add(
                "ttl_out_of_range",
                "ttl_seconds",
                f"ttl_seconds {ttl} is over {MAX_TTL_SECONDS} (100 years); use 0 for long-term",
            )
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        add("not_string", "reason", "reason must be a string")


def _span_errors(
    span: Any, found: tuple[Any, str] | None, where: str, turn_id: Any
) -> list[MarkError]:
    field = f"{where}.span"
    if not isinstance(span, Mapping) or set(span) != {"start", "end"}:
        return [MarkError("bad_span", turn_id, field, 'span must be {"start": int, "end": int}')]
    start, end = span["start"], span["end"]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)):
        return [MarkError("not_integer", turn_id, field, "span start and end must be integers")]
    length = len(found[1]) if found else None
    if start < 0 or end <= start or (length is not None and end > length):
        bound = f"len(text) = {length}" if length is not None else "the turn's length"
        return [
            MarkError(
                "span_out_of_range",
                turn_id,
                field,
                f"span [{start}, {end}) must satisfy 0 <= start < end <= {bound} "
                "(Unicode code points)",
            )
        ]
    return []


def parse_marks(
    turns: Sequence[Any], marks: Sequence[Any], *, require_all: bool = False
) -> tuple[list[TurnMark], list[MarkError]]:
    """Validate raw marks; on success return them as ``TurnMark`` in turn order."""
    errors = validate_marks(turns, marks, require_all=require_all)
    if errors:
        return [], errors
    order = {}
    for position, turn in enumerate(turns):
        order[_turn_fields(turn)[0]] = position
    parsed = []
    for raw in marks:
        data = dict(raw.model_dump() if isinstance(raw, TurnMark) else raw)
        found = _lookup({key: "" for key in order}, data["turn_id"])
        assert found is not None
        data["turn_id"] = found[0]
        data = {key: value for key, value in data.items() if value is not None}
        parsed.append(TurnMark.model_validate(data))
    parsed.sort(key=lambda mark: order[mark.turn_id])
    return parsed, []


@dataclass(frozen=True)
class KeptContent:
    """Seed 002 §3.2: what Stage 3 receives, produced by code from the marks."""

    kept_turn_ids: list[int | str]
    kept_spans: list[str]
    filtered_transcript: str


def kept_content(turns: Sequence[Any], marks: Sequence[TurnMark]) -> KeptContent:
    """Kept turn ids in turn order, their text (``text[start:end]`` with a span), joined.

    Raises:
        ValueError: a mark is invalid for these turns (see :func:`validate_marks`).
    """
    errors = validate_marks(turns, marks)
    if errors:
        raise ValueError("; ".join(f"{e.field}: {e.message}" for e in errors))
    by_id = {mark.turn_id: mark for mark in marks}
    ids: list[int | str] = []
    spans: list[str] = []
    lines: list[str] = []
    for turn in turns:
        turn_id, text = _turn_fields(turn)
        mark = by_id.get(turn_id)
        if mark is None and isinstance(turn_id, int):
            mark = by_id.get(str(turn_id))
        if mark is None or not mark.keep:
            continue
        piece = text[mark.span.start : mark.span.end] if mark.span else text
        role = turn.get("role") if isinstance(turn, Mapping) else getattr(turn, "role", None)
        ids.append(turn_id)
        spans.append(piece)
        lines.append(f"[{turn_id}] {role}: {piece}" if role else f"[{turn_id}] {piece}")
    return KeptContent(ids, spans, "\n".join(lines))


class Note(BaseModel):
    """A durable Knowledge/Note record derived from kept turns or a pin.

    ``status``: ``pending`` (needs the user's confirmation: show it as such, never as a
    hard fact), ``confirmed`` (accepted: confirmed by the user or never needed it) or
    ``rejected`` (the user said no; kept for audit, never retrieved).
    """

    model_config = ConfigDict(frozen=True)

    note_id: str
    conversation_id: str
    kind: Literal["turn", "user_pinned_note"]
    category: Category
    subtype: Subtype | None
    evidence_level: EvidenceLevel
    importance: float
    ttl_seconds: int
    forget_policy: ForgetPolicy
    expires_at: str | None
    text: str
    source_turn_ids: list[int | str]
    requires_confirmation: bool
    status: Literal["pending", "confirmed", "rejected"]
    pin_id: str | None = None
    created_at: str
    updated_at: str


class StoredMark(BaseModel):
    """A turn's marks as stored: the effective mark (what governs it now) and the base."""

    model_config = ConfigDict(frozen=True)

    turn_id: int | str
    seq: int
    role: str
    marker: str
    mark: TurnMark
    base: TurnMark
    expires_at: str | None
    expired: bool
    decision: str | None = None


class StoredPin(PinIntent):
    """A persisted pin with its state: ``pending`` (target ambiguous, awaiting the user),
    ``confirmed`` or ``rejected`` (the targets are no longer pinned)."""

    status: Literal["pending", "confirmed", "rejected"]
