"""Index worker: retries with backoff, records errors, loses nothing, never double-indexes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from convmem import FlushTimeoutError, HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from helpers import OutageEmbedder, live_chunks, make_turns


def test_embedder_outage_backs_off_records_errors_and_recovers(tmp_path: Path) -> None:
    embedder = OutageEmbedder()
    embedder.down = True
    with Memory.open(
        str(tmp_path / "m.db"),
        embedder=embedder,
        workers=1,
        retry_base_seconds=0.05,
        retry_max_seconds=0.2,
    ) as memory:
        receipt = memory.add_turns(
            "c", make_turns(["护照明年过期", "好的", "我喜欢靠窗", "记下了"])
        )
        with pytest.raises(FlushTimeoutError):
            memory.flush(timeout=0.3)
        # the first pass may load jieba's dictionary first: wait for two failed attempts
        deadline = time.monotonic() + 30
        while memory.job(receipt.job_id).attempts < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        job = memory.job(receipt.job_id)
        assert job.status in ("pending", "running")  # between retries, or mid-attempt
        assert job.attempts >= 2 and embedder.failures >= 2
        assert job.error_code == "embedder_error"
        assert job.error_message and "unavailable" in job.error_message
        assert job.next_retry_at is not None
        stats = memory.stats()
        assert stats["backlog"] == 1 and stats["job_retries"] >= 2
        assert memory.status("c")["backlog"] == 1
        assert memory.recent_turns("c")  # the turns themselves were never at risk
        embedder.down = False
        memory.flush(timeout=10)
        assert memory.job(receipt.job_id).status == "done"
        assert memory.job(receipt.job_id).error_code is None
        assert live_chunks(memory, "c")
        assert memory.search("护照", top_k=1)


def test_jobs_fail_after_max_attempts_and_can_be_retried(tmp_path: Path) -> None:
    embedder = OutageEmbedder()
    embedder.down = True
    with Memory.open(
        str(tmp_path / "m.db"),
        embedder=embedder,
        workers=0,
        retry_base_seconds=0.0,
        max_attempts=3,
        marker=KeepAllMarker(),
    ) as memory:
        receipt = memory.add_turns("c", make_turns(["a fact worth keeping", "noted"]))
        for _ in range(3):
            memory.run_pending()
        result = memory.flush(timeout=1)
        assert result.failed == 1
        failed = memory.jobs("failed")
        assert [job.job_id for job in failed] == [receipt.job_id]
        assert memory.status("c")["failed_jobs"][0]["error_code"] == "embedder_error"
        embedder.down = False
        assert memory.retry_job(receipt.job_id).status == "pending"
        assert memory.flush(timeout=5).failed == 0
        assert memory.job(receipt.job_id).status == "done"


def test_several_worker_threads_give_the_same_chunks_as_one(tmp_path: Path) -> None:
    conversations = {
        f"c{i}": [f"对话{i}的第{j}句：讨论预算、招聘和项目排期" * (1 + j % 3) for j in range(15)]
        for i in range(6)
    }
    results = []
    for name, workers in (("one.db", 0), ("many.db", 3)):
        with Memory.open(
            str(tmp_path / name),
            embedder=HashingEmbedder(),
            marker=KeepAllMarker(),
            workers=workers,
            job_batch=2,
        ) as memory:
            for conversation_id, texts in conversations.items():
                for start in range(0, 15, 4):
                    memory.add_turns(
                        conversation_id, make_turns(texts[start : start + 4], start=start)
                    )
            memory.flush(timeout=30)
            results.append(live_chunks(memory))
    assert results[0] == results[1]


def test_close_releases_claimed_jobs(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    memory = Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0)
    receipt = memory.add_turns("c", make_turns(["hello there", "hi"]))
    memory.store.claim_jobs("elsewhere:1:1", limit=10, lease_seconds=3600)
    assert memory.job(receipt.job_id).status == "running"
    memory.close()
    with Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0) as again:
        # another host whose name differs only in case (or holds a LIKE wildcard) keeps it
        assert again.store.release_worker("Elsewhere:") == 0
        assert again.store.release_worker("elsewhere_") == 0
        assert again.job(receipt.job_id).status == "running"
        # a claim by a dead process on this host is released at open
        assert again.store.release_worker("elsewhere:") == 1
        assert again.flush(timeout=5).pending == 0
        assert again.job(receipt.job_id).status == "done"


def test_metrics_follow_the_seed(memory: Memory) -> None:
    memory.add_turns("c", make_turns(["一", "二", "三", "四"]))
    before = memory.stats()
    assert before["backlog_by_conversation"] == {"c": 1}
    memory.flush()
    stats = memory.stats()
    assert stats["chunks_ingested"] >= 1
    assert stats["embedding_latency_seconds"]["count"] >= 1
    assert stats["index_batch_seconds"]["count"] >= 1
    assert stats["upsert_failures"] == 0
    assert stats["backlog"] == 0 and stats["backlog_by_conversation"] == {}
    assert memory.stats()["search_latency_seconds"]["count"] == 0
    memory.search("一")
    memory.search("二", mode="lexical")
    latency = memory.stats()["search_latency_seconds"]
    assert latency["count"] == 2  # one observation per search, whatever the mode
    assert memory.instruments()["search_seconds"].summary()["count"] == 2


def test_a_failing_conversation_does_not_hold_back_the_others(tmp_path: Path) -> None:
    class TrippingMarker(KeepAllMarker):
        """Fails on one conversation's text, as a marker bug would."""

        def mark(self, turns: Any, context: Any, policy: Any) -> Any:
            if any("trips" in turn.text for turn in turns):
                raise RuntimeError("marker bug on this conversation")
            return super().mark(turns, context, policy)

    with Memory.open(
        str(tmp_path / "m.db"),
        embedder=HashingEmbedder(),
        marker=TrippingMarker(),
        workers=0,
        retry_base_seconds=60,
    ) as memory:
        bad = memory.add_turns("poison", make_turns(["this conversation trips the marker", "ok"]))
        good = memory.add_turns("fine", make_turns(["this one is indexed", "good"]))
        assert memory.run_pending() == 1
        assert memory.job(good.job_id).status == "done"
        failed = memory.job(bad.job_id)
        assert failed.status == "pending" and failed.error_code == "internal_error"
        assert live_chunks(memory, "fine") and not live_chunks(memory, "poison")
