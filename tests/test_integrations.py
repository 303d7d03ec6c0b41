"""Framework adapters against the frameworks' real classes, and the asyncio face."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from convmem import HashingEmbedder, Memory
from convmem.aio import AsyncMemory
from convmem.embed.base import Vectors
from convmem.errors import InvalidInputError, StoreError
from convmem.governance import KeepAllMarker
from helpers import make_turns

FACTS = ["我护照是2025年2月18日过期的。", "了解，我记下了。"]
OTHER = ["我的车停在B区17号。", "好的。"]


def _extra(module: str) -> None:
    """Skip without the extra, with the reason; CI installs every extra, so there it fails."""
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{module} is not installed (pip install -e '.[langchain,llamaindex]')")


def _filled(memory: Memory) -> Memory:
    memory.add_turns("trip", make_turns(FACTS))
    memory.add_turns("car", make_turns(OTHER))
    memory.flush()
    return memory


def test_langchain_retriever_returns_documents_of_one_conversation(memory: Memory) -> None:
    _extra("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from convmem.integrations.langchain import ConvmemRetriever

    retriever = ConvmemRetriever(memory=_filled(memory), conversation_id="trip", k=3)
    assert isinstance(retriever, BaseRetriever)
    documents = retriever.invoke("护照哪天过期")
    assert documents and all(isinstance(d, Document) for d in documents)
    assert "2025年2月18日" in documents[0].page_content
    assert {d.metadata["conversation_id"] for d in documents} == {"trip"}
    assert (
        documents[0].metadata["chunk_id"].startswith("chk_") and documents[0].metadata["score"] > 0
    )
    again = asyncio.run(retriever.ainvoke("护照哪天过期"))
    assert [d.page_content for d in again] == [d.page_content for d in documents]


def test_retrievers_refuse_filters_naming_another_conversation(memory: Memory) -> None:
    """filters' conversation_id used to be overwritten silently by conversation_id."""
    _extra("langchain_core")
    _extra("llama_index.core")
    from convmem.integrations import langchain, llamaindex

    _filled(memory)
    for adapter in (langchain, llamaindex):
        clash = adapter.ConvmemRetriever(
            memory=memory, conversation_id="trip", filters={"conversation_id": "car"}
        )
        with pytest.raises(InvalidInputError, match=r"'trip'.*'car'") as caught:
            clash.invoke("护照") if adapter is langchain else clash.retrieve("护照")
        assert caught.value.field == "filters.conversation_id"
        same = adapter.ConvmemRetriever(
            memory=memory, conversation_id="trip", filters={"conversation_id": "trip"}, k=3
        )
        found = (
            same.invoke("护照哪天过期") if adapter is langchain else same.retrieve("护照哪天过期")
        )
        assert found


def test_llamaindex_retriever_returns_scored_nodes(memory: Memory) -> None:
    _extra("llama_index.core")
    from llama_index.core.schema import MetadataMode, NodeWithScore

    from convmem.integrations.llamaindex import ConvmemRetriever

    retriever = ConvmemRetriever(memory=_filled(memory), conversation_id="car", k=2)
    nodes = retriever.retrieve("车停在哪")
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    assert "B区17号" in nodes[0].node.get_content() and nodes[0].score is not None
    assert nodes[0].node.metadata["conversation_id"] == "car"
    # an LLM prompt shows when and who, not the search's internals (kept in metadata)
    prompt = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "timestamp_range" in prompt and "B区17号" in prompt
    assert "rank_score" not in prompt and "turn_seqs" not in prompt
    assert "rank_score" in nodes[0].node.metadata


