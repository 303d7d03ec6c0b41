"""One behaviour on every store: each test runs on SQLite and on PostgreSQL.

The reference for filters is :func:`convmem.store.matches` (plain Python over the
metadata); every backend's SQL must agree with it, and the backends with each other.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from conftest import drop_schema, postgres_base_url
from convmem import HashingEmbedder, Memory
from convmem.errors import (
    EmbedderError,
    EmbeddingMismatchError,
    FilterError,
    InvalidInputError,
    NotFoundError,
    TurnConflictError,
)
from convmem.governance import KeepAllMarker
from convmem.ingest import known_tokens, line_clauses, line_tokens, turn_lines
from convmem.models import ChunkMetadata, Hit
from convmem.store import Backend, Store, matches, matrix_rows, parse_filters
from convmem.store.filters import HOLDS, Condition, FilterSpec
from convmem.store.schema import SCHEMA_VERSION
from convmem.text import tokenize
from helpers import make_turns


@contextmanager
def opened(url: str, **options: Any) -> Iterator[Memory]:
    options.setdefault("embedder", HashingEmbedder())
    options.setdefault("marker", KeepAllMarker())
    options.setdefault("workers", 0)
    with Memory.open(url, **options) as memory:
        yield memory


def chunk(
    chunk_id: str,
    text: str,
    *,
    conversation: str = "c1",
    turns: tuple[int, int] = (0, 1),
    **meta: Any,
) -> dict[str, Any]:
    return {
        "chunk_id": chunk_id,
        "text": text,
        "metadata": {"conversation_id": conversation, "turn_range": list(turns), **meta},
    }


def rows_of(memory: Memory) -> dict[int, str]:
    """rowid -> chunk_id of every chunk row of the tenant (live or not)."""
    return dict(
        memory.store._db()
        .execute("SELECT rowid, chunk_id FROM chunks WHERE tenant=?", (memory.tenant,))
        .fetchall()
    )


def admitted(memory: Memory, filters: dict[str, Any]) -> set[str]:
    """Chunk ids the backend's SQL admits under the filter."""
    rows = rows_of(memory)
    spec = parse_filters(filters, tenant=memory.tenant)
    return {rows[rowid] for rowid in memory.store.admit(memory.tenant, spec, list(rows))}


def expected(records: list[dict[str, Any]], filters: dict[str, Any], tenant: str) -> set[str]:
    """The reference answer: the records' metadata (defaults filled in) under ``matches``."""
    spec = parse_filters(filters, tenant=tenant)
    return {
        r["chunk_id"]
        for r in records
        if matches(ChunkMetadata.model_validate(r["metadata"]).model_dump(), spec)
    }


# A record set that exercises every field, with NULLs, ints and floats mixed.
RECORDS = [
    chunk(
        "a",
        "alpha harbor lighthouse",
        conversation="c1",
        turns=(0, 3),
        participants=["Ann", "Bob"],
        speakers=["user"],
        intent_tag="dialogue",
        category="preference",
        importance=0.9,
        pinned=True,
        chunk_version=1,
        timestamp_range=["2026-01-01T10:00:00+08:00", "2026-01-01T10:05:00+08:00"],
        tags=["证词", "伏笔"],
    ),
    chunk(
        "b",
        "bravo harbor ferry",
        conversation="c1",
        turns=(4, 7),
        participants=["Bob"],
        speakers=["user", "assistant"],
        intent_tag="task",
        importance=0.3,
        chunk_version=2,
        tags="证词",  # no list: no tags
        timestamp_range=["2026-01-02T09:00:00Z", "2026-01-02T09:30:00Z"],
    ),
    chunk(
        "c",
        "charlie 灯塔 港口",
        conversation="c2",
        turns=(0, 1),
        participants=["李雷"],
        speakers=["assistant"],
        category="profile",
        importance=1,
        requires_confirmation=True,
        chunk_version=1,
        tags=["伏笔", 7, ["证词"], {"证词": 1}],  # only its strings are tags
    ),
    chunk(
        "d",
        "delta tide tables",
        conversation="c3",
        turns=(10, 20),
        participants=[],
        speakers=["tool"],
        intent_tag="tool_output",
        chunk_version=3,
        timestamp_range=["2025-12-31T23:00:00-05:00", "2026-01-01T01:00:00-05:00"],
    ),
]

FILTERS: list[dict[str, Any]] = [
    {},
    {"conversation_id": "c1"},
    {"conversation_id": {"$eq": "c2"}},
    {"conversation_id": {"$ne": "c1"}},
    {"conversation_id": {"$in": ["c2", "c3", "nope"]}},
    {"intent_tag": {"$ne": "dialogue"}},
    {"category": "preference"},
    {"category": {"$ne": "preference"}},
    {"category": {"$in": ["profile", "preference"]}},
    {"chunk_version": 1},
    {"chunk_version": {"$ne": 1}},
    {"chunk_version": {"$in": [2, 3]}},
    {"participants": "Bob"},
    {"participants": ["Ann", "李雷"]},
    {"participants": {"$contains": "Ann"}},
    {"participants": {"$contains_any": ["Zed", "Bob"]}},
    {"participants": {"$contains_all": ["Ann", "Bob"]}},
    {"speakers": {"$contains_all": ["user", "assistant"]}},
    {"tags": "证词"},
    {"tags": ["伏笔"]},
    {"tags": {"$contains_all": ["证词", "伏笔"]}},
    {"tags": {"$contains_any": ["7", '["证词"]', "1"]}},
    {"timestamp_range": [None, None]},
    {"timestamp_range": ["2026-01-01T00:00:00Z", None]},
    {"timestamp_range": [None, "2026-01-01T02:10:00+08:00"]},
    {"timestamp_range": ["2026-01-01T05:00:00Z", "2026-01-01T05:30:00Z"]},
    {"turn_range": [2, 5]},
    {"turn_range": [None, 0]},
    {"turn_range": [15, None]},
    {"importance": 1},
    {"importance": {"$gte": 0.9}},
    {"importance": {"$gt": 0.9}},
    {"importance": {"$lte": 0.3}},
    {"importance": {"$lt": 1}},
    {"importance": {"$eq": 0.3}},
    {"pinned": True},
    {"pinned": False},
    {"requires_confirmation": True},
    {"deleted": False},
    {"tenant": "default"},
    {"conversation_id": "c1", "participants": "Bob", "importance": {"$gt": 0.5}},
]


def test_crud_round_trip(backend_url: str) -> None:
    with opened(backend_url) as memory:
        first = memory.upsert_chunks([chunk("k1", "the lighthouse keeper"), chunk("k2", "ferry")])
        assert (first.upserted, first.updated, first.errors) == (2, 0, [])
        again = memory.update(chunk("k1", "the harbor master"))
        assert (again.upserted, again.updated) == (0, 1)
        texts = {hit.chunk_id: hit.text for hit in memory.search("harbor master", top_k=5)}
        assert texts["k1"] == "the harbor master"
        assert not any("lighthouse" in hit.text for hit in memory.search("lighthouse", top_k=5))
        assert memory.delete("c1", chunk_ids=["k2"]).deleted == 1
        assert "k2" not in {hit.chunk_id for hit in memory.search("ferry", top_k=5)}
        assert memory.stats()["chunks_deleted"] == 1
        assert memory.purge()["chunks"] == 1
        assert "k2" not in rows_of(memory).values()


def test_a_question_with_nothing_to_read_finds_nothing_alike(backend_url: str) -> None:
    with opened(backend_url) as memory:
        records = [chunk(f"k{i}", f"the harbor ferry {i}") for i in range(6)]
        assert memory.upsert_chunks(records).errors == []
        for question in ("？？？", "🥜", "!!!"):
            assert memory.search(question, min_score=0) == []  # it scored 0.62 before
        # a zero vector has no direction: the search is lexical (NaN cosines on pgvector
        # ordered the hits at random)
        zero = [0.0] * memory.embedding.dimension
        lexical = memory.search("harbor ferry 3", mode="lexical", min_score=0, top_k=3)
        hits = memory.search("harbor ferry 3", query_vector=zero, min_score=0, top_k=3)
        assert [hit.chunk_id for hit in hits] == [hit.chunk_id for hit in lexical]
        assert hits[0].chunk_id == "k3"


def test_extending_a_caller_chunk_moves_its_expiry_alone(backend_url: str) -> None:
    from convmem.clock import ManualClock

    clock = ManualClock(1_800_000_000.0)
    soon = "2027-01-15T08:00:30+00:00"  # 30 s after the clock's start
    with opened(backend_url, clock=clock) as memory:
        records = [chunk(name, f"the {name} ferry", expires_at=soon) for name in ("a", "b", "c")]
        assert memory.upsert_chunks(records).errors == []
        memory.delete("c1", chunk_ids=["c"])
        assert memory.extend_chunks(["a", "c", "missing"], 120) == 1  # c is deleted
        clock.advance(60)
        assert [record.chunk_id for record in memory.chunks("c1")] == ["a"]
        assert memory.chunks("c1")[0].metadata.expires_at == "2027-01-15T08:02:00+00:00"
        assert [hit.chunk_id for hit in memory.search("ferry", min_score=0)] == ["a"]
        assert memory.extend_chunks(["b"], 600) == 0  # b expired: never brought back
        assert memory.chunks("c1", chunk_ids=["b"]) == []
        clock.advance(61)
        assert memory.chunks("c1") == []
        for bad in (0, -1, float("nan"), "60"):
            with pytest.raises(InvalidInputError) as caught:
                memory.extend_chunks(["a"], bad)
            assert caught.value.field == "seconds"


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f) for f in FILTERS])
def test_every_filter_operator(backend_url: str, filters: dict[str, Any]) -> None:
    with opened(backend_url) as memory:
        assert memory.upsert_chunks(RECORDS).errors == []
        want = expected(RECORDS, filters, memory.tenant)
        assert admitted(memory, filters) == want
        hits = memory.search("harbor", top_k=20, filters=filters, mode="vector", min_score=0)
        assert {hit.chunk_id for hit in hits} == want


