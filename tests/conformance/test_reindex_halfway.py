"""A store part way through a reindex between two models of one dimension (a reindex
killed after its first batch, or one still running): vector search reads only the
vectors of the store's model. Every path kept rows by their vector's length alone, so
the old model's vectors were scored against the new model's queries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import convmem.memory as memory_module
from convmem import EmbeddingMismatchError, HashingEmbedder, Memory
from convmem.embed.base import Vectors
from convmem.governance import KeepAllMarker
from helpers import make_turns

TOPICS = {
    "dentist": ["My dentist appointment is on Tuesday at nine.", "ok"],
    "piano": ["My daughter starts piano lessons next month.", "ok"],
    "lake": ["我们周末去西湖划船，看荷花。", "好"],
    "tyres": ["I need new winter tyres for the car.", "ok"],
}


class RolledHashing(HashingEmbedder):
    """Another model of the same dimension: the hashing vectors, rolled."""

    @property
    def model_id(self) -> str:
        return "hashing-rolled-512"

    def embed(self, texts: Any) -> Vectors:
        return np.roll(super().embed(texts), 7, axis=1)


def _open(url: str, embedder: Any, **options: Any) -> Memory:
    options.setdefault("workers", 0)
    return Memory.open(url, embedder=embedder, marker=KeepAllMarker(), **options)


def _halfway(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _open(url, HashingEmbedder()) as memory:
        for conversation, texts in TOPICS.items():
            memory.add_turns(conversation, make_turns(texts))
        memory.flush()
    embed_chunks, batches = memory_module.embed_chunks, []

    def killed_after_one_batch(embedding: Any, items: Any) -> Any:
        if batches:
            raise KeyboardInterrupt  # as SIGKILL would stop it: nothing after this batch
        batches.append(items)
        return embed_chunks(embedding, items)

    monkeypatch.setattr(memory_module, "embed_chunks", killed_after_one_batch)
    with (
        _open(url, RolledHashing(), allow_model_change=True) as memory,
        pytest.raises(KeyboardInterrupt),
    ):
        memory.reindex(batch_size=1)
    monkeypatch.setattr(memory_module, "embed_chunks", embed_chunks)


def test_vector_search_part_way_through_a_reindex_reads_the_new_models_rows(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _halfway(backend_url, monkeypatch)
    with _open(backend_url, RolledHashing(), ann_min_rows=1) as memory:
        models = dict(memory.store._db().execute("SELECT chunk_id, model_id FROM chunks"))
        assert sorted(models.values()).count("hashing-rolled-512") == 1
        for query in ("piano lessons for my daughter", "西湖划船", "winter tyres"):
            for scope in ({}, {"conversation_id": "piano"}):
                hits = memory.search(
                    query, mode="vector", granularity="chunk", min_score=0, filters=scope
                )
                assert {models[hit.chunk_id] for hit in hits} <= {"hashing-rolled-512"}, query
        # a process still on the old model, passing its own vector: refused, not mixed
    with _open(backend_url, HashingEmbedder(), allow_model_change=True) as old:
        vector = HashingEmbedder().embed(["winter tyres"])[0]
        with pytest.raises(EmbeddingMismatchError):
            old.search("winter tyres", mode="vector", query_vector=list(vector))
