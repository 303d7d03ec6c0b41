"""Index workers of several handles on one store: claims, leases and the chunking policy.

Every case runs against each backend (a real SQLite file, the real PostgreSQL server).
A pass is held inside its embedding by a gate the test opens, so what other handles do
meanwhile is observed at a known point, not after a sleep.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any

import pytest

from convmem import EmbedderError, HashingEmbedder, InvalidInputError, Memory
from convmem.clock import ManualClock
from convmem.embed.base import Vectors
from convmem.governance import KeepAllMarker
from convmem.ingest import ChunkingPolicy
from convmem.store import IndexBatch
from helpers import make_turns

TEXTS = [f"第{i}句：周末搬家，预算 {i} 千元，还要买书架 shelf {i}。" for i in range(12)]


class GatedEmbedder:
    """The hashing embedder behind a gate: ``embed`` says it started, then waits until
    the test opens the gate (a model that takes as long as the test needs)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.started = threading.Event()
        self.gate = threading.Event()
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        self.started.set()
        if not self.gate.wait(timeout=30):
            raise EmbedderError("the test never opened the gate")
        return self.inner.embed(texts)


@pytest.fixture
def gated() -> Iterator[GatedEmbedder]:
    embedder = GatedEmbedder()
    yield embedder
    embedder.gate.set()  # a failed test must not leave a worker waiting


def _open(url: str, embedder: Any = None, **options: Any) -> Memory:
    options.setdefault("workers", 0)
    return Memory.open(
        url, embedder=embedder or HashingEmbedder(), marker=KeepAllMarker(), **options
    )


def _claim(memory: Memory, job_id: int) -> tuple[str, str | None, float | None]:
    row = (
        memory.store._db()
        .execute(
            "SELECT status, claimed_by, lease_until FROM jobs WHERE tenant=? AND job_id=?",
            (memory.tenant, job_id),
        )
        .fetchone()
    )
    return str(row[0]), row[1], None if row[2] is None else float(row[2])