def test_a_chunk_holds_a_category_by_its_column_or_any_listed_turn(backend_url: str) -> None:
    """A turn-level search reads chunks under HOLDS for a category filter: a rule's chunk
    (its column) that lists a preference among its turns holds a preference; the list
    counts only when it is one, and only its strings; a chunk cut before the list existed
    holds its column's category alone. The backend's SQL agrees with ``matches``."""
    records = [
        chunk(
            "r",
            "rule with a preference",
            category="rule",
            turn_categories=["fact", "preference", "rule"],
        ),
        chunk("p", "a preference alone", category="preference"),
        chunk("o", "an old rule chunk", category="rule"),
        chunk("s", "a string, no list", category="rule", turn_categories="preference"),
        chunk("n", "nulls and numbers", category=None, turn_categories=[None, 7, "profile"]),
        # the metadata says "preference" elsewhere (a tag): the text test lets it through
        # to the JSON test, which refuses it
        chunk(
            "t", "a tag, not a turn", category="rule", turn_categories=["fact"], tags=["preference"]
        ),
        # values JSON escapes skip the text test; a non-ASCII one is written as it is
        chunk("q", "escaped values", category="rule", turn_categories=['a"b', "c\\d", "偏好"]),
    ]
    cases = {
        ("preference",): {"r", "p"},
        ("rule",): {"r", "o", "s", "t", "q"},
        ("profile", "x"): {"n"},
        ("7",): set(),
        ("x",): set(),
        ('a"b',): {"q"},
        ("c\\d", "x"): {"q"},
        ("偏好",): {"q"},
        ("fact",): {"r", "t"},
    }
    with opened(backend_url) as memory:
        assert memory.upsert_chunks(records).errors == []
        rows = rows_of(memory)
        for values, want in cases.items():
            spec = FilterSpec((Condition("category", HOLDS, values),))
            reference = {
                r["chunk_id"]
                for r in records
                if matches(ChunkMetadata.model_validate(r["metadata"]).model_dump(), spec)
            }
            assert reference == want, values
            found = memory.store.admit(memory.tenant, spec, list(rows))
            assert {rows[rowid] for rowid in found} == want, values


def test_ordering_and_ties(backend_url: str) -> None:
    twins = [chunk(f"t{i}", "same words about the harbor", conversation=f"c{i}") for i in range(4)]
    others = [
        chunk("o1", "harbor harbor harbor lights", conversation="x1"),
        chunk("o2", "nothing relevant at all", conversation="x2"),
    ]
    with opened(backend_url) as memory:
        memory.upsert_chunks([twins[2], twins[0], *others, twins[3], twins[1]])
        for mode in ("vector", "lexical", "hybrid"):
            hits = memory.search("same words about the harbor", top_k=6, mode=mode)
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True), mode
            order = [hit.chunk_id for hit in hits if hit.chunk_id.startswith("t")]
            # equal scores: the row written first comes first, on every backend
            assert order == ["t2", "t0", "t3", "t1"], mode


def test_repeated_query_terms_weigh_more(backend_url: str) -> None:
    """A dialogue-window query keeps returning to what matters: a word said three times
    outranks one said once, within a conversation and across the tenant."""
    records = [
        chunk("dog", "the dog sleeps", turns=(0, 0)),  # written first: wins any tie
        chunk("cat", "the cat sleeps", turns=(1, 1)),
        chunk("fox", "a fox runs", turns=(2, 2)),
    ]
    query = "my cat\nthe cat again\nthat cat and a dog"
    with opened(backend_url) as memory:
        memory.upsert_chunks(records)
        for filters in ({"conversation_id": "c1"}, None):
            hits = memory.search(query, top_k=3, filters=filters, mode="lexical")
            assert [hit.chunk_id for hit in hits][:2] == ["cat", "dog"], filters


def test_cjk_bigrams_find_words_segmented_differently(backend_url: str) -> None:
    with opened(backend_url) as memory:
        memory.upsert_chunks(
            [chunk("trip", "我们去鼓浪屿看海"), chunk("other", "我们去公园看花", turns=(2, 3))]
        )
        for filters in ({"conversation_id": "c1"}, None):
            # jieba reads the query as one word that the document's segmentation lacks
            hits = memory.search("浪屿", top_k=2, filters=filters, mode="lexical")
            assert [hit.chunk_id for hit in hits] == ["trip"], filters


def test_delete_by_range_is_final(backend_url: str) -> None:
    texts = [f"turn {i} mentions codeword{i}" for i in range(12)]
    with opened(backend_url) as memory:
        memory.add_turns("c1", make_turns(texts))
        memory.flush()
        assert any("codeword4" in hit.text for hit in memory.search("codeword4", top_k=5))
        result = memory.delete(conversation_id="c1", turn_range=(3, 5))
        assert result.turns_deleted == 3
        memory.flush()
        live = memory.store._db().execute(
            "SELECT text FROM chunks WHERE tenant=? AND deleted=0", (memory.tenant,)
        )
        for (text,) in live:
            assert not any(f"codeword{i}" in text for i in (3, 4, 5))
        assert {t.seq for t in memory.recent_turns("c1", limit=20)} == set(range(12)) - {3, 4, 5}
        for mode in ("vector", "lexical", "hybrid"):
            hits = memory.search("codeword4", top_k=20, mode=mode, min_score=0)
            assert not any("codeword4" in hit.text for hit in hits)
        with pytest.raises(TurnConflictError):
            memory.add_turns("c1", make_turns(["other text"], start=4))
        memory.purge()
        row = (
            memory.store._db()
            .execute("SELECT text FROM turns WHERE conversation_id='c1' AND seq=4")
            .fetchone()
        )
        assert row == (None,)


# What no store can keep: SQLite would take a NUL that PostgreSQL refuses mid-write, and a
# lone surrogate cannot be encoded for either. Every entry point refuses both alike.
UNKEEPABLE = {"nul": "a\x00b", "surrogate": "a\ud800b"}


@pytest.mark.parametrize("bad", UNKEEPABLE.values(), ids=UNKEEPABLE.keys())
def test_text_no_store_can_keep_is_refused_alike_and_loses_nothing(
    backend_url: str, bad: str
) -> None:
    with opened(backend_url) as memory:
        memory.add_turns("c1", make_turns(["我的护照下个月过期", "好的，记下了"]))
        memory.upsert_chunks([chunk("k1", "the lighthouse keeper", conversation="c2")])
        memory.flush()
        refused: list[tuple[Any, type[Exception], str]] = [
            (lambda: memory.search(bad), InvalidInputError, "query_text"),
            (lambda: memory.search(bad, mode="lexical"), InvalidInputError, "query_text"),
            (
                lambda: memory.search(bad, hints={"strategies": ["semantic_search"]}),
                InvalidInputError,
                "query_text",
            ),
            (lambda: memory.retrieve(bad, None), InvalidInputError, "query_text"),
            (lambda: memory.embed_query(bad), InvalidInputError, "text"),
            (
                lambda: memory.search("护照", filters={"conversation_id": bad}),
                FilterError,
                "filters.conversation_id",
            ),
            (
                lambda: memory.search(
                    "护照", filters={"speakers": {"$contains_any": ["user", bad]}}
                ),
                FilterError,
                "filters.speakers",
            ),
            (
                lambda: memory.add_turns(bad, make_turns(["x"])),
                InvalidInputError,
                "conversation_id",
            ),
            (
                lambda: memory.add_turns("c1", make_turns([bad], start=5)),
                InvalidInputError,
                "turns[0].text",
            ),
            (
                lambda: memory.add_turns(
                    "c1", [{"turn_id": 6, "role": "user", "text": "x", "meta": {"k": [bad]}}]
                ),
                InvalidInputError,
                "turns[0].meta",
            ),
            (lambda: memory.recent_turns(bad), InvalidInputError, "conversation_id"),
            (lambda: memory.delete(bad, turn_range=(0, 0)), InvalidInputError, "conversation_id"),
            (lambda: memory.delete("c2", chunk_ids=["k1", bad]), InvalidInputError, "chunk_ids"),
            (lambda: memory.story(bad), InvalidInputError, "project_id"),
            (lambda: memory.story("p").search(bad), InvalidInputError, "query"),
            (
                lambda: memory.story("p").add_entity_state(
                    {"entity_id": "e", "chapter_index": 1, "scene_index": 1, "state": {"a": bad}}
                ),
                InvalidInputError,
                "states[0].state.a",
            ),
            (
                lambda: memory.story("p").add_memory_chunks(
                    [{"chapter_index": 1, "scene_index": 1, "content": "林晚" + bad}]
                ),
                InvalidInputError,
                "chunks[0].content",
            ),
        ]
        for call, error, field in refused:
            with pytest.raises(error) as caught:
                call()
            assert caught.value.field == field, (field, caught.value)
            assert "NUL" in str(caught.value) or "surrogate" in str(caught.value)
        for record in (
            chunk("k2", bad),
            chunk("k3", "fine", conversation=bad),
            chunk("k4", "fine", participants=["ok", bad]),
            chunk("k5", "fine", source=bad),
            chunk(bad, "fine"),
        ):
            result = memory.upsert_chunks([record])
            assert result.upserted == 0 and len(result.errors) == 1, result
        # what was accepted before is intact, and nothing refused was stored
        memory.flush()
        assert [t.text for t in memory.recent_turns("c1")] == ["我的护照下个月过期", "好的，记下了"]
        assert any("护照" in hit.text for hit in memory.search("护照", min_score=0))
        stored = set(rows_of(memory).values()) - {"k1"}
        assert stored and all(chunk_id.startswith("chk_") for chunk_id in stored), stored


