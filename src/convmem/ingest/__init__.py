"""Incremental chunking with context prefixes and stable chunk ids (seed 001)."""

from convmem.ingest.chunker import (
    MAX_CLAUSES,
    ChunkingPolicy,
    ChunkPlan,
    ChunkTurn,
    chunk_pieces,
    line_clauses,
    plan_chunks,
    render_chunk,
    spoken,
    turn_lines,
    vector_rows,
)
from convmem.ingest.ids import chunk_id
from convmem.ingest.tokens import known_tokens, line_tokens

__all__ = [
    "MAX_CLAUSES",
    "ChunkPlan",
    "ChunkTurn",
    "ChunkingPolicy",
    "chunk_id",
    "chunk_pieces",
    "known_tokens",
    "line_clauses",
    "line_tokens",
    "plan_chunks",
    "render_chunk",
    "spoken",
    "turn_lines",
    "vector_rows",
]
