"""Checks of the identifiers every entry point accepts (conversation, tenant, note, range),
so the library, the HTTP service, the CLI and MCP refuse the same values the same way."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from convmem.errors import InvalidInputError
from convmem.models import MAX_ID_LENGTH, MAX_SEQ, text_problem

__all__ = [
    "MAX_CONVERSATION_ID",
    "MAX_LIMIT",
    "DeleteResult",
    "UpsertResult",
    "check_conversation_id",
    "check_flag",
    "check_limit",
    "check_list",
    "check_note_id",
    "check_seconds",
    "check_tenant",
    "check_turn_range",
    "check_whole",
]

MAX_CONVERSATION_ID = 200
MAX_TENANT = 100
#: The most rows one listing (turns, chunks, notes, jobs) returns.
MAX_LIMIT = 1_000_000


@dataclass(frozen=True)
class DeleteResult:
    """Seed ``logical_delete_by_source`` result plus what was cascaded."""

    deleted: int
    turns_deleted: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UpsertResult:
    """Seed ``upsert_vector_records`` result."""

    upserted: int
    updated: int
    errors: list[str] = field(default_factory=list)


def _storable(value: str, name: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InvalidInputError(f"{name} {problem}", field=name)


def check_conversation_id(conversation_id: Any) -> str:
    if not isinstance(conversation_id, str) or not conversation_id.strip():
        raise InvalidInputError(
            "conversation_id must be a non-empty string", field="conversation_id"
        )
    if len(conversation_id) > MAX_CONVERSATION_ID:
        raise InvalidInputError(
            f"conversation_id has {len(conversation_id)} characters; the limit is "
            f"{MAX_CONVERSATION_ID}",
            field="conversation_id",
        )
    _storable(conversation_id, "conversation_id")
    return conversation_id


def check_chunk_id(chunk_id: Any, field: str = "chunk_id") -> str:
    """A chunk id a caller writes: 1..:data:`~convmem.models.MAX_ID_LENGTH` characters,
    not blank (a blank or longer one could never be named again to delete it)."""
    if not isinstance(chunk_id, str) or not chunk_id.strip() or len(chunk_id) > MAX_ID_LENGTH:
        size = f"{len(chunk_id)} characters" if isinstance(chunk_id, str) else repr(chunk_id)
        raise InvalidInputError(
            f"{field} must be 1..{MAX_ID_LENGTH} characters and not blank, got {size}", field=field
        )
    return chunk_id


def check_turn_range(turn_range: Any) -> tuple[int, int]:
    if (
        not isinstance(turn_range, list | tuple)
        or len(turn_range) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) for v in turn_range)
        or turn_range[0] < 0
        or turn_range[1] < turn_range[0]
        or turn_range[1] > MAX_SEQ
    ):
        raise InvalidInputError(
            f"turn_range must be [start, end] with integers 0 <= start <= end <= 2**62, "
            f"got {turn_range!r}",
            field="turn_range",
        )
    return int(turn_range[0]), int(turn_range[1])


def check_limit(limit: Any, field: str = "limit") -> int:
    """How many rows a listing returns: an integer in 0..:data:`MAX_LIMIT` (each backend
    read a negative, huge or fractional limit its own way, or failed on it)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
        raise InvalidInputError(
            f"{field} must be an integer in 0..{MAX_LIMIT}, got {limit!r}", field=field
        )
    return int(limit)


def check_flag(value: Any, field: str) -> bool:
    """A yes/no option: True or False only (a string such as ``"no"`` is truthy, and
    ``purge(all_tenants="no")`` purged every tenant)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{field} must be True or False, got {value!r}", field=field)
    return value


def check_whole(value: Any, field: str, least: int = 0, most: int | None = None) -> int:
    """A count: a whole number of at least ``least`` (and at most ``most``), never a bool,
    a float or a string."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or (most is not None and value > most)
    ):
        span = f"in {least}..{most}" if most is not None else f">= {least}"
        raise InvalidInputError(
            f"{field} must be a whole number {span}, got {value!r}", field=field
        )
    return value


def check_seconds(value: Any, field: str, *, zero: bool = False, endless: bool = False) -> float:
    """A span of time in seconds: a number above 0 (or 0 with ``zero``), finite unless
    ``endless``; never NaN, a bool or a string."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or value < 0
        or (value == 0 and not zero)
        or (math.isinf(value) and not endless)
    ):
        least = ">= 0" if zero else "> 0"
        kind = "a number" if endless else "a finite number"
        raise InvalidInputError(
            f"{field} must be {kind} of seconds {least}, got {value!r}", field=field
        )
    return float(value)


def check_list(value: Any, field: str) -> list[Any]:
    """A list (or tuple) of items; a string, a mapping or None is refused, not iterated."""
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{field} must be a list, got {type(value).__name__}", field=field)
    return list(value)


def check_note_id(note_id: Any) -> str:
    if not isinstance(note_id, str) or not note_id.startswith("note_") or len(note_id) > 200:
        raise InvalidInputError(
            f"note_id must be a string like 'note_…' from Memory.notes(), got {note_id!r}",
            field="note_id",
        )
    _storable(note_id, "note_id")
    return note_id


def check_tenant(tenant: Any) -> str:
    if (
        not isinstance(tenant, str)
        or not tenant
        or len(tenant) > MAX_TENANT
        or any(ord(ch) < 32 for ch in tenant)
    ):
        raise InvalidInputError(
            f"tenant must be a non-empty string of at most {MAX_TENANT} printable characters",
            field="tenant",
        )
    _storable(tenant, "tenant")
    return tenant
