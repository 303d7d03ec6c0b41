"""Several processes (or handles, each with its own connections) on one SQLite store: a
worker killed mid-pass, and a delete or rechunk landing while a worker holds the jobs.
Each race is forced at one point of the pass by a hook; nothing waits for it by time."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import live_chunks, make_turns

import convmem.worker.indexer as indexer_module
from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.ingest import ChunkingPolicy
from convmem.worker import prepare as real_prepare

TEXTS = [f"the code word for crate {n} is zq{n}x, keep it in mind" for n in range(8)]


def _open(path: Path, **options: Any) -> Memory:
    return Memory.open(
        str(path), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, **options
    )


def _after_prepare(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> list[int]:
    """Run ``action`` once, after the first pass read its conversation, before it writes."""
    fired: list[int] = []

    def prepare(*args: Any, **kwargs: Any) -> Any:
        prepared = real_prepare(*args, **kwargs)
        if not fired:
            fired.append(1)
            action()
        return prepared

    monkeypatch.setattr(indexer_module, "prepare", prepare)
    return fired


def _running(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT job_id, claimed_by FROM jobs WHERE status='running'").fetchall()


KILLED_MID_PASS = """
import os, signal, sys
import convmem.worker.indexer as indexer
from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker

def prepare(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

indexer.prepare = prepare
memory = Memory.open(sys.argv[1], embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0)
memory.run_pending()
"""


def test_jobs_of_a_worker_killed_mid_pass_go_to_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with _open(path) as writer:
        writer.add_turns("c", make_turns(TEXTS))
    worker = subprocess.run(
        [sys.executable, "-c", KILLED_MID_PASS, str(path)], capture_output=True, timeout=120
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    held = _running(path)
    assert held and all(f":{os.getpid()}:" not in claim for _, claim in held)
    with _open(path) as memory:  # opening the store releases the dead pid's claims
        assert _running(path) == []
        assert memory.flush(timeout=30).failed == 0
        text = "\n".join(chunk for chunk, _ in live_chunks(memory, "c").values())
        assert all(f"zq{n}x" in text for n in range(len(TEXTS)))


def test_a_delete_while_a_worker_holds_the_job_is_never_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    with _open(path) as worker, _open(path) as operator:
        worker.add_turns("c", make_turns(TEXTS))
        fired = _after_prepare(monkeypatch, lambda: operator.delete("c", turn_range=(2, 3)))
        worker.flush(timeout=30)
        assert fired
        text = "\n".join(chunk for chunk, _ in live_chunks(worker, "c").values())
        assert "zq2x" not in text and "zq3x" not in text and "zq4x" in text
        for memory in (worker, operator):
            assert not [h for h in memory.search("zq2x", min_score=0) if "zq2x" in h.text]
            recent = [turn.text for turn in memory.recent_turns("c")]
            assert len(recent) == len(TEXTS) - 2 and not any("zq3x" in t for t in recent)
        assert _running(path) == []


def test_a_rechunk_while_a_worker_holds_the_job_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    policy = ChunkingPolicy(max_turns=2, overlap_turns=0, version=7)
    with _open(path) as worker, _open(path, chunking=policy) as operator:
        worker.add_turns("c", make_turns(TEXTS))
        fired = _after_prepare(monkeypatch, lambda: operator.rechunk())
        worker.flush(timeout=30)
        assert fired
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT DISTINCT chunk_version, end_seq - start_seq FROM chunks WHERE deleted=0"
            ).fetchall()
        assert rows == [(7, 1)]


def test_two_handles_saving_the_hnsw_index_at_once_keep_every_chunk(tmp_path: Path) -> None:
    """Two processes closing at once each wrote the index file, then the record of its
    watermark: A's index, B's index, B's record, A's record left B's index under A's
    watermark, and A's new chunk was missing from vector search until a rebuild. Each
    save now writes a file of its own, and the record names it."""
    from convmem import HashingEmbedder, Memory
    from convmem.governance import KeepAllMarker

    path = str(tmp_path / "m.db")

    def handle() -> Memory:
        return Memory.open(
            path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, ann_min_rows=1
        )

    with handle() as first, handle() as second:
        first.add_turns("old", [{"turn_id": 0, "role": "user", "text": "周末去爬山"}])
        first.flush()
        assert second.search("爬山", mode="vector", min_score=0)  # B's index: "old" only
        first.add_turns("new", [{"turn_id": 0, "role": "user", "text": "水族箱密码是斑马灯笼"}])
        first.flush()
        assert first.search("水族箱密码", mode="vector", min_score=0)  # A's index: both
        index_a = first.searcher._sidecar(first.tenant)
        index_b = second.searcher._sidecar(second.tenant)
        assert index_a is not None and index_b is not None
        written_a = index_a._write_index()
        written_b = index_b._write_index()
        index_b._publish(written_b)
        index_a._publish(written_a)  # the last record names A's own file
        index_a._dirty = index_b._dirty = 0  # closing saves nothing more
        record = json.loads(index_a._sidecar.read_text(encoding="utf-8"))
        assert record["file"] == written_a.name and written_a.exists()
        assert record["change_seq"] == index_a._watermark
        assert not written_b.exists()  # the file it replaced is gone
    with handle() as third:
        hits = third.search("水族箱密码", mode="vector", min_score=0, granularity="chunk")
        assert hits and hits[0].metadata["conversation_id"] == "new"