@pytest.mark.parametrize("bad", [-1, 10**20, 2.5, None, "5", True])
def test_a_listing_limit_is_refused_alike_naming_its_field(backend_url: str, bad: Any) -> None:
    """A negative limit listed everything on SQLite and failed on PostgreSQL ("LIMIT must
    not be negative"); a huge one overflowed both drivers; a fraction failed on SQLite."""
    with opened(backend_url) as memory:
        memory.add_turns("c", make_turns(["我喜欢靠窗的座位。", "好的。"]))
        memory.flush()
        limited = [
            lambda: memory.recent_turns("c", limit=bad),
            lambda: memory.notes("c", limit=bad),
            lambda: memory.jobs(limit=bad),
            lambda: memory.chunks("c", limit=bad),
        ]
        if bad is not None:  # run_pending's None: as many jobs as a batch holds
            limited.append(lambda: memory.run_pending(limit=bad))
        calls = {
            "limit": limited,
            "offset": [lambda: memory.chunks("c", offset=bad)],
            "stm_turns": [lambda: memory.hierarchy(stm_turns=bad)],
        }
        for field, listed in calls.items():
            for call in listed:
                with pytest.raises(InvalidInputError) as caught:
                    call()
                assert caught.value.field == field
        with pytest.raises(InvalidInputError) as caught:
            memory.jobs(status="finished")
        assert caught.value.field == "status"
        # nothing accepted was lost, and the edges still answer
        assert [t.seq for t in memory.recent_turns("c", limit=10)] == [0, 1]
        assert memory.recent_turns("c", limit=0) == [] and memory.notes("c", limit=0) == []


def test_story_reads_job_ids_and_sweep_times_are_checked_alike(backend_url: str) -> None:
    """Each of these reached SQL as given: PostgreSQL failed on an entity id that was a
    number or held a NUL (SQLite looked it up and found nothing), SQLite's driver
    overflowed on a chapter or job id past 64 bits (PostgreSQL found nothing), a string
    chapter failed in Python, and a sweep at "x" failed on PostgreSQL alone."""
    with opened(backend_url) as memory:
        story = memory.story("p1")
        story.add_entity_state(
            {"entity_id": "林晚", "chapter_index": 1, "scene_index": 1, "state": {"mood": "calm"}}
        )
        bad_reads = {
            "chapter_index": [
                lambda: story.entity_state("林晚", 10**20, 0),
                lambda: story.entity_state("林晚", -1, 0),
                lambda: story.timeline("3"),  # type: ignore[arg-type]
            ],
            "scene_index": [lambda: story.entity_state("林晚", 1, 2.5)],  # type: ignore[arg-type]
            "entity_id": [
                lambda: story.entity_state(5, 1, 1),  # type: ignore[arg-type]
                lambda: story.timeline(3, entity_id="a\x00b"),
            ],
            "window": [lambda: story.timeline(3, window=-1)],
            "before.chapter_index": [lambda: story.search("林晚", before=(-1, 0))],
            "job_id": [lambda: memory.job(10**20), lambda: memory.retry_job(True)],
            "now": [
                lambda: memory.sweep_expired(now="x"),
                lambda: memory.sweep_expired(now=math.nan),
            ],  # type: ignore[arg-type]
        }
        for field, calls in bad_reads.items():
            for call in calls:
                with pytest.raises(InvalidInputError) as caught:
                    call()
                assert caught.value.field == field
        assert story.entity_state("林晚", 1, 1).state == {"mood": "calm"}  # type: ignore[union-attr]
        assert [s.entity_id for s in story.timeline(3, window=10**9)] == ["林晚"]
        with pytest.raises(NotFoundError):
            memory.job(-1)


def test_tenant_isolation(backend_url: str) -> None:
    with opened(backend_url) as memory:
        a, b = memory.for_tenant("a"), memory.for_tenant("b")
        a.upsert_chunks([chunk("same-id", "alpha secret of tenant a")])
        b.upsert_chunks([chunk("same-id", "bravo notes of tenant b")])
        a.add_turns("c1", make_turns(["tenant a private turn", "ok"]))
        a.flush()
        for mode in ("vector", "lexical", "hybrid"):
            # no threshold: every candidate of b's index, none of a's
            found = b.search("alpha secret tenant", top_k=10, mode=mode, min_score=0)
            assert [h.text for h in found] == ["bravo notes of tenant b"]
        assert b.recent_turns("c1") == []
        a.delete("c1", chunk_ids=["same-id"])
        assert [h.chunk_id for h in b.search("bravo", top_k=5)] == ["same-id"]
        with pytest.raises(FilterError):
            b.search("alpha", filters={"tenant": "a"})


def test_a_tenant_purges_only_its_own_deleted_data(backend_url: str) -> None:
    with opened(backend_url) as memory:
        a, b = memory.for_tenant("a"), memory.for_tenant("b")
        for tenant in (a, b):
            tenant.add_turns("c", make_turns([f"secret of {tenant.tenant}", "ok"]))
            tenant.flush()
            tenant.delete("c", turn_range=(0, 0))
        a.purge()
        rows = dict(
            memory.store._db()
            .execute("SELECT tenant, text FROM turns WHERE conversation_id='c' AND seq=0")
            .fetchall()
        )
        assert rows == {"a": None, "b": "secret of b"}  # B's deleted text waits for B
        tombstones = dict(
            memory.store._db()
            .execute("SELECT tenant, count(*) FROM chunks WHERE deleted=1 GROUP BY tenant")
            .fetchall()
        )
        assert "a" not in tombstones and tombstones.get("b", 0) >= 1
        assert b.purge()["turns"] == 1
        memory.purge(all_tenants=True)  # the operator's purge: nothing left anywhere


def test_backends_implement_the_whole_contract(backend_url: str) -> None:
    with opened(backend_url) as memory:
        store = memory.store
        assert isinstance(store, Store)
        # every abstract hook of the contract is implemented by the backend's own classes
        assert not getattr(type(store), "__abstractmethods__", None)
        for name in Backend.__abstractmethods__:
            implemented = getattr(type(store), name)
            assert implemented is not getattr(Backend, name), name


def test_dimension_mismatch(backend_url: str) -> None:
    with opened(backend_url, embedder=HashingEmbedder(dimension=64)) as memory:
        memory.upsert_chunks([chunk("k", "sixty four dims")])
        with pytest.raises(InvalidInputError) as info:
            memory.search("x", query_vector=[0.1] * 65)
        assert info.value.field == "query_vector"
    with (
        pytest.raises(EmbeddingMismatchError, match="64-d"),
        opened(backend_url, embedder=HashingEmbedder(dimension=128)),
    ):
        pass
    with contextlib.ExitStack() as stack:
        if backend_url.startswith("postgresql"):
            # An open snapshot elsewhere keeps the old row versions alive: building the new
            # index must not trip over their 64-d vectors (it once did, in CI).
            import psycopg

            reader = stack.enter_context(psycopg.connect(backend_url.split("?")[0]))
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM pg_class").fetchone()
        with opened(
            backend_url, embedder=HashingEmbedder(dimension=128), allow_model_change=True
        ) as m:
            assert m.reindex() == 1
            assert [hit.chunk_id for hit in m.search("sixty four", top_k=3)] == ["k"]


class _DownAfterOneBatch(HashingEmbedder):
    """A real hashing embedder whose model server is lost for one call, its second."""

    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.calls = 0

    def embed(self, texts: Any) -> Any:
        self.calls += 1
        if self.calls == 2:
            raise EmbedderError("model server unavailable")
        return super().embed(texts)


def test_a_reindex_shuts_out_the_old_model_and_searches_survive_one_half_done(
    backend_url: str,
) -> None:
    """A process still running the model a reindex moves the store from could write its
    vectors into the new space (SQLite then failed every search of the tenant with a
    reshape error; PostgreSQL hid those chunks from vector search). It is refused, its
    jobs wait for a process of the new model, its searches go lexical, and a reindex cut
    short leaves a store that every process can still search."""
    # SQLite's tenant-wide vector search through its HNSW sidecar from the first row on
    sidecar = {"ann_min_rows": 0}
    old = Memory.open(
        backend_url, embedder=HashingEmbedder(64), marker=KeepAllMarker(), workers=0, **sidecar
    )
    with old:
        old.add_turns("c", make_turns([f"灯塔 第{n}句 lighthouse {n}" for n in range(12)]))
        old.flush()
        with opened(
            backend_url, embedder=_DownAfterOneBatch(32), allow_model_change=True, **sidecar
        ) as moving:
            with pytest.raises(EmbedderError):
                moving.reindex(batch_size=1)  # the model is lost after one chunk
            # half done: the store records the new model, one chunk has its vector
            for filters in (None, {"conversation_id": "c"}):
                for mode in ("hybrid", "vector"):
                    moving.search("灯塔", filters=filters, mode=mode, min_score=0)
                # the old process searches lexically, and says why it cannot by vector
                assert old.search("灯塔", filters=filters, min_score=0)
                with pytest.raises(EmbeddingMismatchError, match="restart"):
                    old.search("灯塔", filters=filters, mode="vector")
            vector_hits = moving.search("灯塔", mode="vector", min_score=0, granularity="chunk")
            assert len(vector_hits) == 1
        # the old process: its writes are accepted, but it indexes nothing more
        old.add_turns("c", make_turns(["新的一句：萤火虫"], start=12))
        assert old.run_pending() == 0
        with pytest.raises(EmbeddingMismatchError, match="reindexed"):
            old.flush(timeout=5)
        with pytest.raises(EmbeddingMismatchError, match="reindexed"):
            old.upsert_chunks([chunk("k", "caller chunk")])
        # a process of the new model finishes the reindex and the waiting job
        with opened(backend_url, embedder=HashingEmbedder(32)) as new:
            assert new.reindex() == len(new.search("灯塔", top_k=50, granularity="chunk"))
            new.flush()
            (hit,) = new.search("萤火虫", mode="vector", top_k=1, min_score=0)
            assert "萤火虫" in hit.text
            every = new.search("灯塔", mode="vector", top_k=50, min_score=0, granularity="chunk")
            assert len(every) == len(new.search("灯塔", top_k=50, granularity="chunk"))


