"""The index worker's pass: claim ready jobs, prepare each conversation, embed what is new
in one batch, write everything in one transaction, and record failures with backoff."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from convmem.clock import Clock
from convmem.embed import EmbeddingService
from convmem.errors import (
    ConvmemError,
    EmbedderError,
    EmbeddingMismatchError,
    MarkingError,
    StoreError,
)
from convmem.governance import GovernancePolicy, Marker
from convmem.ingest import ChunkingPolicy, line_tokens
from convmem.metrics import Counter, Histogram
from convmem.store import (
    ClaimedJob,
    IndexBatch,
    IndexedChunk,
    SQLStore,
    matrix_rows,
    text_digest,
    worker_identity,
)
from convmem.text import tokenize
from convmem.worker.lease import Lease, LeaseKeeper
from convmem.worker.prepare import Prepared, prepare
from convmem.worker.vectors import embed_chunks

__all__ = ["Indexer", "IndexerMetrics", "RetryPolicy"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How failed jobs are retried: exponential backoff, then ``failed``."""

    base_seconds: float = 1.0
    max_seconds: float = 300.0
    max_attempts: int = 12
    lease_seconds: float = 120.0
    batch: int = 64


@dataclass
class IndexerMetrics:
    chunks_ingested: Counter = field(default_factory=lambda: Counter("chunks_ingested_total"))
    upsert_failures: Counter = field(default_factory=lambda: Counter("upsert_failures_total"))
    job_retries: Counter = field(default_factory=lambda: Counter("job_retries_total"))
    index_latency: Histogram = field(default_factory=lambda: Histogram("index_batch_seconds"))


def error_code(exc: BaseException) -> str:
    """The ``error_code`` a failed job records for an exception."""
    if isinstance(exc, MarkingError):
        return exc.code
    if isinstance(exc, EmbedderError):
        return "embedder_error"
    if isinstance(exc, StoreError):
        return "store_error"
    if isinstance(exc, ConvmemError):
        return "convmem_error"
    return "internal_error"


