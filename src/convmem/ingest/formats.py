"""Readers for conversation files: JSON lines of turns, and LoCoMo-style exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from convmem.errors import InvalidInputError
from convmem.text import read_utf8
from convmem.text.dates import MONTHS

__all__ = [
    "iter_conversations",
    "iter_located_conversations",
    "locomo_conversation",
    "parse_locomo_time",
]

_LOCOMO_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)
_MONTHS = {name: index for index, name in enumerate(MONTHS, start=1)}


def parse_locomo_time(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> an aware UTC datetime."""
    match = _LOCOMO_TIME.search(value)
    if match is None:
        raise InvalidInputError(f"unrecognised session time {value!r}", field="session_date_time")
    hour, minute, half, day, month, year = match.groups()
    hour_24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    month_index = _MONTHS.get(month.lower())
    if month_index is None:
        raise InvalidInputError(f"unrecognised month in {value!r}", field="session_date_time")
    return datetime(int(year), month_index, int(day), hour_24, int(minute), tzinfo=UTC)


def locomo_conversation(sample: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """One LoCoMo sample -> ``(conversation_id, turns)`` with global integer turn ids.

    Both speakers are people, so both get role ``user`` and their name; the LoCoMo
    ``dia_id`` is kept in ``meta``. Turns of a session are a second apart from its start.
    """
    conversation = sample["conversation"]
    conversation_id = str(sample.get("sample_id", "locomo"))
    sessions = sorted(
        (int(key.split("_")[1]), key)
        for key in conversation
        if re.fullmatch(r"session_\d+", key) and conversation[key]
    )
    turns: list[dict[str, Any]] = []
    for number, key in sessions:
        start = parse_locomo_time(conversation[f"{key}_date_time"])
        for offset, turn in enumerate(conversation[key]):
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]".strip()
            if not text.strip():
                continue
            turns.append(
                {
                    "turn_id": len(turns),
                    "role": "user",
                    "name": turn["speaker"],
                    "text": text,
                    "timestamp": (start + timedelta(seconds=offset)).isoformat(),
                    "meta": {"dia_id": turn.get("dia_id"), "session": number},
                }
            )
    return conversation_id, turns


def iter_conversations(path: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Conversations in a file, in file order.

    ``.jsonl``: one turn per line with ``conversation_id`` (consecutive lines of one
    conversation form a batch). ``.json``: a LoCoMo sample or a list of them. A UTF-8 byte
    order mark is accepted.
    """
    for conversation_id, turns, _where in iter_located_conversations(path):
        yield conversation_id, turns


def iter_located_conversations(path: Path) -> Iterator[tuple[str, list[dict[str, Any]], list[str]]]:
    """Like :func:`iter_conversations`, with where each turn came from: ``"FILE:LINE"`` for
    ``.jsonl``, ``"FILE sample N"`` for ``.json`` (for error messages that name the line)."""
    text = read_utf8(path, field="file")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{path} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                field="file",
            ) from None
        for index, sample in enumerate(data if isinstance(data, list) else [data]):
            sample_id, turns = _locomo_sample(path, index, sample)
            yield sample_id, turns, [f"{path} sample {index}"] * len(turns)
        return
    current: str | None = None
    batch: list[dict[str, Any]] = []
    where: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{path}:{number} is not JSON: {exc.msg}", field=f"line {number}"
            ) from None
        conversation_id = row.get("conversation_id") if isinstance(row, dict) else None
        if not isinstance(conversation_id, str):
            raise InvalidInputError(
                f"{path}:{number} is not a turn with a conversation_id string",
                field=f"line {number}.conversation_id",
            )
        if conversation_id != current and batch:
            assert current is not None
            yield current, batch, where
            batch, where = [], []
        current = conversation_id
        batch.append(row)
        where.append(f"{path}:{number}")
    if batch and current is not None:
        yield current, batch, where


def _locomo_sample(path: Path, index: int, sample: Any) -> tuple[str, list[dict[str, Any]]]:
    """:func:`locomo_conversation` of a file's ``index``-th sample, or an error naming what
    the sample lacks (a ``.json`` file holds LoCoMo samples: ``conversation`` with
    ``session_N``, ``session_N_date_time`` and turns with ``speaker`` and ``text``)."""
    where = f"{path} sample {index}"
    if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
        raise InvalidInputError(
            f"{where} is not a LoCoMo sample (an object whose 'conversation' holds session_1, "
            "session_1_date_time, ...); send turns as .jsonl instead",
            field="file",
        )
    try:
        return locomo_conversation(sample)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        lacks = f"lacks {exc}" if isinstance(exc, KeyError) else f"is malformed ({exc})"
        raise InvalidInputError(
            f"{where} {lacks}: each session_N needs session_N_date_time and turns with "
            "'speaker' and 'text'",
            field="file",
        ) from None