def test_llamaindex_async_retrieval_leaves_the_event_loop_free(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    _extra("llama_index.core")
    import convmem.integrations.llamaindex as adapter

    threads: list[int] = []
    real = adapter.search_scope

    def recorded(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(adapter, "search_scope", recorded)
    retriever = adapter.ConvmemRetriever(memory=_filled(memory), conversation_id="car", k=2)

    async def run() -> tuple[list[str], int]:
        nodes = await retriever.aretrieve("车停在哪")
        return [node.node.get_content() for node in nodes], threading.get_ident()

    texts, loop_thread = asyncio.run(run())
    assert texts == [node.node.get_content() for node in retriever.retrieve("车停在哪")]
    assert threads[0] != loop_thread


def test_async_memory_offloads_the_same_methods(memory: Memory) -> None:
    async def run() -> list[str]:
        facade = AsyncMemory(memory)
        await facade.add_turns("trip", make_turns(FACTS))
        await facade.flush()
        hits = await facade.search("护照", top_k=2)
        return [hit.text for hit in hits]

    texts = asyncio.run(run())
    assert texts and "2025年2月18日" in texts[0]
    with pytest.raises(AttributeError, match="sync"):
        AsyncMemory(memory).close  # noqa: B018 (the attribute access is the test)


class _GatedEmbedder(HashingEmbedder):
    """Once armed, each embedding waits at ``gate``: a search's thread held in the store."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.armed:
            self.entered.release()
            assert self.gate.wait(10), "the test never opened the gate"
        return super().embed(texts)


async def _acquired(semaphore: threading.Semaphore, timeout: float = 10.0) -> bool:
    """Acquire without blocking the event loop or taking one of its executor's threads."""
    deadline = time.monotonic() + timeout
    while not semaphore.acquire(blocking=False):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


@pytest.mark.parametrize(
    ("calls", "threads", "running"),
    [
        (3, None, 3),  # every call has a thread: one embeds, two wait for the embedder
        (2, 1, 1),  # one thread: the second call, cancelled before it ran, never runs
    ],
)
def test_async_memory_aclose_waits_for_the_threads_of_cancelled_calls(
    store_url: str, monkeypatch: pytest.MonkeyPatch, calls: int, threads: int | None, running: int
) -> None:
    """Cancelling a task does not stop its thread: aclose used to close the store (every
    thread's SQLite connection) under threads still reading it, which could segfault."""
    embedder = _GatedEmbedder()
    memory = Memory.open(store_url, embedder=embedder, marker=KeepAllMarker(), workers=0)
    memory.add_turns("trip", make_turns(FACTS))
    memory.flush()
    outcomes: list[object] = []
    started = threading.Semaphore(0)
    real_search = memory.search

    def recorded(*args: Any, **kwargs: Any) -> Any:  # the real search, its outcome kept
        started.release()
        try:
            hits = real_search(*args, **kwargs)
        except BaseException as exc:
            outcomes.append(exc)
            raise
        outcomes.append(hits)
        return hits

    monkeypatch.setattr(memory, "search", recorded)

    async def run() -> tuple[list[BaseException | None], bool]:
        if threads is not None:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(threads))
        facade = AsyncMemory(memory)
        embedder.armed = True
        tasks = [asyncio.create_task(facade.search("护照", top_k=2)) for _ in range(calls)]
        for ready in [started] * running + [embedder.entered]:
            assert await _acquired(ready)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        closing = asyncio.create_task(facade.aclose())
        await asyncio.sleep(0.2)
        held = not closing.done()  # waiting for the threads, the store still open
        embedder.gate.set()
        await asyncio.wait_for(closing, 10)
        with pytest.raises(StoreError, match="closed"):
            await facade.search("护照")
        return [r if isinstance(r, BaseException) else None for r in results], held

    try:
        results, held = asyncio.run(run())
    finally:
        embedder.gate.set()
        memory.close()
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert held, "aclose closed the store while cancelled calls' threads were still in it"
    assert len(outcomes) == running  # each ran to the end, on an open store
    assert all(isinstance(hits, list) and hits for hits in outcomes), outcomes
    with pytest.raises(StoreError, match="closed"):
        memory.recent_turns("trip", 2)  # aclose did close the Memory


def test_langgraph_store_round_trips_searches_and_forgets(memory: Memory) -> None:
    _extra("langgraph")
    from langgraph.store.base import BaseStore

    from convmem.integrations.langgraph import ConvmemStore

    store = ConvmemStore(memory)
    assert isinstance(store, BaseStore)
    value = {"text": "我喜欢靠窗的座位", "kind": "preference", "weight": 2}
    store.put(("alice", "prefs"), "seat", value)
    store.put(("alice", "prefs"), "food", {"text": "我不吃香菜", "kind": "diet"})
    store.put(("bob", "prefs"), "seat", {"text": "我喜欢靠过道的座位", "kind": "preference"})
    item = store.get(("alice", "prefs"), "seat")
    assert item is not None and item.value == value and item.key == "seat"
    assert item.namespace == ("alice", "prefs")
    first_created = item.created_at
    store.put(("alice", "prefs"), "seat", {**value, "weight": 3})  # update keeps created_at
    updated = store.get(("alice", "prefs"), "seat")
    assert (
        updated is not None and updated.value["weight"] == 3 and updated.created_at == first_created
    )
    hits = store.search(("alice",), query="座位")
    assert [hit.key for hit in hits][:1] == ["seat"] and hits[0].score is not None
    assert all(hit.namespace[0] == "alice" for hit in hits)  # bob's tenant never shows
    listed = store.search(("alice", "prefs"), filter={"kind": "diet"})
    assert [hit.key for hit in listed] == ["food"]
    store.delete(("alice", "prefs"), "seat")
    assert store.get(("alice", "prefs"), "seat") is None
    assert "seat" not in [hit.key for hit in store.search(("alice",), query="座位")]
    assert asyncio.run(store.aget(("bob", "prefs"), "seat")) is not None


def test_langgraph_store_refuses_a_value_json_cannot_hold(memory: Memory) -> None:
    _extra("langgraph")
    from datetime import UTC, datetime

    from convmem.integrations.langgraph import ConvmemStore

    store = ConvmemStore(memory)
    moment = datetime(2026, 2, 2, tzinfo=UTC)
    with pytest.raises(InvalidInputError, match=r"value\.trip\.when holds a datetime.*isoformat"):
        store.put(("alice", "plans"), "trip", {"text": "东京", "trip": {"when": moment}})
    with pytest.raises(InvalidInputError) as caught:
        store.put(("alice", "plans"), "tags", {"text": "x", "tags": ["a", {1, 2}]})
    assert caught.value.field == "value.tags[1]"
    assert store.get(("alice", "plans"), "trip") is None  # nothing was stored