def test_migrations_are_versioned_and_idempotent(backend_url: str) -> None:
    with opened(backend_url) as memory:
        memory.store._migrate()  # again: nothing to do, nothing breaks
        version = (
            memory.store._db()
            .execute("SELECT value FROM meta WHERE key='schema_version'")
            .fetchone()
        )
        assert version == (str(SCHEMA_VERSION),)
        with memory.store._write() as conn:
            conn.execute("DROP TABLE entity_states")
            conn.execute("UPDATE meta SET value='4' WHERE key='schema_version'")
    with opened(backend_url) as memory:  # the missing step runs on open
        count = memory.store._db().execute("SELECT count(*) FROM entity_states").fetchone()
        assert count == (0,)


def test_claims_never_share_a_job_or_a_conversation(backend_url: str) -> None:
    """Several workers (separate connections) drain one backlog without double work."""
    with opened(backend_url) as memory:
        for c in range(12):
            for part in range(3):  # three jobs per conversation
                memory.add_turns(f"c{c}", make_turns([f"text {part}"], start=part))
    claims: list[tuple[str, int, str]] = []
    overlaps: list[str] = []
    held: dict[str, str] = {}
    guard = threading.Lock()

    def work(name: str) -> None:
        with opened(backend_url) as memory:
            store = memory.store
            idle = 0
            while idle < 3:
                jobs = store.claim_jobs(name, limit=2, lease_seconds=60)
                if not jobs:
                    idle += 1
                    time.sleep(0.02)
                    continue
                idle = 0
                with guard:
                    for job in jobs:
                        claims.append((name, job.job_id, job.conversation_id))
                        owner = held.get(job.conversation_id)
                        if owner not in (None, name):
                            overlaps.append(job.conversation_id)
                        held[job.conversation_id] = name
                time.sleep(0.01)
                with guard:
                    for job in jobs:
                        held.pop(job.conversation_id, None)
                with store._write() as conn:
                    conn.executemany(
                        "UPDATE jobs SET status='done', claimed_by=NULL WHERE job_id=?",
                        [(job.job_id,) for job in jobs],
                    )

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    job_ids = [job_id for _, job_id, _ in claims]
    assert len(job_ids) == len(set(job_ids)) == 36
    assert overlaps == []


@pytest.mark.slow
def test_worker_processes_share_the_backlog(backend_url: str, tmp_path: Any) -> None:
    """``convmem worker --once`` in three processes indexes everything exactly as one would."""
    texts = [f"conversation line {i} about topic{i % 5}" for i in range(10)]
    with opened(backend_url) as memory:
        for c in range(15):
            memory.add_turns(f"c{c}", make_turns(texts))
    command = [
        sys.executable,
        "-m",
        "convmem.cli.main",
        "--store",
        backend_url,
        "--embedder",
        "hashing",
        "--marker",
        "keep-all",
        "worker",
        "--once",
    ]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outputs
    with opened(backend_url) as memory:
        assert memory.store.backlog(memory.tenant) == (0, 0)
        reference = tmp_path / "one.db"
        with opened(f"sqlite:///{reference}") as single:
            for c in range(15):
                single.add_turns(f"c{c}", make_turns(texts))
            single.flush()
            for c in range(15):
                ours = {
                    h.chunk_id: h.text
                    for h in memory.search(
                        "topic3", top_k=50, filters={"conversation_id": f"c{c}"}, min_score=0
                    )
                }
                theirs = {
                    h.chunk_id: h.text
                    for h in single.search(
                        "topic3", top_k=50, filters={"conversation_id": f"c{c}"}, min_score=0
                    )
                }
                assert ours == theirs


# -- the backends against each other ----------------------------------------------------


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[Memory, Memory]]:
    """One SQLite and one PostgreSQL store, shared by the generated examples."""
    import tempfile

    base = postgres_base_url()
    schema = "h_" + uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory() as folder:
        joiner = "&" if "?" in base else "?"
        with (
            opened(f"sqlite:///{folder}/memory.db") as lite,
            opened(f"{base}{joiner}schema={schema}") as server,
        ):
            yield lite, server
    drop_schema(base, schema)


NAMES = st.sampled_from(["Ann", "Bob", "李雷", "Zoë"])
TIMES = st.sampled_from(
    ["2026-01-01T00:00:00Z", "2026-01-01T08:00:00+08:00", "2026-03-01T12:30:00-05:00", None]
)


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for index in range(draw(st.integers(1, 8))):
        start = draw(st.integers(0, 30))
        meta: dict[str, Any] = {
            "participants": draw(st.lists(NAMES, max_size=3, unique=True)),
            "speakers": draw(
                st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=2, unique=True)
            ),
            "intent_tag": draw(st.sampled_from(["dialogue", "task", "tool_output"])),
            "chunk_version": draw(st.integers(1, 3)),
            "pinned": draw(st.booleans()),
            "requires_confirmation": draw(st.booleans()),
        }
        importance = draw(st.one_of(st.none(), st.integers(0, 1), st.floats(0, 1, width=32)))
        if importance is not None:
            meta["importance"] = importance
        tags = draw(st.one_of(st.none(), st.lists(st.sampled_from(["证词", "伏笔", "x"]))))
        if tags is not None:
            meta["tags"] = tags
        category = draw(st.sampled_from([None, "preference", "profile"]))
        if category is not None:
            meta["category"] = category
        if draw(st.booleans()):
            day = draw(st.integers(1, 3))
            meta["timestamp_range"] = [
                f"2026-01-0{day}T00:00:00Z",
                f"2026-01-0{day}T12:00:00+08:00",
            ]
        out.append(
            chunk(
                f"r{index}",
                draw(st.sampled_from(["harbor light", "港口 灯塔", "ferry tide", "harbor ferry"])),
                conversation=draw(st.sampled_from(["c1", "c2", "c3"])),
                turns=(start, start + draw(st.integers(0, 5))),
                **meta,
            )
        )
    return out


FILTER_PARTS = st.one_of(
    st.builds(lambda v: {"conversation_id": v}, st.sampled_from(["c1", "c2"])),
    st.builds(lambda v: {"conversation_id": {"$ne": v}}, st.sampled_from(["c1", "c3"])),
    st.builds(
        lambda v: {"conversation_id": {"$in": v}},
        st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=2),
    ),
    st.builds(lambda v: {"category": {"$ne": v}}, st.sampled_from(["preference", "profile"])),
    st.builds(
        lambda v: {"chunk_version": {"$in": v}}, st.lists(st.integers(1, 3), min_size=1, max_size=2)
    ),
    st.builds(lambda v: {"participants": v}, NAMES),
    st.builds(
        lambda v: {"participants": {"$contains_all": v}}, st.lists(NAMES, min_size=1, max_size=2)
    ),
    st.builds(
        lambda v: {"speakers": {"$contains_any": v}},
        st.lists(st.sampled_from(["user", "tool"]), min_size=1, max_size=2),
    ),
    st.builds(lambda lo, hi: {"timestamp_range": [lo, hi]}, TIMES, st.just(None)),
    st.builds(
        lambda lo, hi: {"turn_range": [lo, hi]},
        st.integers(0, 20),
        st.one_of(st.none(), st.integers(20, 40)),
    ),
    st.builds(
        lambda op, v: {"importance": {op: v}},
        st.sampled_from(["$gte", "$gt", "$lte", "$lt", "$eq"]),
        st.one_of(st.integers(0, 1), st.floats(0, 1, width=32)),
    ),
    st.builds(lambda v: {"pinned": v}, st.booleans()),
    st.builds(lambda v: {"requires_confirmation": v}, st.booleans()),
    st.builds(
        lambda op, v: {"tags": {op: v}},
        st.sampled_from(["$contains_any", "$contains_all"]),
        st.lists(st.sampled_from(["证词", "伏笔", "y"]), min_size=1, max_size=2),
    ),
)


@st.composite
def filters(draw: st.DrawFn) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in draw(st.lists(FILTER_PARTS, max_size=3)):
        merged.update(part)
    return merged


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=records(), spec=filters())
def test_generated_records_and_filters_agree(
    both: tuple[Memory, Memory], data: list[dict[str, Any]], spec: dict[str, Any]
) -> None:
    note(f"records={data!r} filters={spec!r}")
    tenant = "g" + uuid.uuid4().hex[:10]
    want = None
    for store in both:
        memory = store.for_tenant(tenant)
        assert memory.upsert_chunks(data).errors == []
        want = expected(data, spec, tenant)
        assert admitted(memory, spec) == want
        hits = memory.search("harbor", top_k=20, filters=spec, mode="vector", min_score=0)
        assert {hit.chunk_id for hit in hits} == want
    lite, server = (m.for_tenant(tenant) for m in both)
    lexical = [
        [
            h.chunk_id
            for h in m.search("harbor 港口", top_k=20, filters=spec, mode="lexical", min_score=0)
        ]
        for m in (lite, server)
    ]
    assert set(lexical[0]) == set(lexical[1])


