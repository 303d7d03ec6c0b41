"""Stable, reproducible chunk ids."""

from __future__ import annotations

import hashlib
import json

__all__ = ["chunk_id"]


def chunk_id(conversation_id: str, start_turn: int, end_turn: int, chunk_version: int) -> str:
    """``chk_`` + sha256 of the seed's four fields, encoded unambiguously.

    The fields are serialised as a JSON array, so no choice of conversation id can make
    two different tuples collide (``("a1", 2, ...)`` and ``("a", 12, ...)`` differ). The
    first 128 bits of the digest are kept.
    """
    payload = json.dumps(
        [conversation_id, int(start_turn), int(end_turn), int(chunk_version)],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return "chk_" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
