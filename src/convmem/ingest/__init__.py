"""Incremental chunking with context prefixes and stable chunk ids (seed 001)."""

from convmem.ingest.chunker import (
    ChunkingPolicy,
    ChunkPlan,
    ChunkTurn,
    plan_chunks,
    render_chunk,
    spoken,
    turn_lines,
)
from convmem.ingest.ids import chunk_id

__all__ = [
    "ChunkPlan",
    "ChunkTurn",
    "ChunkingPolicy",
    "chunk_id",
    "plan_chunks",
    "render_chunk",
    "spoken",
    "turn_lines",
]