def test_listings_are_in_the_same_order_on_a_postgresql_database_with_a_locale(
    tmp_path: Any,
) -> None:
    """Lists ordered by names (notes by conversation, a scene's entities in a timeline)
    came back in SQLite's code-point order but in the database's collation on
    PostgreSQL: most servers are created with a locale (en_US.UTF-8), which sorts 'alice'
    before 'Bob' and ignores the hyphen of 'a-c'. Every backend now sorts by code point."""
    import psycopg

    from convmem.governance import RuleMarker

    base = postgres_base_url()
    database = "locale_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            f'CREATE DATABASE "{database}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    names = ["alice", "Bob", "a-c", "ab", "_x", "林晚", "Zed"]
    views = []
    try:
        server = base.rsplit("/", 1)[0].split("?")[0] + "/" + database
        for url in (f"sqlite:///{tmp_path}/m.db", server):
            with opened(url, marker=RuleMarker()) as memory:
                for name in names:
                    memory.add_turns(name, make_turns(["记住：我对青霉素过敏"]))
                memory.flush()
                story = memory.story("p")
                story.add_entity_state(
                    *({"entity_id": e, "chapter_index": 1, "scene_index": 1} for e in names)
                )
                views.append(
                    (
                        [note.conversation_id for note in memory.notes()],
                        [state.entity_id for state in story.timeline(1)],
                    )
                )
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    code_points = sorted(names)
    assert views[0] == (code_points, code_points)
    assert views[1] == views[0]


def test_the_write_path_gives_the_same_memory_on_both(tmp_path: Any) -> None:
    """Same turns, same marker: the same chunk ids, texts, marks and notes on both."""
    from convmem.governance import RuleMarker

    base = postgres_base_url()
    schema = "w_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"

    texts = [
        "记住：我对青霉素过敏",
        "好的，我记下了：你对青霉素过敏。",
        "我下周三要去杭州出差，帮我订酒店",
        "好的，已为你预订西湖边的酒店。",
        "就订这家吧",
        "没问题。",
    ]
    views = []
    try:
        for url in (f"sqlite:///{tmp_path}/m.db", f"{base}{joiner}schema={schema}"):
            with opened(url, marker=RuleMarker()) as memory:
                memory.add_turns("c1", make_turns(texts))
                memory.flush()
                chunks = {
                    h.chunk_id: h.text for h in memory.search("青霉素 杭州", top_k=20, min_score=0)
                }
                marks = [(m.seq, m.mark.keep, m.mark.category) for m in memory.marks("c1")]
                notes = sorted((n.note_id, n.text, n.status) for n in memory.notes())
                views.append((chunks, marks, notes))
    finally:
        drop_schema(base, schema)
    assert views[0] == views[1]
    assert views[0][2], "a 记住 request leaves a note"


def test_postgres_hnsw_index_answers_filtered_queries(tmp_path: Any) -> None:
    """The HNSW path: the index exists, agrees with exact search, and a selective filter
    still gets every match (iterative scans), not the few the first graph pass found."""
    base = postgres_base_url()
    schema = "v_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    import random

    rng = random.Random(7)
    words = [f"w{n}" for n in range(300)] + ["harbor", "storm", "anchor"]
    records = [
        chunk(
            f"n{i}",
            " ".join(rng.sample(words, 6)),
            conversation=f"c{i % 7}",
            category="rare" if i % 97 == 0 else "common",
        )
        for i in range(400)
    ]
    try:
        with opened(f"{base}{joiner}schema={schema}") as memory:
            memory.upsert_chunks(records)
            store = memory.store
            indexes = store._db().execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname=? AND tablename='chunks'",
                (schema,),
            )
            assert "chunks_hnsw_512" in {row[0] for row in indexes}
            vector = memory._engine.embedding.embed_array(["harbor storm anchor"])[0]
            spec = parse_filters({}, tenant=memory.tenant)
            fast = store.scan_vectors(memory.tenant, spec, vector, 10)  # type: ignore[call-arg]
            exact = store.scan_vectors(memory.tenant, spec, vector, 10, exact=True)  # type: ignore[call-arg]
            # many rows tie (a word in common): any of them is as near as another
            tenth = exact[-1][1]
            assert sum(score >= tenth - 1e-6 for _, score in fast) >= 8
            rare = parse_filters({"category": "rare"}, tenant=memory.tenant)
            hits = store.scan_vectors(memory.tenant, rare, vector, 10)
            assert len(hits) == sum(1 for r in records if r["metadata"]["category"] == "rare")
    finally:
        drop_schema(base, schema)


class _StoredLinesOnly(HashingEmbedder):
    """The hashing model, but search may not embed lines at query time: a turn hit's
    similarity can then only come from the turn vectors the worker stored."""

    embeds_turns = False


def _turn_vector_rows(memory: Memory, conversation: str) -> dict[str, int | None]:
    rows = memory.store._db().execute(
        "SELECT chunk_id, turn_vectors, deleted FROM chunks WHERE tenant=? AND conversation_id=?",
        (memory.tenant, conversation),
    )
    dimension = memory.embedding.dimension
    return {
        row[0]: None if row[1] is None else len(matrix_rows(bytes(row[1]), dimension))
        for row in rows
        if not row[2]
    } | {
        row[0]: -1
        for row in memory.store._db().execute(
            "SELECT chunk_id FROM chunks WHERE tenant=? AND conversation_id=? AND deleted=1 "
            "AND turn_vectors IS NOT NULL",
            (memory.tenant, conversation),
        )
    }


def _vector_count(hit: Hit) -> int:
    """How many turn vectors the worker stores for a chunk: a row per line, then a row per
    clause of each line."""
    lines = turn_lines(hit.text, hit.metadata["turn_offsets"])
    return len(lines) + sum(len(line_clauses(line)) for line in lines)


def test_the_worker_stores_a_vector_per_turn_and_search_reads_them(backend_url: str) -> None:
    texts = ["我的车停在地下二层B区17号车位。", "好的，已经记下了。", "明天要下雨。", "记得带伞。"]
    both = "对了，我不吃香菜，坐飞机喜欢靠窗的座位。"  # two things said: two clause vectors
    with opened(backend_url, embedder=_StoredLinesOnly()) as memory:
        memory.add_turns("c", make_turns([*texts, both, *texts]))
        memory.flush()
        chunks = {
            h.chunk_id: h for h in memory.search("车位", top_k=50, granularity="chunk", min_score=0)
        }
        stored = _turn_vector_rows(memory, "c")
        assert stored and all(stored[cid] == _vector_count(hit) for cid, hit in chunks.items())
        assert any(_vector_count(hit) > len(hit.metadata["turn_seqs"]) for hit in chunks.values())
        # a turn hit's similarity is its stored line vector against the question's
        hit = memory.search("车停在哪里", top_k=1, min_score=0)[0]
        line = hit.text.partition(": ")[2]
        expected = float(memory.embedding.embed_array([line])[0] @ memory.embed_query("车停在哪里"))
        assert hit.metadata["evidence"]["similarity"] == pytest.approx(expected, abs=1e-3)
        # ... or, for a line that says several things, its closest clause's
        hit = memory.search("香菜", top_k=1, min_score=0)[0]
        assert hit.text.endswith(both)
        clauses = memory.embedding.embed_array(line_clauses(both)) @ memory.embed_query("香菜")
        assert hit.metadata["evidence"]["similarity"] == pytest.approx(max(clauses), abs=1e-3)
        # deleting a turn tombstones its chunks: no turn vectors are left on them
        memory.delete("c", turn_range=(0, 0))
        assert -1 not in _turn_vector_rows(memory, "c").values()
        # reindex writes them again from the stored text
        with memory.store._write() as conn:
            conn.execute("UPDATE chunks SET turn_vectors=NULL WHERE tenant=?", (memory.tenant,))
        memory.reindex()
        after = _turn_vector_rows(memory, "c")
        live = memory.search("车位", top_k=50, granularity="chunk", min_score=0)
        assert after and all(after[hit.chunk_id] == _vector_count(hit) for hit in live)


def test_turn_vectors_are_kept_in_half_precision_and_old_full_precision_rows_still_read(
    backend_url: str,
) -> None:
    """The worker writes each chunk's turn vectors as tagged float16 (half the bytes); a row
    written before that (float32, untagged) is read as float32, and both give the same turn
    hits with similarities within float16's rounding."""
    texts = ["我的车停在地下二层B区17号车位。", "好的，已经记下了。", "明天要下雨。", "记得带伞。"]
    with opened(backend_url, embedder=_StoredLinesOnly()) as memory:
        memory.add_turns("c", make_turns(texts * 3))
        memory.flush()
        dimension = memory.embedding.dimension
        stored = [
            (rowid, bytes(blob))
            for rowid, blob in memory.store._db().execute(
                "SELECT rowid, turn_vectors FROM chunks WHERE tenant=? AND "
                "turn_vectors IS NOT NULL",
                (memory.tenant,),
            )
        ]
        assert stored
        for _, blob in stored:
            rows = matrix_rows(blob, dimension)
            assert len(blob) == 4 + rows.size * 2  # the tag, then two bytes a value
            assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=2e-3)
        half = memory.search("车停在哪里", top_k=3, min_score=0)
        with memory.store._write() as conn:
            for rowid, blob in stored:  # as a store indexed before the tag holds them
                full = matrix_rows(blob, dimension).astype(np.float32).tobytes()
                conn.execute("UPDATE chunks SET turn_vectors=? WHERE rowid=?", (full, rowid))
        full = memory.search("车停在哪里", top_k=3, min_score=0)
        assert [h.metadata["turn_range"] for h in full] == [h.metadata["turn_range"] for h in half]
        for a, b in zip(full, half, strict=True):
            assert a.metadata["evidence"]["similarity"] == pytest.approx(
                b.metadata["evidence"]["similarity"], abs=1e-6
            )
            assert a.score == pytest.approx(b.score, abs=1e-4)


