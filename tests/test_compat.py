"""The seed-compatible module keeps the seed's names and return shapes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rag_ingest_incremental as rag
from convmem import EmbedderError, HashingEmbedder, InvalidInputError
from convmem.compat import rag_ingest_incremental as implementation


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[None]:
    rag.configure(store=str(tmp_path / "seed.db"), embedder=HashingEmbedder())
    yield
    implementation._close()


EVENTS = [
    {
        "conversation_id": "conv_abc",
        "turn_id": 18,
        "speaker": "user",
        "text": "我护照是 2025-02-18 过期。",
        "timestamp": "2026-02-02T10:15:30+08:00",
    },
    {
        "conversation_id": "conv_abc",
        "turn_id": 19,
        "speaker": "assistant",
        "text": "了解，您的护照将于2025年2月18日过期。请问您是否有出行计划？",
        "timestamp": "2026-02-02T10:15:32+08:00",
    },
    {
        "conversation_id": "conv_abc",
        "turn_id": 20,
        "speaker": "user",
        "text": "下个月去东京，要准备什么？",
        "timestamp": "2026-02-02T10:16:00+08:00",
    },
]


def test_the_seed_flow(configured: None) -> None:
    built = rag.build_incremental_chunks(EVENTS)
    assert set(built) == {"conversation_id", "turn_range", "chunks"}
    assert built["conversation_id"] == "conv_abc" and built["turn_range"] == [18, 20]
    chunk = built["chunks"][0]
    assert set(chunk) == {"chunk_id", "text", "metadata"}
    assert chunk["text"].startswith("[上下文：2026-02-02")
    assert rag.build_incremental_chunks(EVENTS) == built  # pure and reproducible

    written = rag.upsert_vector_records(built["chunks"])
    assert written == {"upserted": len(built["chunks"]), "updated": 0, "errors": []}
    assert rag.upsert_vector_records(built["chunks"])["updated"] == len(built["chunks"])

    result = rag.embed_db("东京之行要准备什么", top_k=6)
    assert set(result) == {"query_text", "top_k", "filters", "hits"}
    assert result["filters"] == {"deleted": False}
    assert result["hits"] and set(result["hits"][0]) == {"chunk_id", "score", "text", "metadata"}
    filtered = rag.embed_db(
        "护照", top_k=3, filters={"conversation_id": "conv_abc", "speakers": "user"}
    )
    assert filtered["hits"] and filtered["top_k"] == 3
    hinted = rag.embed_db(
        "护照",
        top_k=3,
        filters={"conversation_id": "conv_abc"},
        hints={"strategies": ["deep_search"]},
    )
    assert hinted["hints"] == {"strategies": ["deep_search"]}
    assert hinted["hits"] and {hit["tier"] for hit in hinted["hits"]} <= {"STM", "MTM", "LTM"}

    deleted = rag.logical_delete_by_source("conv_abc", chunk_ids=[chunk["chunk_id"]])
    assert deleted == {"deleted": 1, "errors": []}
    assert all(
        hit["chunk_id"] != chunk["chunk_id"] for hit in rag.embed_db("护照", top_k=10)["hits"]
    )

    vector = rag.embed_chunk("我护照什么时候过期？")
    assert (
        isinstance(vector, list)
        and len(vector) == 512
        and abs(sum(v * v for v in vector) - 1) < 1e-4
    )
    service = rag.EmbeddingService.get_instance()
    assert service.embed_chunk("东京之行要准备什么？") == rag.embed_chunk("东京之行要准备什么？")
    assert len(service.embed_batch(["护照过期日期", "签证要求", "行程安排"])) == 3


def test_build_rejects_mixed_conversations() -> None:
    with pytest.raises(ValueError, match="conversation_id"):
        rag.build_incremental_chunks([EVENTS[0], {**EVENTS[1], "conversation_id": "other"}])


def test_wrong_shapes_are_refused_naming_the_field(configured: None) -> None:
    cases = [
        ("events", lambda: rag.build_incremental_chunks("abc")),
        ("events", lambda: rag.build_incremental_chunks(EVENTS[0])),
        ("events[1]", lambda: rag.build_incremental_chunks([EVENTS[0], 5])),
        (
            "events.conversation_id",
            lambda: rag.build_incremental_chunks([{**EVENTS[0], "conversation_id": ["c"]}]),
        ),
        ("chunks", lambda: rag.upsert_vector_records(None)),
        ("chunks", lambda: rag.upsert_vector_records("abc")),
    ]
    for field, call in cases:
        with pytest.raises(InvalidInputError) as caught:
            call()
        assert caught.value.field == field


def test_a_refused_configure_keeps_the_earlier_store(configured: None, tmp_path: Path) -> None:
    chunks = rag.build_incremental_chunks(EVENTS)["chunks"]
    assert rag.upsert_vector_records(chunks)["errors"] == []
    with pytest.raises(InvalidInputError) as caught:
        rag.configure(store=str(tmp_path / "other.db"), embedder="hashing", workers="1")
    assert caught.value.field == "workers"
    hits = rag.embed_db("护照", top_k=3)["hits"]  # the earlier store, reopened
    assert hits and "护照" in hits[0]["text"]
    assert not (tmp_path / "other.db").exists()


@pytest.mark.parametrize("xdg_data_home", [None, "/srv/data"])
def test_default_store_is_in_the_user_data_dir_not_tmp(
    monkeypatch: pytest.MonkeyPatch, xdg_data_home: str | None
) -> None:
    import platformdirs

    from convmem.store import default_store_path

    # Independent of the caller's environment: CI and the docs test set XDG_DATA_HOME.
    monkeypatch.setenv("HOME", "/home/someone")
    if xdg_data_home is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg_data_home)
    path = default_store_path()
    assert path == Path(platformdirs.user_data_dir("convmem", appauthor=False)) / "memory.db"
    assert path.name == "memory.db" and not str(path).startswith("/tmp")
    if xdg_data_home is not None and sys.platform.startswith("linux"):
        assert path == Path(xdg_data_home) / "convmem" / "memory.db"


def test_build_refuses_a_conversation_id_upsert_would_refuse() -> None:
    """A blank or over-long id built fine, then every chunk failed in upsert_vector_records."""
    for bad in ("", "   ", "x" * 201):
        with pytest.raises(InvalidInputError) as caught:
            rag.build_incremental_chunks([{**EVENTS[0], "conversation_id": bad}])
        assert caught.value.field == "events.conversation_id"


def test_embed_db_hits_are_chunk_records_with_their_evidence(configured: None) -> None:
    """Seed 001 API 4: one ChunkRecord view per chunk (text with its [上下文：…] prefix); the
    turn-level search answered one chunk once per turn, each hit a bare line."""
    built = rag.build_incremental_chunks(EVENTS)
    (chunk,) = built["chunks"]
    rag.upsert_vector_records(built["chunks"])
    result = rag.embed_db("护照什么时候过期，东京要准备什么", top_k=6)
    ids = [hit["chunk_id"] for hit in result["hits"]]
    assert ids == [chunk["chunk_id"]]
    (hit,) = result["hits"]
    assert hit["text"] == chunk["text"] and hit["text"].startswith("[上下文：")
    assert hit["metadata"]["turn_range"] == [18, 20]
    evidence = hit["metadata"]["evidence_turns"]
    assert len(evidence) > 1 and set(evidence) <= {18, 19, 20}
    assert hit["metadata"]["evidence_text"] in chunk["text"]


def test_embed_db_top_k_bounds_the_chunks_and_is_the_one_used(configured: None) -> None:
    events = [
        {**EVENTS[0], "conversation_id": f"c{i}", "text": f"我的护照放在第{i}个抽屉"}
        for i in range(8)
    ]
    for event in events:
        rag.upsert_vector_records(rag.build_incremental_chunks([event])["chunks"])
    two = rag.embed_db("护照放在哪里", top_k=2)
    assert two["top_k"] == 2 and len(two["hits"]) == 2
    hinted = rag.embed_db(
        "护照放在哪里", top_k=2, hints={"strategies": ["semantic_search"], "params": {"top_k": 5}}
    )
    assert hinted["top_k"] == 5  # echoed 2, the argument hints.params.top_k overrode
    assert len(hinted["hits"]) == 5 == len({hit["chunk_id"] for hit in hinted["hits"]})


def test_an_unknown_embedder_is_invalid_input_and_creates_no_store(
    configured: None, tmp_path: Path
) -> None:
    target = tmp_path / "new.db"
    with pytest.raises(InvalidInputError) as caught:
        rag.configure(store=str(target), embedder="nope")
    assert caught.value.field == "embedder" and "Unknown embedder 'nope'" in str(caught.value)
    assert isinstance(caught.value, EmbedderError)  # what callers caught before
    assert not target.exists()


def test_the_seed_service_takes_a_spec_and_refuses_what_embed_chunk_refuses(
    configured: None,
) -> None:
    service = rag.EmbeddingService.get_instance("hashing")
    assert service.model_id == HashingEmbedder().model_id
    cases: list[tuple[str, Any]] = [
        ("text", lambda: service.embed_chunk(None)),
        ("text", lambda: service.embed_chunk("")),
        ("text", lambda: rag.embed_chunk("")),
        ("texts", lambda: service.embed_batch("abc")),
        ("texts", lambda: service.embed_batch(None)),
        ("texts[0]", lambda: service.embed_batch([5])),
        ("embedder", lambda: rag.EmbeddingService.get_instance("nope")),
        ("embedder", lambda: rag.EmbeddingService.get_instance(5)),
    ]
    for field, call in cases:
        with pytest.raises(InvalidInputError) as caught:
            call()
        assert caught.value.field == field
    with pytest.raises(InvalidInputError, match=r"pass \[text\]"):
        service.embed_batch("abc")
