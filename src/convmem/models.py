"""Data contracts (pydantic v2, immutable).

``Turn`` is seed 001's MemoryEvent and seed 002's CanonicalTurnV1: one message of a
conversation. ``ChunkRecord`` is seed 001's retrievable evidence unit.

Turn ids are an int (>= 0) or a string that ends in decimal digits (``"t0007"``,
``"turn-12"``); the digits give the turn's sequence number (``"t0007"`` -> 7), which
orders turns and is what ``turn_range`` counts. Within one conversation each sequence
number names exactly one turn.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from convmem.errors import InvalidInputError

__all__ = [
    "INT64",
    "MAX_QUERY_CHARS",
    "MAX_SEQ",
    "ROLES",
    "AddTurnsReceipt",
    "ChunkMetadata",
    "ChunkRecord",
    "FlushResult",
    "Hit",
    "JobInfo",
    "Role",
    "Turn",
    "check_query_text",
    "first_problem",
    "parse_turns",
    "text_problem",
    "turn_sequence",
    "value_problem",
]

Role = Literal["user", "assistant", "tool", "system"]
ROLES: tuple[str, ...] = ("user", "assistant", "tool", "system")

_STRING_ID = re.compile(r"^(?:[^\d]*?)(\d+)$")
MAX_ID_LENGTH = 200
MAX_SEQ = 2**62  # sequence numbers and other stored integers fit SQLite's 64 bits


def turn_sequence(turn_id: int | str) -> int:
    """Return the sequence number a turn id stands for.

    Raises:
        InvalidInputError: the id is negative, empty, too long, or a string that does not
            end in digits.
    """
    if isinstance(turn_id, bool):
        raise InvalidInputError(
            f"turn_id must be an int or a string ending in digits, got the boolean {turn_id}",
            field="turn_id",
        )
    if isinstance(turn_id, int):
        if not 0 <= turn_id <= MAX_SEQ:
            raise InvalidInputError(f"turn_id must be in 0..2**62, got {turn_id}", field="turn_id")
        return turn_id
    if not turn_id or len(turn_id) > MAX_ID_LENGTH:
        raise InvalidInputError(
            f"turn_id must be 1..{MAX_ID_LENGTH} characters, got {len(turn_id)}", field="turn_id"
        )
    match = _STRING_ID.match(turn_id)
    if match is None:
        raise InvalidInputError(
            f"turn_id {turn_id!r} does not end in digits; use an int or an id like 't0007' "
            "whose trailing digits give the turn's order",
            field="turn_id",
        )
    seq = int(match.group(1))
    if seq > MAX_SEQ:
        raise InvalidInputError(
            f"turn_id {turn_id!r} ends in a number above 2**62", field="turn_id"
        )
    return seq


INT64 = 2**63 - 1  # the widest integer both stores keep
#: The longest question a search takes (characters), on every path: library, HTTP, CLI, MCP.
MAX_QUERY_CHARS = 8000
#: The longest turn text a memory stores by default (``Memory.open(max_text_chars=...)``).
MAX_TEXT_CHARS = 32000


def text_problem(text: str) -> str | None:
    """Why no store can keep ``text`` (a NUL, a lone surrogate), or None if it can.

    SQLite would keep a NUL that PostgreSQL refuses, and a lone surrogate cannot be encoded
    at all; every entry point refuses both, so the two backends accept the same text.
    """
    if "\x00" in text:
        return "holds U+0000 (NUL), which the stores cannot keep; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds a lone surrogate at character {exc.start} (an unpaired \\ud800-\\udfff "
            "escape), which is not valid Unicode; send the text as UTF-8"
        )
    return None


def value_problem(value: Any) -> str | None:
    """Why no store can keep one scalar value (see :func:`text_problem`), or None."""
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -INT64 <= value <= INT64:
        return f"is {value}, beyond the 64-bit integers the stores hold; send a smaller number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value}, which is not a finite number; send a finite number"
    return None


def first_problem(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first ``(path, message)`` of a value no store can keep, depth first, or None.

    Walks dicts (keys too), lists and tuples; ``path`` names the value (``meta.source``,
    ``tags[2]``).
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in reversed(item.items()):
                child_path = f"{where}.{key}" if where else str(key)
                problem = text_problem(key) if isinstance(key, str) else None
                if problem:
                    return child_path, f"the key {problem}"
                stack.append((child, child_path))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(item))))
        else:
            problem = value_problem(item)
            if problem:
                return where, problem
    return None


def check_query_text(query: Any, field: str = "query_text") -> str:
    """A search question: non-empty text of at most :data:`MAX_QUERY_CHARS` characters that
    a store can be asked about (the HTTP service's limit too).

    Raises:
        InvalidInputError: naming ``field``, for an empty or longer question or one holding
            a NUL or a lone surrogate.
    """
    if not isinstance(query, str) or not any(_visible(ch) for ch in query):
        raise InvalidInputError(f"{field} is empty; send the question to search for", field=field)
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInputError(
            f"{field} has {len(query)} characters, more than the limit of {MAX_QUERY_CHARS}; "
            "send the question or the newest lines of the dialogue, not a whole document",
            field=field,
        )
    problem = text_problem(query)
    if problem is not None:
        raise InvalidInputError(f"{field} {problem}", field=field)
    return query


def runs_backwards(span: Sequence[Any] | None) -> bool:
    """Whether a ``[start, end]`` time span ends before it starts (False when it is no pair
    of comparable ISO 8601 times: the field's own check says what is wrong then)."""
    if span is None:
        return False
    try:
        start, end = (datetime.fromisoformat(time) for time in span)
        return start > end
    except (TypeError, ValueError):
        return False


def _visible(ch: str) -> bool:
    """Whether a character says something: not a blank, a control or a format character
    (a zero-width space or joiner, a byte order mark), which the text cleaning drops."""
    return not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf")


def _storable(value: Any, what: str) -> Any:
    """A pydantic field validator's check: ``value`` as is, or a ValueError naming where in
    it (under the name ``what``) a store could not keep it (:func:`first_problem`)."""
    problem = first_problem(value, what)
    if problem is not None:
        raise ValueError(f"{problem[0]} {problem[1]}")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Turn(_Frozen):
    """One message of a conversation (seed 001 MemoryEvent, seed 002 CanonicalTurnV1).

    ``speaker`` is accepted as an alias of ``role`` and ``timestamp_iso`` of ``timestamp``.
    A missing timestamp becomes the time the turn is accepted.
    """

    turn_id: int | str
    role: Role
    text: str
    timestamp: datetime | None = None
    name: str | None = Field(default=None, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, field in (("speaker", "role"), ("timestamp_iso", "timestamp")):
            if alias in data:
                value = data.pop(alias)
                if field in data and data[field] != value:
                    raise ValueError(f"{alias!r} and {field!r} disagree; send one of them")
                data[field] = value
        data.pop("conversation_id", None)  # the conversation is named by the call
        if isinstance(data.get("text"), bytes | bytearray):
            try:
                data["text"] = bytes(data["text"]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"text is not valid UTF-8 (bad byte at offset {exc.start}); "
                    "decode it before sending"
                ) from None
        return data

    @field_validator("turn_id", mode="before")
    @classmethod
    def _turn_id_type(cls, value: Any) -> Any:
        # Before coercion: True would otherwise become turn 1 and 7.0 turn 7.
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"turn_id must be an int or a string ending in digits, got {value!r}")
        return value

    @field_validator("turn_id")
    @classmethod
    def _turn_id(cls, value: int | str) -> int | str:
        try:
            turn_sequence(value)
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is empty; send the turn's words, or leave the turn out")
        return value

    @field_validator("turn_id", "text", "name", "meta")
    @classmethod
    def _keepable(cls, value: Any, info: ValidationInfo) -> Any:
        return _storable(value, info.field_name or "value")

    @field_validator("timestamp")
    @classmethod
    def _timestamp(cls, value: datetime | None) -> datetime | None:
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            raise ValueError(
                f"timestamp {value.isoformat()} has no time zone; add one, "
                "for example 2026-02-02T10:15:30+08:00 or ...Z"
            )
        return value

    @property
    def seq(self) -> int:
        """The turn's sequence number (see the module docstring)."""
        return turn_sequence(self.turn_id)


def parse_turns(turns: list[Any], *, max_text_chars: int) -> list[Turn]:
    """Validate raw turns (dicts or ``Turn``), collecting every problem with its field path.

    Raises:
        InvalidInputError: with ``errors`` listing each problem as ``turns[i].field``.
    """
    if not isinstance(turns, list | tuple):
        raise InvalidInputError(
            f"turns must be a list of turns, got {type(turns).__name__}", field="turns"
        )
    if not turns:
        raise InvalidInputError("turns is empty; send at least one turn", field="turns")
    parsed: list[Turn] = []
    errors: list[dict[str, Any]] = []
    for index, raw in enumerate(turns):
        try:
            turn = raw if isinstance(raw, Turn) else Turn.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(part) for part in err["loc"])
                field = f"turns[{index}].{loc}" if loc else f"turns[{index}]"
                message = str(err["msg"]).removeprefix("Value error, ")
                errors.append({"field": field, "message": message})
            continue
        if len(turn.text) > max_text_chars:
            errors.append(
                {
                    "field": f"turns[{index}].text",
                    "message": f"text has {len(turn.text)} characters, more than the limit "
                    f"of {max_text_chars}; split the turn or raise max_text_chars",
                }
            )
        # against the valid turn before it: a caller mends every problem in one round
        if parsed and turn.seq <= parsed[-1].seq:
            before = parsed[-1]
            errors.append(
                {
                    "field": f"turns[{index}].turn_id",
                    "message": f"turn ids must increase within a batch: "
                    f"{turn.turn_id!r} (sequence {turn.seq}) follows "
                    f"{before.turn_id!r} (sequence {before.seq})",
                }
            )
        parsed.append(turn)
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidInputError(
            f"{first['field']}: {first['message']}{more}", field=first["field"], errors=errors
        )
    return parsed


def _aware_time(value: str, name: str) -> str:
    """An ISO 8601 time with a zone, as stored; anything else is refused with the fix."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{name} {value[:40]!r} is not an ISO 8601 time; send e.g. 2026-02-02T10:15:30+08:00"
        ) from None
    if parsed.tzinfo is None:
        raise ValueError(f"{name} {value!r} has no time zone; add one, e.g. +08:00 or Z")
    return value


class ChunkMetadata(BaseModel):
    """Seed 001 chunk metadata plus tenant and governance fields."""

    model_config = ConfigDict(frozen=True, extra="allow")

    conversation_id: str
    turn_range: tuple[int, int]
    timestamp_range: tuple[str, str] | None = None
    participants: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    intent_tag: str = "dialogue"
    chunk_version: int = 1
    deleted: bool = False
    tenant: str = "default"
    provisional: bool = False
    importance: float | None = None
    category: str | None = None
    expires_at: str | None = None
    pinned: bool = False
    requires_confirmation: bool = False
    # The turns whose text the chunk holds (kept turns); empty: every turn of turn_range.
    turn_seqs: list[int] = Field(default_factory=list)
    # Where each of those turns' lines sits in the text ([start, end) characters), in order.
    turn_offsets: list[tuple[int, int]] = Field(default_factory=list)

    @field_validator("turn_range")
    @classmethod
    def _range(cls, value: tuple[int, int]) -> tuple[int, int]:
        if value[0] < 0 or value[1] < value[0] or value[1] > MAX_SEQ:
            raise ValueError(
                f"turn_range {list(value)} must be [start, end] with 0 <= start <= end <= 2**62"
            )
        return value

    @field_validator("expires_at")
    @classmethod
    def _expires(cls, value: str | None) -> str | None:
        return None if value is None else _aware_time(value, "expires_at")

    @field_validator("timestamp_range")
    @classmethod
    def _span(cls, value: tuple[str, str] | None) -> tuple[str, str] | None:
        if value is None:
            return None
        return (
            _aware_time(value[0], "timestamp_range[0]"),
            _aware_time(value[1], "timestamp_range[1]"),
        )


class ChunkRecord(BaseModel):
    """A retrievable evidence unit (seed 001 ChunkRecord)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk_id: str
    text: str
    metadata: ChunkMetadata

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        # Only what no text can hold: chunks are also built from stored turns and read back,
        # and a store of an earlier release may hold a NUL (Memory.upsert_chunks refuses
        # one in what a caller sends).
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"text {text_problem(value)}") from exc
        if not value.strip():
            raise ValueError("chunk text is empty")
        return value