def _turn_token_rows(
    memory: Memory, conversation: str, deleted: int = 0
) -> dict[str, tuple[str, str | None, Any]]:
    """``chunk_id -> (text, stored tokens, metadata)`` of a conversation's live chunks (or
    its tombstones)."""
    rows = memory.store._db().execute(
        "SELECT chunk_id, text, turn_tokens, metadata FROM chunks WHERE tenant=? AND "
        "conversation_id=? AND deleted=?",
        (memory.tenant, conversation, deleted),
    )
    return {
        row[0]: (row[1], row[2], json.loads(row[3]) if isinstance(row[3], str) else row[3])
        for row in rows
    }


def test_the_worker_stores_each_lines_tokens_and_search_reads_them(backend_url: str) -> None:
    """The worker stores each chunk line's search tokens (convmem.ingest.line_tokens),
    exactly what tokenizing the line gives; a search reads them instead of tokenizing and
    finds the same hits as without them; a deleted turn's chunk keeps none of its words."""
    texts = ["我的车停在地下二层B区17号车位。", "好的，已经记下了。", "明天要下雨。", "记得带伞。"]
    with opened(backend_url) as memory:
        memory.add_turns("c", make_turns([*texts, "I parked at spot 17 on level B2.", *texts]))
        memory.flush()
        rows = _turn_token_rows(memory, "c")
        assert rows and all(stored for _, stored, _ in rows.values())
        for text, stored, metadata in rows.values():
            known = known_tokens(stored, text, metadata["turn_offsets"])
            lines = [line for line in text.split("\n") if line]
            spoken = turn_lines(text, metadata["turn_offsets"])
            assert set(known) == {text, *lines, *spoken}
            assert all(known[line] == tuple(tokenize(line)) for line in known)
        questions = ["车停在哪个车位", "明天天气怎么样", "Where did I park?"]
        found = [
            memory.search(q, top_k=5, min_score=0, filters={"conversation_id": "c"})
            for q in questions
        ]
        with memory.store._write() as conn:
            conn.execute("UPDATE chunks SET turn_tokens=NULL WHERE tenant=?", (memory.tenant,))
        again = [
            memory.search(q, top_k=5, min_score=0, filters={"conversation_id": "c"})
            for q in questions
        ]
        assert [[(h.chunk_id, h.text, h.score) for h in hits] for hits in found] == [
            [(h.chunk_id, h.text, h.score) for h in hits] for hits in again
        ]
        memory.reindex()
        assert all(stored for _, stored, _ in _turn_token_rows(memory, "c").values())
        # deleting a turn tombstones its chunks, and their stored tokens go with them
        memory.delete("c", turn_range=(0, 0))
        tombstones = _turn_token_rows(memory, "c", deleted=1)
        assert tombstones and all(stored is None for _, stored, _ in tombstones.values())


def test_stored_tokens_of_another_tokenizer_or_text_are_not_read() -> None:
    text = "[上下文：2026-02-02 对话在讨论：日常]\n用户: 我的车停在B区17号车位。\n助手: 好的。"
    offsets = [(text.index("用户"), text.index("\n助手")), (text.index("助手"), len(text))]
    stored = line_tokens(text, offsets)
    assert stored is not None
    assert known_tokens(stored, text, offsets)[text] == tuple(tokenize(text))
    other = "old-signature" + stored[stored.index(" ") :]
    assert known_tokens(other, text, offsets) == {}
    changed = text.replace("17", "18")  # same lines, another text
    assert known_tokens(stored, changed, offsets) == {}
    assert line_tokens(text, []) is None and known_tokens(None, text, offsets) == {}


LEXICAL_TOP5: dict[str, Any] = {
    "top_k": 5,
    "mode": "lexical",
    "min_score": 0,
    "granularity": "chunk",
}


@pytest.mark.parametrize("backend", ["postgres", "citus"])
def test_bm25_collection_statistics_are_sampled_in_a_large_store(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above SAMPLE_ABOVE rows the server stores estimate (documents, mean length) from a
    page sample instead of counting every row; the figures stay near the exact ones and
    the ranking is the same."""
    from convmem.store import postgres_lexical

    texts = [f"chunk {i} about topic{i % 7} " + "filler " * (i % 5) for i in range(600)]
    with opened(backend_url) as memory:
        records = [
            chunk(f"c{i}", text, conversation=f"conv{i % 3}") for i, text in enumerate(texts)
        ]
        assert memory.upsert_chunks(records).errors == []
        with memory.store._write() as conn:  # type: ignore[attr-defined]
            conn.execute("ANALYZE chunks")
        store = memory.store
        exact_documents, exact_mean = store._collection()  # type: ignore[attr-defined]
        assert exact_documents == 600
        exact_hits = [h.chunk_id for h in memory.search("topic3 filler", **LEXICAL_TOP5)]
        monkeypatch.setattr(postgres_lexical, "SAMPLE_ABOVE", 100)
        monkeypatch.setattr(postgres_lexical, "SAMPLE_ROWS", 300)
        store._forget_terms()  # type: ignore[attr-defined]
        assert store._row_estimate(store._db()) >= 500  # type: ignore[attr-defined]
        documents, mean = store._collection()  # type: ignore[attr-defined]
        assert 200 < documents < 1800 and abs(mean - exact_mean) / exact_mean < 0.5
        hits = [h.chunk_id for h in memory.search("topic3 filler", **LEXICAL_TOP5)]
        assert hits and set(hits) <= {f"c{i}" for i in range(600) if i % 7 == 3}
        assert len(hits) == len(exact_hits)


def test_one_conversation_is_scored_with_its_own_statistics(backend_url: str) -> None:
    """Within one conversation every backend scores BM25 over that conversation's rows
    with statistics from those rows alone: the same scores as bm25.rank over their tokens,
    whatever else the tenant holds."""
    from convmem.store.lexical import query_terms
    from convmem.text import bm25, tokenize

    inside = [
        "the ferry to the island leaves at noon",
        "ferry tickets ferry tickets sold at the pier",
        "lunch by the harbor after the ferry ride",
        "no boats mentioned here at all",
    ]
    elsewhere = [f"ferry schedule page {i} ferry ferry" for i in range(30)]
    with opened(backend_url) as memory:
        records = [chunk(f"in{i}", text, conversation="trip") for i, text in enumerate(inside)]
        records += [
            chunk(f"out{i}", text, conversation="other") for i, text in enumerate(elsewhere)
        ]
        assert memory.upsert_chunks(records).errors == []
        spec = parse_filters({"conversation_id": "trip"}, tenant=memory.tenant)
        tokens = tokenize("ferry tickets at the pier")
        got = memory.store.lexical(memory.tenant, spec, tokens, 10)
        rowids = {chunk_id: rowid for rowid, chunk_id in rows_of(memory).items()}
        weights = query_terms(tokens, spec)
        reference = bm25.rank(weights, [tokenize(text) for text in inside])
        want = sorted(
            ((rowids[f"in{i}"], score) for i, score in enumerate(reference) if score > 0),
            key=lambda item: (-item[1], item[0]),
        )
        assert [rowid for rowid, _ in got] == [rowid for rowid, _ in want]
        assert [round(score, 6) for _, score in got] == [round(score, 6) for _, score in want]


def test_tenant_wide_lexical_reads_left_out_terms_in_pairs(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms a tenant-wide query leaves out for its postings budget ("read" and "book",
    each in six chunks) still find the chunk that holds both, as a conjunction; a
    secondary ranking (a question's synonyms) reads a quarter of the budget and no pairs."""
    from convmem.store import lexical
    from convmem.text import tokenize

    texts = [f"I read the news on page {i}" for i in range(5)]
    texts += [f"I bought a book at shop {i}" for i in range(5)]
    texts += ["I read the book my sister gave me", "the zanzibar ferry and a book and a read"]
    with opened(backend_url) as memory:
        records = [chunk(f"k{i}", text, conversation=f"c{i}") for i, text in enumerate(texts)]
        assert memory.upsert_chunks(records).errors == []
        store = memory.store
        store.POSTINGS_BUDGET = 3  # type: ignore[attr-defined]
        chunk_ids = rows_of(memory)
        wide = parse_filters(None, tenant=memory.tenant)
        tokens = tokenize("read book zanzibar")

        def found(pairs: int, *, secondary: bool = False) -> list[str]:
            monkeypatch.setattr(lexical, "PAIRS", pairs)
            hits = store.lexical(memory.tenant, wide, tokens, 20, secondary=secondary)
            return [chunk_ids[rowid] for rowid, _ in hits]

        assert found(0) == ["k11"]  # only the rare term is within the budget
        with_pairs = found(6)
        assert with_pairs[0] == "k11" and sorted(with_pairs) == ["k10", "k11"]
        # 1 + 7 postings within 12: one term left out, no pair; a secondary ranking reads
        # within a quarter of the budget (zanzibar's 1), and never in pairs
        store.POSTINGS_BUDGET = 12  # type: ignore[attr-defined]
        assert found(6) == found(0) and len(found(0)) == 7
        assert found(6, secondary=True) == ["k11"]


def test_tenant_wide_lexical_goes_past_best_rows_the_filter_rejects(backend_url: str) -> None:
    """The best-ranked rows fail the filter (another category, or deleted): a tenant-wide
    lexical search still returns the rows that pass, best first, as many as asked for."""
    from convmem.text import tokenize

    records = [
        chunk(f"s{i}", "harbor harbor harbor ferry", turns=(i, i + 1), category="smalltalk")
        for i in range(30)
    ]
    records += [
        chunk(
            f"t{i}", "harbor ferry " + " ".join(["word"] * i), conversation=f"t{i}", category="trip"
        )
        for i in range(8)
    ]
    with opened(backend_url) as memory:
        assert memory.upsert_chunks(records).errors == []
        store, chunk_ids = memory.store, rows_of(memory)
        tokens = tokenize("harbor")
        trip = parse_filters({"category": "trip"}, tenant=memory.tenant)
        hits = [chunk_ids[rowid] for rowid, _ in store.lexical(memory.tenant, trip, tokens, 5)]
        assert hits == ["t0", "t1", "t2", "t3", "t4"]  # shorter rows rank higher
        memory.delete("c1", chunk_ids=[f"s{i}" for i in range(25)])
        wide = parse_filters(None, tenant=memory.tenant)
        hits = [chunk_ids[rowid] for rowid, _ in store.lexical(memory.tenant, wide, tokens, 8)]
        assert hits[:5] == [f"s{i}" for i in range(25, 30)] and hits[5:] == ["t0", "t1", "t2"]


def test_a_term_in_more_chunks_than_the_lone_limit_is_never_read(backend_url: str) -> None:
    """Tenant-wide, a term past ``LONE_TERM_POSTINGS`` is left to the vector side, however
    far past it (the server stores stop counting there); one within it is read and
    counted exactly."""
    from convmem.text import tokenize

    texts = [f"the harbour ferry on day {i}" for i in range(6)] + ["the zanzibar ferry"] * 2
    with opened(backend_url) as memory:
        records = [chunk(f"k{i}", text, conversation=f"c{i}") for i, text in enumerate(texts)]
        assert memory.upsert_chunks(records).errors == []
        store = memory.store
        store.LONE_TERM_POSTINGS = 3  # type: ignore[attr-defined]
        wide = parse_filters(None, tenant=memory.tenant)
        assert store.lexical(memory.tenant, wide, tokenize("ferry"), 10) == []
        hits = store.lexical(memory.tenant, wide, tokenize("zanzibar ferry"), 10)
        assert sorted(rows_of(memory)[rowid] for rowid, _ in hits) == ["k6", "k7"]
        assert store._term_cache[tokenize("zanzibar")[0]] == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["postgres", "citus"])