class Indexer:
    """Runs index jobs of every tenant of one store.

    ``chunking``: the policy new turns are cut under; None: the one the store records
    (``Memory.rechunk``), read again at every pass, so a process follows a rechunk made by
    another instead of undoing it.
    """

    def __init__(
        self,
        store: SQLStore,
        embedding: EmbeddingService,
        *,
        marker: Marker,
        policy: GovernancePolicy,
        chunking: ChunkingPolicy | None,
        retry: RetryPolicy,
        clock: Clock,
    ) -> None:
        self.store = store
        self.embedding = embedding
        self.marker = marker
        self.product_policy = policy
        self.chunking = chunking
        self.retry = retry
        self.clock = clock
        self.metrics = IndexerMetrics()
        self.leases = LeaseKeeper(store, lease_seconds=retry.lease_seconds)
        # Tells this handle's claims from those of other handles in the process, so that
        # closing one hands back only its own.
        self._handle = uuid.uuid4().hex[:12]
        #: each tenant's recorded policy as last read, and the policy it makes
        self._recorded: dict[str, tuple[Mapping[str, Any] | None, ChunkingPolicy]] = {}
        #: Why this process stopped indexing (the store now records another embedding
        #: model than it runs), or None.
        self.stale: str | None = None

    def claim_prefix(self) -> str:
        """``host:pid:handle:``, how every claim of this indexer's workers begins."""
        host_pid = worker_identity().rsplit(":", 1)[0]
        return f"{host_pid}:{self._handle}:"

    def worker_id(self) -> str:
        """``host:pid:handle:thread``, the calling thread's claims of this indexer."""
        return f"{self.claim_prefix()}{threading.get_ident()}"

    def current_chunking(self, tenant: str) -> ChunkingPolicy:
        """The policy a pass cuts ``tenant``'s dialogue under now: the handle's own, else
        the one the tenant's last ``rechunk`` recorded, else the default."""
        if self.chunking is not None:
            return self.chunking
        recorded = self.store.chunking_policy(tenant)
        known = self._recorded.get(tenant)
        if known is not None and known[0] == recorded:
            return known[1]
        chunking = ChunkingPolicy()
        if recorded is not None:
            try:
                chunking = ChunkingPolicy(**recorded)
            except (TypeError, ValueError):
                logger.warning("ignoring an unreadable chunking policy in the store: %s", recorded)
        self._recorded[tenant] = (recorded, chunking)
        return chunking

    def close(self) -> None:
        """Stop renewing leases (after the workers stopped)."""
        self.leases.stop()

    def policy(self, tenant: str) -> GovernancePolicy:
        """The product policy with the tenant's overrides applied."""
        return self.product_policy.merged(self.store.get_policy(tenant), source="tenant policy")

    def run_pending(self, *, limit: int | None = None) -> int:
        """Claim and run one batch of ready jobs (any tenant). Returns jobs finished;
        none once the store was found reindexed to another model (:attr:`stale`)."""
        if self.stale is not None:
            return 0
        worker_id = self.worker_id()
        since = self.store.now()
        claimed = self.store.claim_jobs(
            worker_id, limit=limit or self.retry.batch, lease_seconds=self.retry.lease_seconds
        )
        if not claimed:
            return 0
        with self.leases.hold(worker_id, claimed, since=since) as lease:
            return self._run(claimed, lease)

    def _run(self, claimed: Sequence[ClaimedJob], lease: Lease) -> int:
        began = time.perf_counter()
        worker_id = lease.worker_id
        groups: dict[tuple[str, str], list[ClaimedJob]] = {}
        for job in claimed:
            groups.setdefault((job.tenant, job.conversation_id), []).append(job)
        chunking = {tenant: self.current_chunking(tenant) for tenant, _ in groups}
        prepared: list[Prepared] = []
        for (tenant, _), jobs in groups.items():
            try:
                prepared.append(
                    prepare(self.store, self.marker, self.policy(tenant), chunking[tenant], jobs)
                )
            except Exception as exc:  # one conversation's failure stays with its own jobs
                self.fail(jobs, exc, worker_id=worker_id)
        if not prepared:
            return 0
        everything = [job for item in prepared for job in item.jobs]
        if any(self.current_chunking(tenant) != policy for tenant, policy in chunking.items()):
            # a rechunk recorded another policy while this pass read the turns (it may
            # have read them after the reset): run again under the new one
            self.store.release_jobs(_keys(everything), worker_id=worker_id)
            return 0
        try:
            self._embed(prepared)
            # a job whose lease ran out and that another worker took is that worker's now
            held = self.leases.confirm(lease)
        except Exception as exc:
            self.fail(everything, exc, worker_id=worker_id)
            return 0
        prepared = [item for item in prepared if set(_keys(item.jobs)) <= held]
        if not prepared:
            return 0
        everything = [job for item in prepared for job in item.jobs]
        try:
            results = self.store.apply_index(
                [_batch(item, worker_id) for item in prepared], model_id=self.embedding.model_id
            )
        except EmbeddingMismatchError as exc:
            # the store was reindexed to another model: this process can index nothing
            # more, and the jobs go back untouched for a process running the new model
            self.store.release_jobs(_keys(everything), worker_id=worker_id)
            if self.stale is None:
                logger.error("index worker stopped: %s", exc)
            self.stale = str(exc)
            return 0
        except Exception as exc:
            self.metrics.upsert_failures.inc()
            self.fail(everything, exc, worker_id=worker_id)
            return 0
        done = 0
        for item, ok in zip(prepared, results, strict=True):
            if ok:
                done += len(item.jobs)
                self.metrics.chunks_ingested.inc(len(item.chunks))
            else:  # the conversation changed under the pass: run it again
                self.store.release_jobs(_keys(item.jobs), worker_id=worker_id)
        self.metrics.index_latency.observe(time.perf_counter() - began)
        return done

    def fail(
        self, jobs: Sequence[ClaimedJob], exc: BaseException, *, worker_id: str | None = None
    ) -> None:
        """Record a failure on the jobs: retried with backoff, ``failed`` at the limit
        (``worker_id``: only on those it still holds)."""
        logger.warning(
            "index jobs %s failed (%s): %s", [job.job_id for job in jobs], type(exc).__name__, exc
        )
        self.metrics.job_retries.inc(len(jobs))
        self.store.fail_jobs(
            [(job.tenant, job.job_id) for job in jobs],
            error_code=error_code(exc),
            message=f"{type(exc).__name__}: {exc}",
            base_delay=self.retry.base_seconds,
            max_delay=self.retry.max_seconds,
            max_attempts=self.retry.max_attempts,
            worker_id=worker_id,
        )

    def _embed(self, prepared: Sequence[Prepared]) -> None:
        """Embed every new or changed chunk text of the batch in one call; reuse the rest."""
        model_id = self.embedding.model_id
        dimension = self.embedding.dimension
        vectors: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | None]] = {}
        todo: list[tuple[int, int]] = []
        for position, item in enumerate(prepared):
            known = self.store.chunk_fingerprints(
                item.tenant, [record.chunk_id for record in item.records]
            )
            for index, record in enumerate(item.records):
                seen = known.get(record.chunk_id)
                lines = record.metadata.turn_offsets
                if (
                    seen is not None
                    and seen[0] == text_digest(record.text)
                    and seen[1] == model_id
                    and (seen[3] is not None or not lines)
                ):
                    stored = None if seen[3] is None else matrix_rows(seen[3], dimension)
                    vectors[position, index] = (np.frombuffer(seen[2], np.float32), stored)
                else:
                    todo.append((position, index))
        if todo:
            records = [prepared[position].records[index] for position, index in todo]
            embedded = embed_chunks(
                self.embedding, [(r.text, r.metadata.turn_offsets) for r in records]
            )
            vectors.update(zip(todo, embedded, strict=True))
        for position, item in enumerate(prepared):
            item.chunks = [
                IndexedChunk(
                    record=record,
                    vector=vectors[position, index][0],
                    tokens=tokenize(record.text),
                    turn_vectors=vectors[position, index][1],
                    turn_tokens=line_tokens(record.text, record.metadata.turn_offsets),
                )
                for index, record in enumerate(item.records)
            ]


def _keys(jobs: Sequence[ClaimedJob]) -> list[tuple[str, int]]:
    return [(job.tenant, job.job_id) for job in jobs]


def _batch(item: Prepared, worker_id: str) -> IndexBatch:
    return IndexBatch(
        claimed_by=worker_id,
        tenant=item.tenant,
        conversation_id=item.conversation_id,
        expected_revision=item.revision,
        supersede_after=item.supersede_after,
        chunks=item.chunks,
        frontier=item.frontier,
        indexed_seq=item.indexed_seq,
        job_ids=[job.job_id for job in item.jobs],
        marks_from=item.marks_from,
        marks=item.marks,
        pins=item.pins,
        notes=item.notes,
    )