class Hit(BaseModel):
    """One search result.

    ``score``: higher is better. From ``Memory.search`` (and every path with ``min_score``)
    it is a calibrated relevance in [0, 1], the same scale for every query, never higher
    than the hit above it within one question (a question split into parts interleaves
    the parts' hits, each part's in its own order: ``metadata["sub_query"]`` names the
    part); ``metadata["rank_score"]`` keeps the fused ranking score. A turn-level hit's
    ``text`` is its evidence turn and ``context`` the chunk around it.
    """

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    score: float
    text: str
    metadata: dict[str, Any]
    tier: str = "MTM"
    # Seed 002 §5.1: holds something awaiting the user's confirmation; present it as such.
    pending: bool = False
    # A turn-level hit's surrounding chunk (its text is then the evidence turn's line).
    context: str | None = None


class AddTurnsReceipt(BaseModel):
    """What ``Memory.add_turns`` durably accepted."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    accepted_turn_ids: list[int | str]
    duplicate_turn_ids: list[int | str]
    job_id: int | None
    accepted_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class JobInfo(BaseModel):
    """State of one index job."""

    model_config = ConfigDict(frozen=True)

    job_id: int
    conversation_id: str
    status: Literal["pending", "running", "done", "failed"]
    attempts: int
    error_code: str | None
    error_message: str | None
    next_retry_at: datetime | None
    created_at: datetime
    updated_at: datetime


class FlushResult(BaseModel):
    """What ``Memory.flush`` saw when the backlog drained."""

    model_config = ConfigDict(frozen=True)

    pending: int
    failed: int