def test_the_hnsw_graph_is_built_with_the_chosen_breadth(backend_url: str) -> None:
    from convmem.store.postgres import HNSW_EF_CONSTRUCTION, HNSW_M

    with opened(backend_url) as memory:
        assert memory.upsert_chunks([chunk("k1", "the lighthouse keeper")]).errors == []
        store = memory.store

        def definition() -> str:
            rows = store._db().execute(  # type: ignore[attr-defined]
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND indexname LIKE 'chunks\\_hnsw\\_%'"
            )
            return " ".join(row[0] for row in rows)

        assert f"m='{HNSW_M}'" in definition()
        assert f"ef_construction='{HNSW_EF_CONSTRUCTION}'" in definition()
        store.drop_vector_index()  # type: ignore[attr-defined]
        store.build_vector_index(m=8, ef_construction=40)  # type: ignore[attr-defined]
        assert "m='8'" in definition() and "ef_construction='40'" in definition()
        with pytest.raises(InvalidInputError, match="ef_construction") as caught:
            store.build_vector_index(m=16, ef_construction=20)  # type: ignore[attr-defined]
        assert caught.value.field == "ef_construction"
        assert memory.search("lighthouse", top_k=1, mode="vector", min_score=0)


def test_an_exact_vector_scan_gives_ties_at_the_cut_to_the_oldest_rows(backend_url: str) -> None:
    """Twelve chunks of one text in a conversation tie on every cosine: a scan that keeps
    five keeps the five written first, on every backend, however the rows are read (the
    first five rewritten since, so a server reads them last)."""
    with opened(backend_url) as memory:
        records = [chunk(f"t{i}", "the ferry to the island", turns=(i, i)) for i in range(12)]
        records.append(chunk("other", "a recipe for plum cake", turns=(20, 20)))
        assert memory.upsert_chunks(records).errors == []
        again = [
            {**record, "metadata": {**record["metadata"], "topic": "travel"}}
            for record in records[:5]
        ]
        assert memory.upsert_chunks(again).errors == []
        names = rows_of(memory)
        oldest = sorted(rowid for rowid, name in names.items() if name.startswith("t"))[:5]
        vector = memory._engine.embedding.embed_array(["the ferry to the island"])[0]
        spec = parse_filters({"conversation_id": "c1"}, tenant=memory.tenant)
        hits = memory.store.scan_vectors(memory.tenant, spec, vector, 5)
        assert [rowid for rowid, _ in hits] == oldest
        assert len({round(score, 5) for _, score in hits}) == 1


def test_a_tokenizer_change_rebuilds_every_tenants_lexical_index(backend_url: str) -> None:
    """The rebuild re-indexes each tenant's rows (by tenant and rowid: one shard per
    statement on Citus), and neither tenant's search sees the other's chunks."""
    with opened(backend_url) as memory:
        other = memory.for_tenant("acme")
        assert memory.upsert_chunks([chunk("k1", "she painted two sunrises")]).errors == []
        assert other.upsert_chunks([chunk("k2", "he painted the harbour")]).errors == []
        with memory.store._write() as conn:  # type: ignore[attr-defined]
            conn.execute("UPDATE meta SET value='1' WHERE key='tokenizer_version'")
            conn.execute(  # an index no search can use until it is rebuilt
                "DELETE FROM chunks_fts"
                if memory.store.DIALECT == "sqlite"
                else "UPDATE chunks SET tsv = NULL"
            )
        assert not memory.search("painted", top_k=5, mode="lexical", min_score=0)
    with opened(backend_url) as memory:
        mine = memory.search("paint", top_k=5, mode="lexical", min_score=0)
        theirs = memory.for_tenant("acme").search("paint", top_k=5, mode="lexical", min_score=0)
        assert [h.chunk_id for h in mine] == ["k1"]
        assert [h.chunk_id for h in theirs] == ["k2"]


def _change_of(memory: Memory, chunk_id: str) -> int:
    row = (
        memory.store._db()  # type: ignore[attr-defined]
        .execute(
            "SELECT change_seq FROM chunks WHERE tenant=? AND chunk_id=?", (memory.tenant, chunk_id)
        )
        .fetchone()
    )
    return int(row[0])


def test_every_chunk_write_draws_a_larger_change_number(backend_url: str) -> None:
    """Upserts, tombstones and reopening the store: each write's change number is above
    every earlier one, and ``latest_change`` is the newest handed out."""
    with opened(backend_url) as memory:
        assert memory.store.latest_change() == 0
        assert memory.upsert_chunks([chunk("k1", "first note")]).errors == []
        first = _change_of(memory, "k1")
        assert first >= 1 and memory.store.latest_change() == first
        assert memory.upsert_chunks([chunk("k2", "second note")]).errors == []
        second = _change_of(memory, "k2")
        assert second > first
        assert memory.delete("c1", chunk_ids=["k1"]).deleted == 1
        deleted = _change_of(memory, "k1")
        assert deleted > second and memory.store.latest_change() == deleted
    with opened(backend_url) as memory:
        assert memory.store.latest_change() == deleted
        assert memory.upsert_chunks([chunk("k3", "after reopening")]).errors == []
        assert _change_of(memory, "k3") > deleted


@pytest.mark.parametrize("backend", ["postgres", "citus"])
def test_a_server_store_of_an_earlier_release_goes_on_from_its_counter(backend_url: str) -> None:
    """Stores of earlier releases counted in ``meta``; the sequence that replaces the row
    starts above it, so change numbers never go back."""
    with opened(backend_url) as memory:
        assert memory.upsert_chunks([chunk("k1", "first note")]).errors == []
        with memory.store._write() as conn:  # type: ignore[attr-defined]
            conn.execute("DROP SEQUENCE convmem_change_seq")
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('change_seq', '500') "
                "ON CONFLICT (key) DO UPDATE SET value = '500'"
            )
    with opened(backend_url) as memory:
        assert memory.store.latest_change() == 500
        assert memory.upsert_chunks([chunk("k2", "second note")]).errors == []
        assert _change_of(memory, "k2") == 501


@pytest.mark.parametrize("backend", ["postgres"])
def test_term_counts_follow_the_planners_estimate(backend_url: str, monkeypatch: Any) -> None:
    """Document counts of query terms (BM25's idf) on a server: the column statistics'
    count for a listed term, the planner's floor for unlisted ones, and an exact count
    while that estimate is small. (Citus: tests/test_citus.py, per shard.)"""
    import random

    from convmem.store import postgres_lexical

    vocabulary = [f"word{i}" for i in range(30)]
    rng = random.Random(5)
    records = [
        chunk(f"k{i}", " ".join(rng.sample(vocabulary, 6)) + (" zebra" if i < 2 else ""))
        for i in range(600)
    ]
    with opened(backend_url) as memory:
        assert memory.upsert_chunks(records).errors == []
        store = memory.store
        with store._write() as conn:  # type: ignore[attr-defined]
            conn.execute("SET LOCAL default_statistics_target = 1")  # list 10 terms only
            conn.execute("ANALYZE chunks")

        def planned(term: str) -> int:
            plan = (
                store._db()  # type: ignore[attr-defined]
                .execute(
                    "EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks WHERE tsv @@ CAST(? AS tsquery)",
                    (postgres_lexical._tsquery([term]),),
                )
                .fetchone()[0]
            )
            return int(plan[0]["Plan"]["Plan Rows"])

        (table,) = store._common_terms()  # type: ignore[attr-defined]
        listed = next(term for term in table if term)
        assert "zebra" not in table and planned("zebra") == table[""] == 3
        assert planned(listed) == table[listed] > 3
        with store._write() as conn:  # type: ignore[attr-defined]
            assert store._term_counts(conn, ["zebra", listed])["zebra"] == 2  # type: ignore[attr-defined]
        monkeypatch.setattr(postgres_lexical, "EXACT_COUNT_BELOW", 2)
        store._forget_terms()
        with store._write() as conn:  # type: ignore[attr-defined]
            counts = store._term_counts(conn, ["zebra", listed])  # type: ignore[attr-defined]
        assert counts == {"zebra": 3, listed: table[listed]}


