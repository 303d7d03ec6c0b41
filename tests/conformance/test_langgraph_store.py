"""The LangGraph store side by side with LangGraph's own ``InMemoryStore``, on SQLite and
PostgreSQL: random puts (some with ``index=False``), deletes and re-puts over nested
namespaces of two users, then gets, filtered listings, pages, queries and namespace
listings compared after every step.

A query search must return every item under the prefix that matches the filter (ranked
items first, then the rest without a score, as ``InMemoryStore`` fills), never another
user's, and never a deleted one. Before this test the adapter searched only the exact
namespace's conversation (a prefix missed deeper namespaces), checked a filter on its best
hits only, understood no operator and could not list namespaces.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from convmem import HashingEmbedder, Memory
from convmem.clock import ManualClock
from convmem.errors import InvalidInputError
from convmem.integrations.langgraph import ConvmemStore

NAMESPACES = [
    ("alice",),
    ("alice", "notes"),
    ("alice", "notes", "work"),
    ("alice", "prefs"),
    ("alice", "a/b"),
    ("alice", "a", "b"),
    ("bob", "notes"),
]
KEYS = ["seat", "food", "trip", "座位"]
TEXTS = [
    "我喜欢靠窗的座位",
    "我不吃香菜",
    "下个月去东京出差",
    "I prefer the aisle seat",
    "my passport expires in May",
    "周末和小王去爬山",
]
QUERIES = ["座位", "香菜", "东京 出差", "seat", "passport", "爬山", "完全无关的问题"]
KINDS = ["preference", "fact", "task"]


@pytest.fixture
def stores(backend_url: str) -> Iterator[tuple[ConvmemStore, InMemoryStore]]:
    memory = Memory.open(backend_url, embedder=HashingEmbedder(), workers=0)
    try:
        yield ConvmemStore(memory), InMemoryStore()
    finally:
        memory.close()


def _value(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {
        "text": rng.choice(TEXTS),
        "n": rng.randint(0, 5),
        "meta": {"level": rng.randint(0, 2)},
    }
    if rng.random() < 0.7:
        value["kind"] = rng.choice(KINDS)
    if rng.random() < 0.5:
        value["labels"] = rng.sample(["a", "b", "c"], rng.randint(0, 2))
    return value


def _filter(rng: random.Random) -> dict[str, Any]:
    choices: list[dict[str, Any]] = [
        {},
        {"kind": rng.choice(KINDS)},
        {"kind": {"$ne": rng.choice(KINDS)}},
        {"n": {"$gt": rng.randint(0, 5)}},
        {"n": {"$gte": rng.randint(0, 5), "$lt": rng.randint(0, 6)}},
        {"n": {"$lte": rng.randint(0, 5)}, "kind": {"$eq": rng.choice(KINDS)}},
        {"n": rng.randint(0, 5)},
        {"meta": {"level": rng.randint(0, 2)}},
        {"labels": rng.sample(["a", "b", "c"], rng.randint(0, 2))},
    ]
    return rng.choice(choices)


def _keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(item.namespace, item.key) for item in items]


def _expected_namespaces(
    reference: Any, user: str, suffix: tuple[str, ...] | None, depth: int | None
) -> list[tuple[str, ...]]:
    """Namespaces that hold a live item (``InMemoryStore`` also lists emptied and merely
    read ones), matched and cut as LangGraph defines."""
    held = {item.namespace for item in reference.search((user,), limit=10_000)}
    if suffix is not None:
        held = {
            ns
            for ns in held
            if len(ns) >= len(suffix)
            and all(
                want in ("*", have) for have, want in zip(ns[-len(suffix) :], suffix, strict=True)
            )
        }
    if depth is not None:
        held = {ns[:depth] for ns in held}
    return sorted(held)


def _compare(store: Any, reference: Any, rng: random.Random) -> None:
    namespace = rng.choice(NAMESPACES)
    key = rng.choice(KEYS)
    mine, theirs = store.get(namespace, key), reference.get(namespace, key)
    assert (mine is None) == (theirs is None), (namespace, key)
    if mine is not None:
        assert (mine.namespace, mine.key, mine.value) == (
            theirs.namespace,
            theirs.key,
            theirs.value,
        )
        assert mine.updated_at >= mine.created_at

    prefix = namespace[: rng.randint(1, len(namespace))]
    wanted = _filter(rng)
    expected = set(_keys(reference.search(prefix, filter=wanted, limit=1000)))
    listed = store.search(prefix, filter=wanted, limit=1000)
    assert set(_keys(listed)) == expected, (prefix, wanted)
    assert len(listed) == len(expected)
    pages = [store.search(prefix, filter=wanted, limit=2, offset=start) for start in (0, 2, 4)]
    assert _keys([item for page in pages for item in page]) == _keys(listed)[:6]

    query = rng.choice(QUERIES)
    found = store.search(prefix, query=query, filter=wanted, limit=1000)
    assert set(_keys(found)) == expected, (prefix, query, wanted)
    scores = [item.score for item in found]
    ranked = [score for score in scores if score is not None]
    assert scores[: len(ranked)] == ranked and ranked == sorted(ranked, reverse=True)
    top = store.search(prefix, query=query, filter=wanted, limit=3)
    assert _keys(top) == _keys(found)[:3]

    user = namespace[0]
    suffix = rng.choice([None, ("notes",), ("*",), ("b",), ("work",)])
    depth = rng.choice([None, 1, 2])
    assert store.list_namespaces(
        prefix=(user,), suffix=suffix, max_depth=depth
    ) == _expected_namespaces(reference, user, suffix, depth)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sequences_agree_with_langgraphs_in_memory_store(
    stores: tuple[Any, Any], seed: int
) -> None:
    store, reference = stores
    rng = random.Random(seed)
    for _ in range(40):
        namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
        if rng.random() < 0.75:
            value = _value(rng)
            index = False if rng.random() < 0.1 else None
            store.put(namespace, key, value, index=index)
            reference.put(namespace, key, value, index=index)
        else:
            store.delete(namespace, key)
            reference.delete(namespace, key)
        _compare(store, reference, rng)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_bad_filters_and_listings_name_the_field(stores: tuple[Any, Any]) -> None:
    store, _ = stores
    store.put(("alice", "notes"), "seat", {"text": "我喜欢靠窗的座位", "n": 1})
    cases = [
        (lambda: store.search(("alice",), filter={"n": {"$regex": "x"}}), "filter.n.$regex"),
        (lambda: store.search(("alice",), filter={"n": {"$gt": "1"}}), "filter.n.$gt"),
        (lambda: store.search(("alice",), limit=-1), "limit"),
        (lambda: store.search((), query="座位"), "namespace_prefix"),
        (lambda: store.list_namespaces(), "prefix"),
        (lambda: store.list_namespaces(prefix=("*",)), "prefix"),
    ]
    for call, field in cases:
        with pytest.raises(InvalidInputError) as caught:
            call()
        assert caught.value.field == field
    # the refusals changed nothing
    assert store.get(("alice", "notes"), "seat") is not None
    for bad in (-1, 0, float("inf"), "5"):
        with pytest.raises(InvalidInputError) as caught:
            store.put(("alice", "notes"), "trip", {"text": "东京"}, ttl=bad)
        assert caught.value.field == "ttl"
    assert store.get(("alice", "notes"), "trip") is None


@pytest.mark.parametrize("backend", ["sqlite"])
def test_index_paths_choose_what_a_query_ranks(stores: tuple[Any, Any]) -> None:
    store, _ = stores
    value = {"text": "我不吃香菜", "profile": {"bio": "常去东京出差"}}
    store.put(("alice", "notes"), "bio", value, index=["profile.bio"])
    store.put(("alice", "notes"), "plain", {"text": "我不吃香菜"})
    store.put(("alice", "notes"), "hidden", {"text": "东京出差"}, index=False)
    found = {item.key: item.score for item in store.search(("alice",), query="东京 出差")}
    assert set(found) == {"bio", "plain", "hidden"}
    assert found["hidden"] is None  # never ranked, still listed
    assert found["bio"] is not None and found["bio"] > (found["plain"] or 0.0)
    coriander = {item.key: item.score for item in store.search(("alice",), query="香菜")}
    assert coriander["plain"] is not None and coriander["plain"] > (coriander["bio"] or 0.0)
    assert store.get(("alice", "notes"), "bio").value == value  # the whole value is kept


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_ttl_expires_items_and_a_read_refreshes_them(backend_url: str) -> None:
    clock = ManualClock(datetime(2026, 5, 1, 9, 0, tzinfo=UTC).timestamp())
    memory = Memory.open(backend_url, embedder=HashingEmbedder(), workers=0, clock=clock)
    try:
        store = ConvmemStore(memory, ttl={"default_ttl": 2})
        store.put(("alice", "notes"), "short", {"text": "我不吃香菜"}, ttl=1)
        store.put(("alice", "notes"), "default", {"text": "下个月去东京出差"})  # 2 minutes
        store.put(("alice", "notes"), "kept", {"text": "我喜欢靠窗的座位"}, ttl=None)
        clock.advance(50)
        assert store.get(("alice", "notes"), "short") is not None  # refreshed: until 110 s
        clock.advance(50)
        assert store.get(("alice", "notes"), "short", refresh_ttl=False) is not None
        found = {item.key for item in store.search(("alice",), query="香菜")}
        assert found == {"short", "default", "kept"}  # the search refreshed all: 160 s, 220 s
        clock.advance(65)  # 165 s: "short" is past its refreshed expiry
        assert store.get(("alice", "notes"), "short") is None
        listed = store.search(("alice",), limit=10, refresh_ttl=False)
        assert {item.key for item in listed} == {"default", "kept"}
        clock.advance(60)  # 225 s
        assert {item.key for item in store.search(("alice",), query="东京")} == {"kept"}
        assert store.list_namespaces(prefix=("alice",)) == [("alice", "notes")]
        store.put(("alice", "notes"), "short", {"text": "我不吃香菜"}, ttl=1)  # put again
        assert store.get(("alice", "notes"), "short") is not None
        clock.advance(10**6)
        assert store.list_namespaces(prefix=("alice",)) == [("alice", "notes")]  # "kept"
        assert [item.key for item in store.search(("alice",))] == ["kept"]
    finally:
        memory.close()
