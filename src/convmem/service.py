"""The ``Memory`` facade: write path, index worker and read path over one store."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from convmem.embed import Embedder, EmbeddingService, resolve_embedder
from convmem.errors import (
    ConvmemError,
    EmbedderError,
    EmbeddingMismatchError,
    FlushTimeoutError,
    InvalidInputError,
    MarkingError,
    StoreError,
)
from convmem.governance import (
    EVIDENCE_LEVELS,
    Derived,
    GovernancePolicy,
    Marker,
    MarkTurn,
    Note,
    NoteDraft,
    PinIntent,
    PinRecord,
    RuleMarker,
    StoredMark,
    StoredPin,
    TurnMark,
    derive,
    load_policy,
    parse_marks,
)
from convmem.ingest import ChunkingPolicy, ChunkTurn, plan_chunks, render_chunk
from convmem.metrics import Counter, Histogram
from convmem.models import (
    MAX_SEQ,
    AddTurnsReceipt,
    ChunkRecord,
    FlushResult,
    Hit,
    JobInfo,
    parse_turns,
)
from convmem.store import SQLiteStore, SQLStore, open_store, parse_filters
from convmem.store.ann import AnnIndex
from convmem.store.governance import MarkRow, MarkWrite
from convmem.store.sqlite import (
    ClaimedJob,
    IndexBatch,
    IndexedChunk,
    StoredTurn,
    text_digest,
    worker_identity,
)
from convmem.story.memory import StoryMemory

if TYPE_CHECKING:
    from convmem.retrieve import RetrievalResult
from convmem.text import clean_text, load_user_dict, tokenize

__all__ = ["DeleteResult", "Memory", "UpsertResult"]

logger = logging.getLogger(__name__)

MAX_CONVERSATION_ID = 200
RRF_K = 60


@dataclass(frozen=True)
class DeleteResult:
    """Seed ``logical_delete_by_source`` result plus what was cascaded."""

    deleted: int
    turns_deleted: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UpsertResult:
    """Seed ``upsert_vector_records`` result."""

    upserted: int
    updated: int
    errors: list[str] = field(default_factory=list)


@dataclass
class _Metrics:
    chunks_ingested: Counter = field(default_factory=lambda: Counter("chunks_ingested_total"))
    upsert_failures: Counter = field(default_factory=lambda: Counter("upsert_failures_total"))
    job_retries: Counter = field(default_factory=lambda: Counter("job_retries_total"))
    turns_accepted: Counter = field(default_factory=lambda: Counter("turns_accepted_total"))
    degraded_searches: Counter = field(default_factory=lambda: Counter("degraded_searches_total"))
    story_degraded: Counter = field(
        default_factory=lambda: Counter("scene_context_degraded_parts_total")
    )
    search_latency: Histogram = field(default_factory=lambda: Histogram("search_seconds"))
    index_latency: Histogram = field(default_factory=lambda: Histogram("index_batch_seconds"))


@dataclass
class _Engine:
    """What every tenant view of one opened store shares."""

    store: SQLStore
    embedding: EmbeddingService
    chunking: ChunkingPolicy
    max_text_chars: int
    retry_base_seconds: float
    retry_max_seconds: float
    max_attempts: int
    lease_seconds: float
    job_batch: int
    metrics: _Metrics = field(default_factory=_Metrics)
    wake: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    workers: list[threading.Thread] = field(default_factory=list)
    ann: dict[str, AnnIndex] = field(default_factory=dict)
    ann_lock: threading.Lock = field(default_factory=threading.Lock)
    ann_min_rows: int = 20000
    vector_weight: float = 1.0
    fusion: str = "rrf"
    marker: Marker = field(default_factory=RuleMarker)
    policy: GovernancePolicy = field(default_factory=GovernancePolicy)
    sweep_seconds: float = 60.0
    last_sweep: float = 0.0
    closed: bool = False


def _check_conversation_id(conversation_id: Any) -> str:
    if not isinstance(conversation_id, str) or not conversation_id.strip():
        raise InvalidInputError(
            "conversation_id must be a non-empty string", field="conversation_id"
        )
    if len(conversation_id) > MAX_CONVERSATION_ID:
        raise InvalidInputError(
            f"conversation_id has {len(conversation_id)} characters; the limit is "
            f"{MAX_CONVERSATION_ID}",
            field="conversation_id",
        )
    try:
        conversation_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            "conversation_id is not valid UTF-8", field="conversation_id"
        ) from None
    return conversation_id


def _check_range(turn_range: Any) -> tuple[int, int]:
    if (
        not isinstance(turn_range, list | tuple)
        or len(turn_range) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) for v in turn_range)
        or turn_range[0] < 0
        or turn_range[1] < turn_range[0]
        or turn_range[1] > MAX_SEQ
    ):
        raise InvalidInputError(
            f"turn_range must be [start, end] with integers 0 <= start <= end <= 2**62, "
            f"got {turn_range!r}",
            field="turn_range",
        )
    return int(turn_range[0]), int(turn_range[1])


def _error_code(exc: BaseException) -> str:
    if isinstance(exc, MarkingError):
        return exc.code
    if isinstance(exc, EmbedderError):
        return "embedder_error"
    if isinstance(exc, StoreError):
        return "store_error"
    if isinstance(exc, ConvmemError):
        return "convmem_error"
    return "internal_error"


class Memory:
    """Long-term conversation memory over one store.

    Open with :meth:`open`; use as a context manager. One ``Memory`` is bound to a tenant;
    :meth:`for_tenant` gives a view of another tenant sharing the store and workers.
    """

    def __init__(self, engine: _Engine, tenant: str) -> None:
        self._engine = engine
        self._tenant = tenant

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        embedder: Embedder | None = None,
        tenant: str = "default",
        chunking: ChunkingPolicy | None = None,
        workers: int = 1,
        durability: str = "full",
        max_text_chars: int = 32000,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 300.0,
        max_attempts: int = 12,
        lease_seconds: float = 120.0,
        job_batch: int = 64,
        allow_model_change: bool = False,
        model_cache_dir: Path | None = None,
        ann_min_rows: int = 20000,
        vector_weight: float | None = None,
        fusion: str = "rrf",
        marker: Marker | None = None,
        policy: GovernancePolicy | Mapping[str, Any] | str | Path | None = None,
        sweep_seconds: float = 60.0,
        user_dict: str | Path | None = None,
    ) -> Memory:
        """Open (or create) a memory store.

        Args:
            url: ``sqlite:///path.db`` or a file path; None: ``memory.db`` in the user data
                directory.
            embedder: the embedding model. None: the model the store was built with, or for
                a new store bge-small-zh-v1.5 from the local cache, else the hashing embedder.
            tenant: the tenant this handle reads and writes.
            workers: index worker threads to start (0: none; run ``convmem worker`` or
                :meth:`run_pending`).
            durability: ``"full"`` fsyncs every acknowledged write; ``"normal"`` survives a
                process crash but not a power loss.
            allow_model_change: open a store built with another model (for ``reindex``).
            vector_weight: weight of the vector ranking against BM25 (weight 1) in the fusion.
                None: 1.0 for neural embedders, 0.15 for the hashing embedder, whose vectors
                are a noisier lexical signal (see bench/README.md).
            fusion: how hybrid search joins the two rankings: ``"rrf"`` (weighted
                reciprocal rank, the default) or ``"convex"`` (the weighted mean of each
                side's min-max normalised scores; it keeps how far apart the scores are,
                which ranks alone lose).
            ann_min_rows: tenant-wide searches use the HNSW index once a tenant has this many
                vectors; below it they scan exactly.
            marker: the Stage 2 marker (default :class:`~convmem.governance.RuleMarker`;
                :class:`~convmem.governance.KeepAllMarker` turns marking off,
                :class:`~convmem.governance.LLMMarker` uses a chat endpoint).
            policy: the product retention policy: a ``GovernancePolicy``, a dict of
                overrides or a JSON file; tenants may override it with :meth:`set_policy`.
            sweep_seconds: how often worker threads mark expired memory (0: never; call
                :meth:`sweep_expired`).
            user_dict: a jieba user dictionary to load (process-wide) before opening; the
                lexical index is rebuilt when the dictionary changes.

        Raises:
            EmbeddingMismatchError: the store holds vectors from another model or dimension.
        """
        _check_tenant(tenant)
        if fusion not in ("rrf", "convex"):
            raise InvalidInputError(
                f"fusion must be 'rrf' or 'convex', got {fusion!r}", field="fusion"
            )
        product_policy = load_policy(policy)
        if user_dict is not None:
            load_user_dict(user_dict)
        store = open_store(url, durability=durability)
        try:
            recorded = store.embedding_model()
            if embedder is None:
                spec = recorded[0] if recorded else "auto"
                embedder = resolve_embedder(spec, cache_dir=model_cache_dir)
            if recorded is None:
                store.set_embedding_model(embedder.model_id, embedder.dimension)
            elif (embedder.model_id, embedder.dimension) != recorded and not allow_model_change:
                raise EmbeddingMismatchError(
                    f"Store at {store.url} holds {recorded[1]}-d vectors from '{recorded[0]}'; "
                    f"the configured embedder gives {embedder.dimension}-d "
                    f"'{embedder.model_id}'. Run 'convmem reindex' to re-embed with the new "
                    "model, or open the store with the old one."
                )
            store.recover_dead_claims()
        except BaseException:
            store.close()
            raise
        engine = _Engine(
            store=store,
            embedding=EmbeddingService.get_instance(embedder),
            chunking=chunking or ChunkingPolicy(),
            max_text_chars=max_text_chars,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            max_attempts=max_attempts,
            lease_seconds=lease_seconds,
            job_batch=job_batch,
            ann_min_rows=ann_min_rows,
            vector_weight=(
                vector_weight
                if vector_weight is not None
                else (0.15 if embedder.model_id.startswith("hashing") else 1.0)
            ),
            fusion=fusion,
            marker=marker if marker is not None else RuleMarker(),
            policy=product_policy,
            sweep_seconds=sweep_seconds,
        )
        memory = cls(engine, tenant)
        for index in range(workers):
            thread = threading.Thread(
                target=memory._worker_loop, name=f"convmem-worker-{index}", daemon=True
            )
            engine.workers.append(thread)
            thread.start()
        logger.info("opened %s (tenant %s, model %s)", store.url, tenant, embedder.model_id)
        return memory

    def for_tenant(self, tenant: str) -> Memory:
        """A view of ``tenant`` on the same store and workers."""
        _check_tenant(tenant)
        return Memory(self._engine, tenant)

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def store(self) -> SQLStore:
        return self._engine.store

    @property
    def embedding(self) -> EmbeddingService:
        return self._engine.embedding

    def close(self) -> None:
        """Stop workers (in-flight jobs are released, not lost) and close the store."""
        engine = self._engine
        if engine.closed:
            return
        engine.stop.set()
        engine.wake.set()
        for thread in engine.workers:
            thread.join(timeout=30)
        with contextlib.suppress(StoreError):
            engine.store.release_worker(worker_identity().rsplit(":", 1)[0] + ":")
        for index in engine.ann.values():
            index.save()
        engine.closed = True
        engine.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- write path --------------------------------------------------------------------

    def add_turns(self, conversation_id: str, turns: Sequence[Any]) -> AddTurnsReceipt:
        """Validate and durably store turns with an index job, then acknowledge.

        Turns are dicts or :class:`~convmem.models.Turn`. Re-sent identical turns are
        reported as duplicates and change nothing. A late turn (older than turns already
        indexed, filling a gap) is accepted and the conversation is re-chunked from there.

        Raises:
            InvalidInputError: a field is invalid (``errors`` lists every problem); nothing
                from this call is stored.
            TurnConflictError: a turn id is already stored with other text.
        """
        conversation_id = _check_conversation_id(conversation_id)
        parsed = parse_turns(list(turns), max_text_chars=self._engine.max_text_chars)
        accepted_at = datetime.now(UTC)
        accepted, duplicates, job_id = self._engine.store.add_turns(
            self._tenant, conversation_id, parsed, accepted_at=accepted_at
        )
        self._engine.metrics.turns_accepted.inc(len(accepted))
        if job_id is not None:
            self._engine.wake.set()
        return AddTurnsReceipt(
            conversation_id=conversation_id,
            accepted_turn_ids=accepted,
            duplicate_turn_ids=duplicates,
            job_id=job_id,
            accepted_at=accepted_at,
        )

    def flush(self, timeout: float = 60.0) -> FlushResult:
        """Wait until this tenant has no pending or running index jobs.

        With no worker threads, runs the jobs in the calling thread.

        Raises:
            FlushTimeoutError: jobs were still pending after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            pending, failed = self._engine.store.backlog(self._tenant)
            if pending == 0:
                return FlushResult(pending=0, failed=failed)
            if time.monotonic() >= deadline:
                raise FlushTimeoutError(
                    f"{pending} index jobs still pending after {timeout:g}s "
                    f"({failed} failed); see Memory.jobs() for their errors"
                )
            if not self._engine.workers:
                self.run_pending()
                time.sleep(0.01)
            else:
                self._engine.wake.set()
                time.sleep(0.01)

    # -- worker ------------------------------------------------------------------------

    def _worker_loop(self) -> None:
        engine = self._engine
        while not engine.stop.is_set():
            now = time.time()
            if engine.sweep_seconds and now - engine.last_sweep >= engine.sweep_seconds:
                engine.last_sweep = now
                try:
                    engine.store.sweep_expired(now)
                except Exception:  # the next pass tries again
                    logger.exception("expiry sweep failed")
            try:
                worked = self.run_pending()
            except Exception:  # keep the worker alive; the failure is on the jobs
                logger.exception("index worker pass failed")
                worked = 0
            if not worked:
                engine.wake.wait(timeout=0.25)
                engine.wake.clear()

    def run_pending(self, *, limit: int | None = None) -> int:
        """Claim and run one batch of ready index jobs (any tenant). Returns jobs finished."""
        engine = self._engine
        worker = worker_identity()
        claimed = engine.store.claim_jobs(
            worker, limit=limit or engine.job_batch, lease_seconds=engine.lease_seconds
        )
        if not claimed:
            return 0
        groups: dict[tuple[str, str], list[ClaimedJob]] = {}
        for job in claimed:
            groups.setdefault((job.tenant, job.conversation_id), []).append(job)
        began = time.perf_counter()
        done = 0
        prepared: list[_Prepared] = []
        for (tenant, conversation_id), jobs in groups.items():
            try:
                prepared.append(self._prepare(tenant, conversation_id, jobs))
            except Exception as exc:  # one conversation's failure stays with its own jobs
                self._fail(jobs, exc)
        if not prepared:
            return 0
        try:
            self._embed_prepared(prepared)
        except Exception as exc:
            self._fail([job for item in prepared for job in item.jobs], exc)
            return 0
        batches = [
            IndexBatch(
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
            for item in prepared
        ]
        try:
            results = engine.store.apply_index(batches, model_id=engine.embedding.model_id)
        except Exception as exc:
            engine.metrics.upsert_failures.inc()
            self._fail([job for item in prepared for job in item.jobs], exc)
            return 0
        for item, ok in zip(prepared, results, strict=True):
            if ok:
                done += len(item.jobs)
                engine.metrics.chunks_ingested.inc(len(item.chunks))
            else:
                engine.store.release_jobs([job.job_id for job in item.jobs])
        engine.metrics.index_latency.observe(time.perf_counter() - began)
        return done

    def _fail(self, jobs: Sequence[ClaimedJob], exc: BaseException) -> None:
        engine = self._engine
        logger.warning(
            "index jobs %s failed (%s): %s", [job.job_id for job in jobs], type(exc).__name__, exc
        )
        engine.metrics.job_retries.inc(len(jobs))
        engine.store.fail_jobs(
            [job.job_id for job in jobs],
            error_code=_error_code(exc),
            message=f"{type(exc).__name__}: {exc}",
            base_delay=engine.retry_base_seconds,
            max_delay=engine.retry_max_seconds,
            max_attempts=engine.max_attempts,
        )

    def _policy(self, tenant: str) -> GovernancePolicy:
        return self._engine.policy.merged(
            self._engine.store.get_policy(tenant), source="tenant policy"
        )

    def _prepare(self, tenant: str, conversation_id: str, jobs: list[ClaimedJob]) -> _Prepared:
        """Mark new turns, derive effective marks, pins and notes, and re-plan chunks.

        Planning starts at the frontier (the last final chunk); it moves back when a late
        turn, a delete, a user verdict or an overlay from a new turn (a pin, a confirmed
        decision) changes the effective mark of a turn already planned.
        """
        engine = self._engine
        store = engine.store
        chunking = engine.chunking
        policy = self._policy(tenant)
        state = store.conversation_state(tenant, conversation_id)
        frontier = state.frontier
        if state.rewind_to is not None and frontier is not None:
            frontier = _earlier(
                frontier, self._safe_frontier(tenant, conversation_id, state.rewind_to)
            )
        pin_status = store.pin_decisions(tenant, conversation_id)
        context_size = 2 * policy.pin_window
        for _ in range(16):
            after = frontier[1] if frontier is not None else -1
            start = frontier[0] if frontier is not None else 0
            context = list(
                reversed(
                    store.load_turns(
                        tenant, conversation_id, before=start, limit=context_size, newest_first=True
                    )
                )
            )
            window = store.load_turns(tenant, conversation_id, after=start - 1)
            turns = context + window
            first = turns[0].seq if turns else start
            stored = store.load_marks(tenant, conversation_id, first)
            base, marker_of = self._base_marks(turns, stored, policy)
            derived = derive(
                conversation_id,
                [_mark_turn(turn) for turn in turns],
                base,
                policy,
                new_from=start,
                accepted_at={turn.seq: turn.accepted_at for turn in turns},
                pin_status=pin_status,
                decisions={seq: row.decision for seq, row in stored.items() if row.decision},
                expired={seq for seq, row in stored.items() if row.expired},
            )
            # A turn already planned whose effective mark changed (pinned or un-pinned by a
            # new turn, confirmed, expired): its unit, and so the last chunk closed before
            # it, may change. Turns before ``start`` are context; only overlay targets
            # among them are derived from a complete window.
            changed = [
                seq
                for seq, mark in derived.effective.items()
                if (seq >= start or seq in derived.overlay_targets)
                and seq in stored
                and stored[seq].effective is not None
                and stored[seq].effective != mark
            ]
            if not changed or frontier is None:
                break
            safe = self._safe_frontier(tenant, conversation_id, min(changed))
            if safe is not None and safe[1] >= frontier[1]:
                break
            frontier = safe
        effective = derived.effective
        kept = [turn for turn in window if turn.seq > after and effective[turn.seq].keep]
        carry: list[StoredTurn] = []
        if frontier is not None and chunking.overlap_turns:
            carry = [
                turn
                for turn in window
                if frontier[0] <= turn.seq <= frontier[1] and effective[turn.seq].keep
            ][-chunking.overlap_turns :]
        plans = plan_chunks(
            [_chunk_turn(t, effective[t.seq]) for t in kept],
            [_chunk_turn(t, effective[t.seq]) for t in carry],
            chunking,
        )
        records = [
            _govern(
                render_chunk(conversation_id, plan, chunking, tenant=tenant),
                [t.seq for t in plan.turns],
                derived,
            )
            for plan in plans
        ]
        new_frontier = frontier
        for plan in plans:
            if plan.final:
                new_frontier = (plan.start, plan.end)
        marks = [
            MarkWrite(
                seq=turn.seq,
                turn_id=turn.turn_id,
                marker=marker_of[turn.seq],
                base=base[turn.seq],
                effective=effective[turn.seq],
                expires_at=derived.expires_at[turn.seq],
            )
            for turn in window
        ]
        return _Prepared(
            tenant=tenant,
            conversation_id=conversation_id,
            jobs=jobs,
            revision=state.revision,
            supersede_after=after,
            records=records,
            frontier=new_frontier,
            indexed_seq=window[-1].seq if window else state.indexed_seq,
            marks_from=start,
            marks=marks,
            pins=derived.pins,
            notes=derived.notes,
        )

    def _safe_frontier(self, tenant: str, conversation_id: str, seq: int) -> tuple[int, int] | None:
        """The last final chunk whose plan a change at ``seq`` cannot alter.

        A chunk is final because of the unit that followed it; a change at ``seq`` may
        alter the unit after the last chunk ending before it, so planning restarts one
        chunk earlier.
        """
        store = self._engine.store
        before = store.last_final_chunk_before(tenant, conversation_id, seq)
        if before is None:
            return None
        return store.last_final_chunk_before(tenant, conversation_id, before[1])

    def _base_marks(
        self, turns: Sequence[StoredTurn], stored: Mapping[int, MarkRow], policy: GovernancePolicy
    ) -> tuple[dict[int, TurnMark], dict[int, str]]:
        """Stored base marks, and new ones from the marker for turns without one."""
        marker = self._engine.marker
        base = {seq: row.base for seq, row in stored.items()}
        marker_of = {seq: row.marker for seq, row in stored.items()}
        todo = [turn for turn in turns if turn.seq not in base]
        if todo:
            first = todo[0].seq
            context = [_mark_turn(t) for t in turns if t.seq < first]
            raw = marker.mark([_mark_turn(t) for t in todo], context, policy)
            marks, errors = parse_marks(
                [{"turn_id": t.turn_id, "text": t.text} for t in todo], raw, require_all=True
            )
            if errors:
                shown = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
                raise MarkingError(
                    f"marker {marker.name} returned invalid marks: {shown}",
                    code="marker_invalid_marks",
                    errors=[e.as_dict() for e in errors],
                )
            for turn, mark in zip(todo, marks, strict=True):
                base[turn.seq] = mark
                marker_of[turn.seq] = marker.name
        return base, marker_of

    def _embed_prepared(self, prepared: Sequence[_Prepared]) -> None:
        """Embed every new or changed chunk text of the batch in one call; reuse the rest."""
        engine = self._engine
        model_id = engine.embedding.model_id
        todo: list[tuple[_Prepared, int]] = []
        texts: list[str] = []
        for item in prepared:
            known = engine.store.chunk_fingerprints(
                item.tenant, [record.chunk_id for record in item.records]
            )
            item.vectors = [None] * len(item.records)
            for index, record in enumerate(item.records):
                seen = known.get(record.chunk_id)
                digest = text_digest(record.text)
                if seen is not None and seen[0] == digest and seen[1] == model_id:
                    item.vectors[index] = np.frombuffer(seen[2], dtype=np.float32)
                else:
                    todo.append((item, index))
                    texts.append(record.text)
        matrix = engine.embedding.embed_array(texts) if texts else None
        for position, (item, index) in enumerate(todo):
            assert matrix is not None
            item.vectors[index] = matrix[position]
        for item in prepared:
            item.chunks = [
                IndexedChunk(record=record, vector=vector, tokens=tokenize(record.text))
                for record, vector in zip(item.records, item.vectors, strict=True)
                if vector is not None
            ]

    # -- read path ---------------------------------------------------------------------

    def search(
        self,
        query_text: str,
        top_k: int = 6,
        filters: Mapping[str, Any] | None = None,
        *,
        query_vector: Sequence[float] | None = None,
        mode: str = "hybrid",
        candidates: int | None = None,
        hints: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """Hybrid search: vector and BM25 candidates under the filters, fused by reciprocal rank.

        Deleted and expired memory is never returned; every read is scoped to this tenant.

        Args:
            query_vector: a precomputed, normalised query vector (skips embedding the query).
            mode: ``"hybrid"`` (default), ``"vector"`` or ``"lexical"``.
            hints: retrieval hints (``{"strategies": [...], "params": {...}}``, as the
                ``route`` operator makes them): the hierarchical service picks the tiers
                (STM recent turns, MTM chunks, LTM notes); hits carry their tier.
            candidates: candidates taken from each side before fusion (default
                ``max(50, 5 * top_k)``).

        Raises:
            InvalidInputError / FilterError: empty query, bad ``top_k``, mode or filters.
        """
        if not isinstance(query_text, str) or not query_text.strip():
            raise InvalidInputError(
                "query_text is empty; send the question to search for", field="query_text"
            )
        if hints is not None:
            return self.retrieve(
                query_text, hints, filters=filters, top_k=top_k, query_vector=query_vector
            ).hits
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
            raise InvalidInputError(
                f"top_k must be an integer in 1..1000, got {top_k!r}", field="top_k"
            )
        if mode not in ("hybrid", "vector", "lexical"):
            raise InvalidInputError(
                f"mode must be 'hybrid', 'vector' or 'lexical', got {mode!r}", field="mode"
            )
        spec = parse_filters(filters, tenant=self._tenant)
        query = clean_text(query_text)
        dimension = self._engine.embedding.dimension
        if query_vector is not None:
            vector = np.asarray(query_vector, dtype=np.float32)
            if vector.shape != (dimension,):
                raise InvalidInputError(
                    f"query_vector has shape {vector.shape}; this store uses {dimension}-d "
                    f"vectors from '{self._engine.embedding.model_id}'",
                    field="query_vector",
                )
        elif mode == "vector":
            vector = self._engine.embedding.embed_array([query])[0]
        elif mode == "hybrid":
            try:
                vector = self._engine.embedding.embed_array([query])[0]
            except EmbedderError as exc:  # degrade to lexical rather than fail the read
                logger.warning("query embedding failed, searching lexically: %s", exc)
                self._engine.metrics.degraded_searches.inc()
                mode = "lexical"
        began = time.perf_counter()
        pool = candidates or max(50, top_k * 5)
        rankings: list[tuple[float, list[tuple[int, float]]]] = []
        if mode != "lexical":
            weight = self._engine.vector_weight if mode == "hybrid" else 1.0
            rankings.append((weight, self._vector_candidates(spec, vector, pool)))
        if mode != "vector":
            lexical = self._engine.store.lexical(self._tenant, spec, tokenize(query), pool)
            rankings.append((1.0, lexical))
        fuse = _convex if self._engine.fusion == "convex" else _rrf
        window = fuse(rankings)[: top_k * 2 + 10]
        rows = self._engine.store.load_rows(self._tenant, [rowid for rowid, _ in window])
        hits = [
            Hit(
                chunk_id=rows[rowid][0],
                score=round(score, 6),
                text=rows[rowid][1],
                metadata=rows[rowid][2],
                pending=bool(rows[rowid][2].get("requires_confirmation")),
            )
            for rowid, score in _diverse(window, rows, top_k)
        ]
        self._engine.metrics.search_latency.observe(time.perf_counter() - began)
        return hits

    def retrieve(
        self,
        query_text: str,
        hints: Mapping[str, Any] | None,
        *,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 6,
        query_vector: Sequence[float] | None = None,
    ) -> RetrievalResult:
        """Search the tiers the hints ask for; the result also echoes the hints applied."""
        from convmem.retrieve import HierarchicalMemoryService

        return HierarchicalMemoryService(self).retrieve(
            query_text, vector=query_vector, hints=hints, filters=filters, top_k=top_k
        )

    def _vector_candidates(
        self, spec: Any, vector: np.ndarray, pool: int
    ) -> list[tuple[int, float]]:
        store = self._engine.store
        if spec.conversation_id is not None or store.native_vector_index:
            return store.scan_vectors(self._tenant, spec, vector, pool)
        index = self._ann()
        if index is None:
            return store.scan_vectors(self._tenant, spec, vector, pool)
        return index.search(vector, pool, spec)

    def _ann(self) -> AnnIndex | None:
        """The in-process HNSW sidecar of an embedded store (server stores index themselves)."""
        engine = self._engine
        if not isinstance(engine.store, SQLiteStore):
            return None
        with engine.ann_lock:
            index = engine.ann.get(self._tenant)
            if index is None:
                index = AnnIndex(
                    engine.store,
                    self._tenant,
                    engine.embedding.dimension,
                    min_rows=engine.ann_min_rows,
                )
                engine.ann[self._tenant] = index
        return index if index.sync() else None

    def embed_query(self, text: str) -> list[float]:
        """The normalised query vector (seed ``embed_chunk``)."""
        return self._engine.embedding.embed_chunk(clean_text(text) or text)

    # -- update and delete -------------------------------------------------------------

    def upsert_chunks(self, chunks: Sequence[ChunkRecord | Mapping[str, Any]]) -> UpsertResult:
        """Embed and upsert caller-built chunks; the same ``chunk_id`` overwrites.

        Invalid records are reported in ``errors`` and skipped; valid ones are stored.
        """
        records: list[ChunkRecord] = []
        errors: list[str] = []
        for index, raw in enumerate(chunks):
            try:
                record = raw if isinstance(raw, ChunkRecord) else ChunkRecord.model_validate(raw)
            except Exception as exc:
                errors.append(f"chunks[{index}]: {exc}")
                continue
            if record.metadata.deleted:
                errors.append(f"chunks[{index}]: deleted records cannot be upserted; use delete")
                continue
            meta = record.metadata.model_copy(update={"tenant": self._tenant})
            records.append(record.model_copy(update={"metadata": meta}))
        if not records:
            return UpsertResult(0, 0, errors)
        vectors = self._engine.embedding.embed_array([record.text for record in records])
        items = [
            IndexedChunk(record=record, vector=vectors[i], tokens=tokenize(record.text))
            for i, record in enumerate(records)
        ]
        try:
            inserted, updated = self._engine.store.upsert_records(
                self._tenant, items, model_id=self._engine.embedding.model_id
            )
        except StoreError as exc:
            self._engine.metrics.upsert_failures.inc()
            return UpsertResult(0, 0, [*errors, str(exc)])
        return UpsertResult(inserted, updated, errors)

    def update(self, chunk: ChunkRecord | Mapping[str, Any]) -> UpsertResult:
        """Overwrite one chunk by its ``chunk_id`` (seed "更新")."""
        return self.upsert_chunks([chunk])

    def delete(
        self,
        conversation_id: str,
        turn_range: Sequence[int] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> DeleteResult:
        """Logically delete by ``(conversation_id, turn_range)`` or by chunk ids.

        Deleting turns deletes every chunk that overlaps them; their surviving turns are
        re-chunked. Deleting a dialogue chunk by id deletes its turns the same way. With
        neither argument the whole conversation is deleted. Deleted memory is never
        returned by any read; :meth:`purge` removes its text physically.
        """
        conversation_id = _check_conversation_id(conversation_id)
        store = self._engine.store
        deleted = turns_deleted = 0
        errors: list[str] = []
        ranges: list[tuple[int, int]] = []
        if turn_range is not None:
            ranges.append(_check_range(turn_range))
        if chunk_ids is not None:
            if isinstance(chunk_ids, str) or not all(isinstance(c, str) for c in chunk_ids):
                raise InvalidInputError("chunk_ids must be a list of strings", field="chunk_ids")
            sources = store.chunk_sources(self._tenant, list(chunk_ids))
            api_ids = []
            for chunk_id in chunk_ids:
                source = sources.get(chunk_id)
                if source is None:
                    errors.append(f"chunk {chunk_id} not found (or already deleted)")
                elif source[0] != conversation_id:
                    errors.append(f"chunk {chunk_id} belongs to another conversation")
                elif source[3] == "worker":
                    ranges.append((source[1], source[2]))
                else:
                    api_ids.append(chunk_id)
            deleted += store.delete_chunk_rows(self._tenant, api_ids) if api_ids else 0
        if turn_range is None and chunk_ids is None:
            ranges.append((0, 2**62))
        for start, end in ranges:
            chunks, turns, _ = store.delete_turns(self._tenant, conversation_id, (start, end))
            deleted += chunks
            turns_deleted += turns
        self._engine.wake.set()
        logger.info(
            "deleted %d chunks and %d turns of a conversation in tenant %s",
            deleted,
            turns_deleted,
            self._tenant,
        )
        return DeleteResult(deleted=deleted, turns_deleted=turns_deleted, errors=errors)

    def rechunk(self, conversation_id: str | None = None) -> int:
        """Re-cut dialogue under the current chunking policy (after changing its version).

        Drops this tenant's worker-made chunks (of one conversation, or all) and queues the
        conversations to be chunked again from their first live turn. Returns how many
        conversations were queued; ``flush`` waits for them.
        """
        if conversation_id is not None:
            conversation_id = _check_conversation_id(conversation_id)
        count = self._engine.store.reset_conversations(self._tenant, conversation_id)
        self._engine.wake.set()
        return count

    def purge(self) -> dict[str, int]:
        """Physically remove the text of deleted chunks and turns (all tenants)."""
        return self._engine.store.purge()

    def reindex(self, *, batch_size: int = 256) -> int:
        """Re-embed every live chunk from its stored text with this handle's embedder."""
        engine = self._engine
        count = 0
        for rows in engine.store.iter_live_chunks(batch_size):
            vectors = engine.embedding.embed_array([text for _, text in rows])
            engine.store.replace_vectors(
                [(rowid, vectors[i]) for i, (rowid, _) in enumerate(rows)],
                engine.embedding.model_id,
            )
            count += len(rows)
        engine.store.set_embedding_model(engine.embedding.model_id, engine.embedding.dimension)
        for index in engine.ann.values():
            index.reset()
        logger.info("re-embedded %d chunks with %s", count, engine.embedding.model_id)
        return count

    # -- introspection -----------------------------------------------------------------

    def job(self, job_id: int) -> JobInfo:
        return self._engine.store.job(self._tenant, job_id)

    def jobs(self, status: str | None = None, *, limit: int = 100) -> list[JobInfo]:
        return self._engine.store.jobs(self._tenant, status=status, limit=limit)

    def retry_job(self, job_id: int) -> JobInfo:
        """Make a failed job ready to run now."""
        info = self._engine.store.retry_job(self._tenant, job_id)
        self._engine.wake.set()
        return info

    def recent_turns(self, conversation_id: str, limit: int = 20) -> list[StoredTurn]:
        """The newest live turns of a conversation, oldest first."""
        conversation_id = _check_conversation_id(conversation_id)
        turns = self._engine.store.load_turns(
            self._tenant, conversation_id, limit=limit, newest_first=True
        )
        return list(reversed(turns))

    def status(self, conversation_id: str) -> dict[str, Any]:
        """Backlog, last indexed turn and failed jobs of one conversation."""
        conversation_id = _check_conversation_id(conversation_id)
        state = self._engine.store.conversation_state(self._tenant, conversation_id)
        failed = [
            job.model_dump(mode="json")
            for job in self._engine.store.jobs(self._tenant, status="failed")
            if job.conversation_id == conversation_id
        ]
        return {
            "conversation_id": conversation_id,
            "backlog": self._engine.store.backlog_by_conversation(self._tenant).get(
                conversation_id, 0
            ),
            "last_turn": state.last_seq,
            "last_indexed_turn": state.indexed_seq,
            "failed_jobs": failed,
        }

    def story(self, project_id: str) -> StoryMemory:
        """Story memory of one project in this tenant: chunks, entity states, seed 003 tools."""
        return StoryMemory(self, project_id)

    def count_degraded(self, parts: int) -> None:
        """Record scene-context parts that degraded (seed 003 decision 4) in the metrics."""
        self._engine.metrics.story_degraded.inc(parts)

    def story_space(self, project_id: str) -> Memory:
        """The tenant view that holds one project's story chunks (see ``convmem.story``)."""
        return Memory(self._engine, f"{self._tenant}\x1fstory:{project_id}")

    def instruments(self) -> dict[str, Counter | Histogram]:
        """The engine's counters and histograms (shared by every tenant view), by name."""
        metrics = self._engine.metrics
        items: list[Counter | Histogram] = [
            metrics.chunks_ingested,
            metrics.upsert_failures,
            metrics.job_retries,
            metrics.turns_accepted,
            metrics.degraded_searches,
            metrics.story_degraded,
            metrics.search_latency,
            metrics.index_latency,
            self._engine.embedding.latency,
        ]
        return {item.name: item for item in items}

    def stats(self) -> dict[str, Any]:
        """Seed 001's metrics plus store counts, for this tenant."""
        engine = self._engine
        pending, failed = engine.store.backlog(self._tenant)
        stats = engine.store.stats(self._tenant)
        return {
            **stats,
            "tenant": self._tenant,
            "store": engine.store.url,
            "embedding_model": engine.embedding.model_id,
            "embedding_dim": engine.embedding.dimension,
            "chunks_ingested": int(engine.metrics.chunks_ingested.value),
            "turns_accepted": int(engine.metrics.turns_accepted.value),
            "upsert_failures": int(engine.metrics.upsert_failures.value),
            "job_retries": int(engine.metrics.job_retries.value),
            "embedding_latency_seconds": engine.embedding.latency.summary(),
            "search_latency_seconds": engine.metrics.search_latency.summary(),
            "index_batch_seconds": engine.metrics.index_latency.summary(),
            "backlog": pending,
            "failed_jobs": failed,
            "backlog_by_conversation": engine.store.backlog_by_conversation(self._tenant),
        }

    # -- service operations (API keys, backlog across tenants) ---------------------------

    def create_api_key(self, tenant: str, name: str = "") -> tuple[str, str]:
        """Create an API key for ``tenant``: ``(key_id, secret)``; the secret is not stored."""
        _check_tenant(tenant)
        return self._engine.store.create_api_key(tenant, name)

    def api_key_tenant(self, secret: str) -> str | None:
        """The tenant a live API key maps to, or None (unknown or revoked)."""
        return self._engine.store.api_key_tenant(secret)

    def list_api_keys(self) -> list[dict[str, Any]]:
        """Every API key (id, tenant, name, created and revoked times), never the secrets."""
        return self._engine.store.list_api_keys()

    def revoke_api_key(self, key_id: str) -> None:
        """Revoke a key. Raises NotFoundError when no live key has this id."""
        self._engine.store.revoke_api_key(key_id)

    def backlog(self, *, all_tenants: bool = False) -> tuple[int, int]:
        """``(pending_or_running, failed)`` index jobs of this tenant (or of every tenant)."""
        return self._engine.store.backlog(None if all_tenants else self._tenant)

    # -- governance --------------------------------------------------------------------

    def marks(self, conversation_id: str) -> list[StoredMark]:
        """Every live turn's marks with reasons, in turn order (``convmem marks CONV``)."""
        conversation_id = _check_conversation_id(conversation_id)
        out = []
        for (
            seq,
            turn_id,
            role,
            marker,
            effective,
            base,
            expires,
            expired,
            decision,
        ) in self._engine.store.mark_rows(self._tenant, conversation_id):
            base_mark = TurnMark.model_validate_json(base)
            out.append(
                StoredMark(
                    turn_id=base_mark.turn_id if base_mark.turn_id is not None else turn_id,
                    seq=seq,
                    role=role,
                    marker=marker,
                    mark=TurnMark.model_validate_json(effective) if effective else base_mark,
                    base=base_mark,
                    expires_at=_iso(expires),
                    expired=bool(expired),
                    decision=decision,
                )
            )
        return out

    def pins(self, conversation_id: str) -> list[StoredPin]:
        """The conversation's pins (explicit save requests), oldest first."""
        conversation_id = _check_conversation_id(conversation_id)
        return [
            StoredPin.model_validate(
                {**PinIntent.model_validate_json(intent).model_dump(), "status": status}
            )
            for intent, status, _ in self._engine.store.pin_rows(self._tenant, conversation_id)
        ]

    def notes(
        self,
        conversation_id: str | None = None,
        status: str | None = None,
        *,
        limit: int = 1000,
    ) -> list[Note]:
        """Live notes (never deleted or expired ones).

        Args:
            status: ``pending``, ``confirmed`` or ``rejected``; None: pending and
                confirmed (rejected notes are kept for audit and listed only on request).
        """
        if conversation_id is not None:
            conversation_id = _check_conversation_id(conversation_id)
        if status not in (None, "pending", "confirmed", "rejected"):
            raise InvalidInputError(
                f"status must be 'pending', 'confirmed' or 'rejected', got {status!r}",
                field="status",
            )
        rows = self._engine.store.notes(
            self._tenant, conversation_id=conversation_id, status=status, limit=limit
        )
        return rows

    def note(self, note_id: str) -> Note:
        """One live note. Raises NotFoundError when deleted, expired or unknown."""
        return self._engine.store.note(self._tenant, _check_note_id(note_id))

    def update_note(
        self, note_id: str, confirm: bool = True, *, evidence_level: str | None = None
    ) -> Note:
        """Close the confirmation loop (seed 002 §5.1): confirm or reject a note.

        Confirming clears ``requires_confirmation`` (optionally raising the evidence
        level, typically to ``S3_user_confirmed``); rejecting keeps the note for audit but
        it is never retrieved again, and the turns it came from leave the long-term index
        (a rejected pin un-pins its targets). Chunks are re-cut by the index worker.

        Raises:
            NotFoundError: no live note with this id in this tenant.
            InvalidInputError: ``confirm`` is not a boolean or ``evidence_level`` unknown.
        """
        note_id = _check_note_id(note_id)
        if not isinstance(confirm, bool):
            raise InvalidInputError(
                f"confirm must be true or false, got {confirm!r}", field="confirm"
            )
        if evidence_level is not None and evidence_level not in EVIDENCE_LEVELS:
            raise InvalidInputError(
                f"evidence_level must be one of {', '.join(EVIDENCE_LEVELS)}",
                field="evidence_level",
            )
        note, _ = self._engine.store.decide_note(
            self._tenant,
            note_id,
            status="confirmed" if confirm else "rejected",
            evidence_level=evidence_level,
        )
        self._engine.wake.set()
        return note

    def policy(self) -> GovernancePolicy:
        """The retention policy in force for this tenant (defaults, product, tenant)."""
        return self._policy(self._tenant)

    def set_policy(self, overrides: Mapping[str, Any] | None) -> GovernancePolicy:
        """Store this tenant's policy overrides (None clears them); applies to turns marked
        from now on. Raises InvalidInputError naming the bad key."""
        if overrides is not None:
            self._engine.policy.merged(overrides, source="policy")
        self._engine.store.set_policy(self._tenant, overrides)
        return self.policy()

    def sweep_expired(self, now: float | None = None) -> dict[str, int]:
        """Mark expired turn labels and notes now (workers also do it every
        ``sweep_seconds``); their chunks are re-cut without them."""
        result = self._engine.store.sweep_expired(now)
        self._engine.wake.set()
        return result


@dataclass
class _Prepared:
    tenant: str
    conversation_id: str
    jobs: list[ClaimedJob]
    revision: int
    supersede_after: int
    records: list[ChunkRecord]
    frontier: tuple[int, int] | None
    indexed_seq: int | None
    marks_from: int | None = None
    marks: list[MarkWrite] = field(default_factory=list)
    pins: list[PinRecord] = field(default_factory=list)
    notes: list[NoteDraft] = field(default_factory=list)
    vectors: list[Any] = field(default_factory=list)
    chunks: list[IndexedChunk] = field(default_factory=list)


def _earlier(frontier: tuple[int, int], other: tuple[int, int] | None) -> tuple[int, int] | None:
    return other if other is None or other[1] < frontier[1] else frontier


def _mark_turn(turn: StoredTurn) -> MarkTurn:
    return MarkTurn(
        seq=turn.seq,
        turn_id=turn.turn_id,
        role=turn.role,
        text=turn.text,
        timestamp=turn.timestamp.timestamp(),
        name=turn.name,
    )


def _chunk_turn(turn: StoredTurn, mark: TurnMark | None = None) -> ChunkTurn:
    text = turn.text
    if mark is not None and mark.span is not None:
        text = text[mark.span.start : mark.span.end]
    return ChunkTurn(
        seq=turn.seq,
        role=turn.role,
        text=clean_text(text),
        timestamp=turn.timestamp,
        name=turn.name,
    )


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else None


def _govern(record: ChunkRecord, seqs: Sequence[int], derived: Derived) -> ChunkRecord:
    """Chunk governance metadata from its turns' effective marks.

    Importance and category of the most important turn; pinned or pending when any turn
    is; the chunk expires with its first turn to expire (the sweep then re-cuts it without
    that turn), so expired text is never returned.
    """
    marks = [derived.effective[seq] for seq in seqs]
    top = max(marks, key=lambda mark: mark.importance)
    expiries = [e for e in (derived.expires_at[seq] for seq in seqs) if e is not None]
    meta = record.metadata.model_copy(
        update={
            "importance": top.importance,
            "category": top.category,
            "expires_at": _iso(min(expiries)) if expiries else None,
            "pinned": any(mark.user_triggered_save for mark in marks),
            "requires_confirmation": any(mark.requires_confirmation for mark in marks),
            "turn_seqs": list(seqs),
        }
    )
    return record.model_copy(update={"metadata": meta})


def _turns_of(metadata: Mapping[str, Any]) -> set[int] | None:
    seqs = metadata.get("turn_seqs")
    if seqs:
        return set(seqs)
    start, end = metadata.get("turn_range", (0, 0))
    return set(range(start, end + 1)) if end - start <= 64 else None


def _diverse(
    ranked: Sequence[tuple[int, float]], rows: Mapping[int, Any], top_k: int
) -> list[tuple[int, float]]:
    """Rank order, but a hit whose turns are mostly (2/3) in higher hits of the same
    conversation waits until nothing else is left: overlapping chunks are not repeated."""
    chosen: list[tuple[int, float]] = []
    later: list[tuple[int, float]] = []
    covered: dict[str, set[int]] = {}
    for rowid, score in ranked:
        if rowid not in rows:
            continue
        metadata = rows[rowid][2]
        seqs = _turns_of(metadata)
        seen = covered.setdefault(str(metadata.get("conversation_id")), set())
        if seqs and len(seqs & seen) * 3 >= len(seqs) * 2:
            later.append((rowid, score))
            continue
        chosen.append((rowid, score))
        seen.update(seqs or ())
        if len(chosen) == top_k:
            return chosen
    return (chosen + later)[:top_k]


def _rrf(rankings: Sequence[tuple[float, Sequence[tuple[int, float]]]]) -> list[tuple[int, float]]:
    """Weighted reciprocal-rank fusion, scaled so rank 1 in every list scores 1.0."""
    scores: dict[int, float] = {}
    for weight, ranking in rankings:
        for rank, (rowid, _) in enumerate(ranking):
            scores[rowid] = scores.get(rowid, 0.0) + weight / (RRF_K + rank + 1)
    best = sum(weight for weight, ranking in rankings if ranking) / (RRF_K + 1) or 1.0
    return sorted(
        ((rowid, score / best) for rowid, score in scores.items()), key=lambda x: (-x[1], x[0])
    )


def _convex(
    rankings: Sequence[tuple[float, Sequence[tuple[int, float]]]],
) -> list[tuple[int, float]]:
    """Weighted mean of each ranking's min-max normalised scores (a row missing from a
    ranking scores 0 there); the best row of every list scores 1.0."""
    scores: dict[int, float] = {}
    for weight, ranking in rankings:
        if not ranking:
            continue
        low = min(score for _, score in ranking)
        span = max(score for _, score in ranking) - low
        for rowid, score in ranking:
            share = (score - low) / span if span > 0 else 1.0
            scores[rowid] = scores.get(rowid, 0.0) + weight * share
    total = sum(weight for weight, ranking in rankings if ranking) or 1.0
    return sorted(
        ((rowid, score / total) for rowid, score in scores.items()), key=lambda x: (-x[1], x[0])
    )


def _check_note_id(note_id: Any) -> str:
    if not isinstance(note_id, str) or not note_id.startswith("note_"):
        raise InvalidInputError(
            f"note_id must be a string like 'note_…' from Memory.notes(), got {note_id!r}",
            field="note_id",
        )
    return note_id


def _check_tenant(tenant: Any) -> None:
    if (
        not isinstance(tenant, str)
        or not tenant
        or len(tenant) > 100
        or any(ord(ch) < 32 for ch in tenant)
    ):
        raise InvalidInputError(
            "tenant must be a non-empty string of at most 100 printable characters",
            field="tenant",
        )