def test_scope_terms_count_one_conversations_live_chunks(backend_url: str) -> None:
    """How many live chunks of the searched conversation hold each term: what the
    calibration's ``absent`` feature reads. Other conversations, other tenants and deleted
    chunks do not count; a tenant-wide search learns whether its tenant says each term."""
    from convmem.text import tokenize

    with opened(backend_url) as memory:
        records = [
            chunk("t1", "the ferry leaves at noon", conversation="trip"),
            chunk("t2", "ferry tickets at the pier", conversation="trip"),
            chunk("t3", "lunch at the harbour", conversation="trip"),
            chunk("t4", "a ferry we will not count", conversation="trip"),
            chunk("o1", "zebra ferry zebra", conversation="other"),
        ]
        assert memory.upsert_chunks(records).errors == []
        assert (
            memory.for_tenant("acme")
            .upsert_chunks([chunk("a1", "zebra tickets walrus", conversation="trip")])
            .errors
            == []
        )
        assert memory.delete("trip", chunk_ids=["t4"]).deleted == 1
        ferry, tickets, zebra = (tokenize(word)[0] for word in ("ferry", "tickets", "zebra"))
        spec = parse_filters({"conversation_id": "trip"}, tenant=memory.tenant)
        assert memory.store.scope_terms(memory.tenant, spec, [ferry, tickets, zebra]) == (
            3,
            {ferry: 2, tickets: 1, zebra: 0},
        )
        # tenant-wide: whether a live chunk of the tenant holds each term (another
        # conversation's does; a deleted one's and another tenant's do not), capped at 1
        wide = parse_filters(None, tenant=memory.tenant)
        count, walrus = tokenize("count")[0], tokenize("walrus")[0]
        assert memory.store.scope_terms(memory.tenant, wide, [ferry, zebra, count, walrus]) == (
            1,
            {ferry: 1, zebra: 1, count: 0, walrus: 0},
        )
        acme = parse_filters(None, tenant="acme")
        assert memory.store.scope_terms("acme", acme, [walrus, ferry]) == (1, {walrus: 1, ferry: 0})
        nobody = parse_filters(None, tenant="nobody")
        assert memory.store.scope_terms("nobody", nobody, [ferry]) == (0, {ferry: 0})
        # a filter that admits none of the tenant's chunks says no word either
        elsewhere = parse_filters(
            {"conversation_id": {"$in": ["nowhere", "elsewhere"]}}, tenant=memory.tenant
        )
        assert memory.store.scope_terms(memory.tenant, elsewhere, [ferry]) == (0, {ferry: 0})
        # the search reads both from one pass over the conversation's rows: the same
        # ranking as lexical(), though it also counts a word the query does not hold
        lunch = tokenize("lunch")[0]
        store = memory.store
        for query in ([ferry, tickets], [lunch], []):
            rankings, scope = store.lexical_in_scope(
                memory.tenant, spec, [query], 10, [zebra, lunch]
            )
            assert rankings == [store.lexical(memory.tenant, spec, query, 10)]
            assert scope == (3, {zebra: 0, lunch: 1})
        # several token lists (a question and its synonyms) from that one read: each ranks
        # as lexical() ranks it alone, none takes the others' words
        queries = [[ferry], [tickets, lunch], [zebra]]
        rankings, scope = store.lexical_in_scope(memory.tenant, spec, queries, 10, [zebra])
        assert rankings == [store.lexical(memory.tenant, spec, query, 10) for query in queries]
        assert rankings[0] and rankings[1] and rankings[0] != rankings[1] and rankings[2] == []
        assert scope == (3, {zebra: 0})
        rankings, scope = store.lexical_in_scope(memory.tenant, wide, queries, 10, [zebra, count])
        assert scope == (1, {zebra: 1, count: 0})
        # tenant-wide, the lists after the question's own are secondary rankings
        assert rankings == [
            store.lexical(memory.tenant, wide, query, 10, secondary=index > 0)
            for index, query in enumerate(queries)
        ]


def test_conversation_participants_are_the_names_of_its_live_chunks(backend_url: str) -> None:
    """Who speaks in one conversation, read by the search to leave their names out of
    the question's vector: other conversations and deleted turns do not count."""
    base = "2026-02-02T10:00:00+08:00"

    def turn(seq: int, name: str, text: str) -> dict[str, Any]:
        return {"turn_id": seq, "role": "user", "name": name, "text": text, "timestamp": base}

    with opened(backend_url) as memory:
        memory.add_turns(
            "trip", [turn(0, "Caroline", "I went hiking."), turn(1, "Melanie", "Where did you go?")]
        )
        memory.add_turns("other", [turn(0, "Jon", "My dance studio opened.")])
        memory.add_turns("gone", [turn(0, "Gina", "A secret I take back.")])
        memory.flush()
        assert memory.delete("gone", turn_range=(0, 0)).deleted >= 1
        store = memory.store
        assert store.conversation_participants(memory.tenant, "trip") == ["Caroline", "Melanie"]
        assert store.conversation_participants(memory.tenant, "gone") == []
        assert store.conversation_participants("someone-else", "trip") == []


def test_participants_since_reads_who_speaks_in_a_tenant_and_what_changed(backend_url: str) -> None:
    """Who speaks anywhere in a tenant (what a tenant-wide search leaves out of a question's
    vector): every live chunk's participants, or only those of chunks changed in a range
    of change numbers; deleted chunks and other tenants never count."""
    base = "2026-02-02T10:00:00+08:00"

    def turn(seq: int, name: str, text: str) -> dict[str, Any]:
        return {"turn_id": seq, "role": "user", "name": name, "text": text, "timestamp": base}

    with opened(backend_url) as memory:
        store = memory.store
        memory.add_turns(
            "trip", [turn(0, "Caroline", "I went hiking."), turn(1, "Melanie", "Where did you go?")]
        )
        memory.add_turns("gone", [turn(0, "Gina", "A secret I take back.")])
        memory.flush()
        assert memory.delete("gone", turn_range=(0, 0)).deleted >= 1
        memory.for_tenant("elsewhere").add_turns("x", [turn(0, "Nate", "Hello there.")])
        memory.for_tenant("elsewhere").flush()
        read = store.latest_change()
        assert store.participants_since(memory.tenant, None, read) == {"Caroline", "Melanie"}
        memory.add_turns("studio", [turn(0, "Jon", "My dance studio opened.")])
        memory.flush()
        latest = store.latest_change()
        assert latest > read
        assert store.participants_since(memory.tenant, read, latest) == {"Jon"}
        assert store.participants_since(memory.tenant, None, latest) == {
            "Caroline",
            "Jon",
            "Melanie",
        }
        assert store.participants_since("elsewhere", None, latest) == {"Nate"}
        assert store.participants_since("nobody", None, latest) == set()


def test_a_long_conversation_scores_the_same_however_its_rows_are_read(backend_url: str) -> None:
    """Past SCOPE_SCAN_ROWS live chunks a conversation's rows that hold an asked term are
    found through the lexical index instead of reading the conversation: the same BM25
    scores and term counts, never a deleted or foreign chunk."""
    from convmem.text import tokenize

    words = ["ferry", "pier", "tickets", "harbour", "lunch", "island", "noon", "boat"]
    with opened(backend_url) as memory:
        records = [
            chunk(
                f"long{i}",
                " ".join(words[(i * j) % len(words)] for j in range(1, 2 + i % 6)) + f" n{i}",
                conversation="long",
                turns=(i, i),
            )
            for i in range(30)
        ]
        records += [chunk(f"o{i}", "ferry ferry pier", conversation="other") for i in range(5)]
        records.append(chunk("gone", "ferry pier tickets", conversation="long", turns=(40, 40)))
        assert memory.upsert_chunks(records).errors == []
        assert memory.delete("long", chunk_ids=["gone"]).deleted == 1
        store = memory.store
        spec = parse_filters({"conversation_id": "long"}, tenant=memory.tenant)
        ferry, pier, lunch, zebra = (tokenize(w)[0] for w in ("ferry", "pier", "lunch", "zebra"))
        queries = [[ferry, pier], [lunch], [zebra]]
        found = []
        for limit in (10_000, 5):
            store.SCOPE_SCAN_ROWS = limit
            found.append(store.lexical_in_scope(memory.tenant, spec, queries, 50, [zebra, lunch]))
        (rankings, scope), (long_rankings, long_scope) = found
        assert scope[0] == long_scope[0] == 30 and scope[1] == long_scope[1]
        assert [[rowid for rowid, _ in ranking] for ranking in long_rankings] == [
            [rowid for rowid, _ in ranking] for ranking in rankings
        ]
        assert [[round(score, 6) for _, score in ranking] for ranking in long_rankings] == [
            [round(score, 6) for _, score in ranking] for ranking in rankings
        ]
        names = rows_of(memory)
        assert rankings[0] and all(
            names[rowid].startswith("long") for ranking in rankings for rowid, _ in ranking
        )