@contextmanager
def _in_thread(call: Any, *gates: GatedEmbedder) -> Iterator[tuple[threading.Thread, list[Any]]]:
    """Run ``call`` in a thread; on the way out (a failed assertion too) open the gates and
    wait for it, so no pass outlives the handles the test closes."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    try:
        yield thread, out
    finally:
        for gate in gates:
            gate.gate.set()
        thread.join(timeout=30)


def test_closing_a_handle_keeps_the_claims_of_another(
    backend_url: str, gated: GatedEmbedder
) -> None:
    with _open(backend_url, gated, workers=1) as worker:
        try:
            receipt = worker.add_turns("c", make_turns(TEXTS[:4]))
            assert gated.started.wait(timeout=10)
            claim = _claim(worker, receipt.job_id)
            assert claim[0] == "running"
            _open(backend_url).close()  # another handle of this process comes and goes
            assert _claim(worker, receipt.job_id) == claim
            with _open(backend_url) as third:  # so nobody else takes it up meanwhile
                assert third.run_pending() == 0
            assert _claim(worker, receipt.job_id)[:2] == claim[:2]
            gated.gate.set()
            assert worker.flush(timeout=10).pending == 0
            assert worker.job(receipt.job_id).status == "done"
        finally:
            gated.gate.set()  # close waits for the pass
    assert gated.calls == 1


def test_close_hands_back_the_handles_own_claims(backend_url: str) -> None:
    memory = _open(backend_url)
    receipt = memory.add_turns("c", make_turns(TEXTS[:4]))
    # a claim by this handle's workers that no pass finished (a thread past the join)
    memory.store.claim_jobs(memory._engine.indexer.worker_id(), limit=10, lease_seconds=3600)
    memory.close()
    with _open(backend_url) as again:
        assert _claim(again, receipt.job_id)[:2] == ("pending", None)


def test_open_releases_claims_of_dead_processes(backend_url: str) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = f"{socket.gethostname()}:{int(ended.stdout)}:0123456789ab:1"
    with _open(backend_url) as memory:
        receipt = memory.add_turns("c", make_turns(TEXTS[:4]))
        assert memory.store.claim_jobs(dead, limit=10, lease_seconds=3600)
    with _open(backend_url) as again:
        assert _claim(again, receipt.job_id)[:2] == ("pending", None)
        assert again.flush(timeout=10).pending == 0


def test_a_pass_slower_than_its_lease_keeps_its_claim(
    backend_url: str, gated: GatedEmbedder
) -> None:
    lease = 1.5
    with (
        _open(backend_url, gated, lease_seconds=lease) as slow,
        _open(backend_url, lease_seconds=lease) as other,
    ):
        receipt = slow.add_turns("c", make_turns(TEXTS[:4]))
        with _in_thread(slow.run_pending, gated) as (thread, done):
            assert gated.started.wait(timeout=10)
            status, holder, first = _claim(slow, receipt.job_id)
            assert status == "running" and first is not None
            # past the lease the pass claimed: only a renewal keeps the job from others
            while slow.store.now() <= first + 0.2:
                time.sleep(0.05)
            assert other.run_pending() == 0
            status, now_holder, until = _claim(slow, receipt.job_id)
            assert (status, now_holder) == ("running", holder)
            assert until is not None and until > first
            gated.gate.set()
            thread.join(timeout=10)
        assert done == [1]
        assert slow.job(receipt.job_id).status == "done"
    assert gated.calls == 1


def test_a_pass_that_lost_its_lease_leaves_the_jobs_to_their_new_worker(
    backend_url: str, gated: GatedEmbedder
) -> None:
    # two clocks: the first process stalls past its lease while the second takes over
    first_clock, second_clock = ManualClock(), ManualClock()
    taker = GatedEmbedder()
    with (
        _open(backend_url, gated, clock=first_clock, lease_seconds=60) as stalled,
        _open(backend_url, taker, clock=second_clock, lease_seconds=60) as second,
    ):
        receipt = stalled.add_turns("c", make_turns(TEXTS[:4]))
        with _in_thread(stalled.run_pending, gated) as (stalled_thread, stalled_done):
            assert gated.started.wait(timeout=10)
            second_clock.advance(120)
            with _in_thread(second.run_pending, taker) as (second_thread, second_done):
                assert taker.started.wait(timeout=10)
                first_clock.advance(120)
                gated.gate.set()  # the stalled pass comes back and finds its claim gone
                stalled_thread.join(timeout=10)
                assert stalled_done == [0]
                assert _claim(second, receipt.job_id)[0] == "running"
                taker.gate.set()
                second_thread.join(timeout=10)
            assert second_done == [1]
            assert second.job(receipt.job_id).status == "done"


def _versions(memory: Memory, conversation_id: str) -> list[int]:
    return sorted(
        metadata["chunk_version"]
        for rows in memory.store.iter_live_chunks()
        for _, _, _, metadata in rows
        if metadata["conversation_id"] == conversation_id
    )


def test_a_handle_without_a_policy_follows_a_later_rechunk(backend_url: str) -> None:
    recut = ChunkingPolicy(max_turns=2, overlap_turns=0, version=2)
    with _open(backend_url) as worker:  # a long-running worker, opened before the change
        worker.add_turns("c", make_turns(TEXTS))
        worker.flush()
        assert set(_versions(worker, "c")) == {1}
        with _open(backend_url, chunking=recut) as admin:
            assert admin.rechunk() == 1
            worker.run_pending()  # the worker takes the re-cut up first
            admin.flush()
            assert admin.store.chunking_policy(admin.tenant) == asdict(recut)
        versions = _versions(worker, "c")
        assert len(versions) == len(TEXTS) // 2 and set(versions) == {2}
        worker.add_turns("d", make_turns(TEXTS[:4]))
        worker.flush()
        assert _versions(worker, "d") == [2, 2]
    # a handle with a policy of its own keeps it (and warns at open)
    with _open(backend_url, chunking=ChunkingPolicy()) as own:
        own.add_turns("e", make_turns(TEXTS[:4]))
        own.flush()
        assert set(_versions(own, "e")) == {1}


def test_one_tenants_rechunk_leaves_the_other_tenants_policy(backend_url: str) -> None:
    """`convmem --tenant b rechunk --max-turns 2` recorded its policy for the whole store,
    and the jobs of other tenants it drained were cut under it: tenant a's pending turns
    and every later write of tenant c came out in b's chunks."""
    recut = ChunkingPolicy(max_turns=2, overlap_turns=0, version=7)
    with _open(backend_url, tenant="b") as memory:
        tenant_a, tenant_c = memory.for_tenant("a"), memory.for_tenant("c")
        memory.add_turns("b-conv", make_turns(TEXTS[:4]))
        memory.flush()
        tenant_a.add_turns("a-conv", make_turns(TEXTS[:4]))  # pending while b re-cuts
        assert memory.rechunk(chunking=recut) == 1
        memory.run_pending()
        memory.flush()
        tenant_a.flush()
        assert _versions(memory, "b-conv") == [7, 7] and memory.stats()["chunks"] == 2
        assert _versions(tenant_a, "a-conv") == [1]  # the default cut: 4 turns, one chunk
        tenant_c.add_turns("c-conv", make_turns(TEXTS[:4]))
        tenant_c.flush()
        assert _versions(tenant_c, "c-conv") == [1]
        memory.add_turns("b-conv", make_turns(TEXTS[:6])[4:])  # b's new turns follow b's policy
        memory.flush()
        assert memory.stats()["chunks"] == 3
    with (
        _open(backend_url, tenant="b", chunking=ChunkingPolicy()) as own,
        pytest.raises(InvalidInputError, match="differs from"),
    ):
        own.rechunk(chunking=recut)


def test_the_store_writes_no_pass_whose_jobs_another_worker_holds(backend_url: str) -> None:
    with _open(backend_url) as memory:
        receipt = memory.add_turns("c", make_turns(TEXTS[:4]))
        store = memory.store
        (job,) = store.claim_jobs("w-old", limit=10, lease_seconds=3600)
        state = store.conversation_state(memory.tenant, "c")
        batch = IndexBatch(
            tenant=memory.tenant,
            conversation_id="c",
            expected_revision=state.revision,
            supersede_after=-1,
            chunks=[],
            frontier=None,
            indexed_seq=3,
            job_ids=[job.job_id],
        )
        # the lease ran out and another worker took the job: the old pass writes nothing
        with store._write() as conn:
            conn.execute("UPDATE jobs SET claimed_by='w-new' WHERE job_id=?", (job.job_id,))
        model = memory.embedding.model_id
        assert store.apply_index([replace(batch, claimed_by="w-old")], model_id=model) == [False]
        assert _claim(memory, receipt.job_id)[:2] == ("running", "w-new")
        assert store.conversation_state(memory.tenant, "c").revision == state.revision
        assert store.apply_index([replace(batch, claimed_by="w-new")], model_id=model) == [True]
        assert _claim(memory, receipt.job_id)[:2] == ("done", None)
