"""Seed 001's module name; see :mod:`convmem.compat.rag_ingest_incremental`."""

from convmem.compat.rag_ingest_incremental import (
    EmbeddingService,
    build_incremental_chunks,
    configure,
    embed_chunk,
    embed_db,
    logical_delete_by_source,
    upsert_vector_records,
)

__all__ = [
    "EmbeddingService",
    "build_incremental_chunks",
    "configure",
    "embed_chunk",
    "embed_db",
    "logical_delete_by_source",
    "upsert_vector_records",
]
