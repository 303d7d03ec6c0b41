"""Freed heap memory is given back to the OS (issue 18, item 16: RSS that never fell)."""

from __future__ import annotations

import ctypes
import json
import logging
import platform
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from convmem.worker.heap import HeapTrimmer, trim_heap

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="malloc_trim is a glibc function"
)


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss / 2**20)


@glibc
def test_trim_gives_freed_heap_back_to_the_os() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(1024) for _ in range(100_000)]  # ~100 MiB of small blocks
    for block in blocks:
        ctypes.memset(block, 1, 1024)
    # free all but the last: the heap top stays pinned, so free() alone keeps the pages
    for block in blocks[:-1]:
        libc.free(block)
    before = _rss_mb()
    assert trim_heap()
    after = _rss_mb()
    libc.free(blocks[-1])
    assert before - after > 50, (before, after)


def test_trimmer_refuses_a_negative_interval() -> None:
    with pytest.raises(ValueError, match="interval_seconds"):
        HeapTrimmer(interval_seconds=-1)


@glibc
def test_trimmer_thread_starts_and_stops() -> None:
    trimmer = HeapTrimmer(interval_seconds=0.01)
    trimmer.start()
    assert any(t.name == "convmem-heap-trim" for t in threading.enumerate())
    trimmer.stop()
    assert all(t.name != "convmem-heap-trim" for t in threading.enumerate())


def test_trimmer_with_zero_interval_starts_nothing() -> None:
    trimmer = HeapTrimmer(interval_seconds=0)
    trimmer.start()
    trimmer.stop()  # no thread to join: returns at once


def test_a_frozen_startup_heap_leaves_later_garbage_to_the_collector() -> None:
    """``convmem serve`` and ``convmem mcp`` freeze what start-up made: a full collection
    no longer walks it, and what the process makes later is still collected. In a child
    process (freezing is process-wide)."""
    script = """
import gc, json
import convmem
from convmem.worker.heap import freeze_startup_heap

frozen = freeze_startup_heap()
tracked = len(gc.get_objects())

class Node:
    pass

gc.disable()  # every cycle waits for the collection below
for _ in range(1000):  # cycles made after start-up: garbage only the collector finds
    a, b = Node(), Node()
    a.other, b.other = b, a
del a, b
print(json.dumps({"frozen": frozen, "tracked": tracked, "collected": gc.collect()}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(result.stdout)
    assert found["frozen"] > 10_000  # convmem's modules and what they import
    assert found["tracked"] < 1_000  # what a full collection still walks
    assert found["collected"] >= 2_000  # both objects of every cycle


def test_warm_up_loads_what_the_first_searches_would(tmp_path: object) -> None:
    """``Memory.warm_up`` (what ``convmem serve`` and ``convmem mcp`` call before they
    freeze their start-up heap) loads the word segmenter's dictionary and the
    Chinese-English dictionary (which only a Chinese question of English memory reads), so
    that no request waits for them, and memory already stored is still searchable after
    it. In a child process: both are loaded once per process."""
    script = f"""
import json
import jieba
from convmem import HashingEmbedder, Memory
from convmem.text import bilingual

path = {str(tmp_path)!r} + "/m.db"
with Memory.open(path, embedder=HashingEmbedder(), workers=0) as memory:
    memory.add_turns("c", [{{"turn_id": 0, "role": "user", "text": "我家的狗叫年糕"}}])
    memory.flush()
    before = bool(bilingual._loaded)
    seconds = memory.warm_up()
    after = [jieba.dt.initialized, bilingual._loaded[0] is not None]
    hits = memory.search("年糕", top_k=3)
print(json.dumps({{"before": before, "after": after, "seconds": seconds,
                  "hits": [hit.text for hit in hits]}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["before"] is False  # writing and indexing never read it
    assert found["after"] == [True, True]
    assert found["seconds"] > 0
    assert any("年糕" in text for text in found["hits"])


def test_warm_up_starts_a_service_whose_embedder_cannot_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A service starts when its embedding endpoint is down at start-up: the warm-up's
    searches fall back to the lexical side and say why, and memory stays searchable."""
    from convmem import HashingEmbedder, Memory
    from convmem.errors import EmbedderError

    class Down(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            raise EmbedderError("Embedding endpoint http://10.0.0.1 failed: connection refused")

    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", [{"turn_id": 0, "role": "user", "text": "my dog is called Mochi"}])
        memory.flush()
    with Memory.open(str(tmp_path / "m.db"), embedder=Down(), workers=0) as memory:
        with caplog.at_level(logging.WARNING, logger="convmem.retrieve.searcher"):
            assert memory.warm_up() >= 0
        assert "connection refused" in caplog.text
        assert any("Mochi" in hit.text for hit in memory.search("Mochi", top_k=3))
