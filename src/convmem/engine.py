"""What every tenant view of one opened store shares: the store, the embedder, the one
hybrid searcher, the indexer and its worker threads, the clock and the metrics."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from convmem.clock import SYSTEM_CLOCK, Clock
from convmem.embed import Embedder, EmbeddingService, resolve_embedder
from convmem.embed.service import chosen_embedder
from convmem.errors import EmbeddingMismatchError, InvalidInputError, StoreError
from convmem.governance import GovernancePolicy, Marker, RuleMarker, load_policy
from convmem.ids import MAX_LIMIT, check_flag, check_seconds, check_whole
from convmem.ingest import ChunkingPolicy
from convmem.metrics import Counter
from convmem.retrieve import HybridSearcher
from convmem.store import SQLStore, open_store
from convmem.text import load_user_dict
from convmem.worker import Indexer, RetryPolicy, WorkerPool

__all__ = ["Engine", "check_chunking", "open_engine"]

logger = logging.getLogger(__name__)


@dataclass
class Engine:
    store: SQLStore
    embedding: EmbeddingService
    searcher: HybridSearcher
    indexer: Indexer
    pool: WorkerPool
    clock: Clock
    max_text_chars: int
    turns_accepted: Counter = field(default_factory=lambda: Counter("turns_accepted_total"))
    story_degraded: Counter = field(
        default_factory=lambda: Counter("scene_context_degraded_parts_total")
    )
    closed: bool = False

    def close(self) -> None:
        """Stop workers (in-flight jobs are released, not lost), save indexes, close."""
        if self.closed:
            return
        self.pool.stop()
        self.indexer.close()
        # only this handle's claims: another handle in the process may be mid-pass
        with contextlib.suppress(StoreError):
            self.store.release_worker(self.indexer.claim_prefix())
        self.searcher.save_indexes()
        self.closed = True
        self.store.close()


#: The most index worker threads one handle starts (more only contend for the store).
MAX_WORKERS = 256


def _path(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str | os.PathLike):
        raise InvalidInputError(
            f"{name} must be a path (str or pathlib.Path) or None, got {type(value).__name__}",
            field=name,
        )


def _needs(name: str, value: Any, members: tuple[str, ...], what: str) -> None:
    if value is not None and not all(hasattr(value, member) for member in members):
        raise InvalidInputError(
            f"{name} must be {what} or None, got {type(value).__name__}", field=name
        )


def check_options(
    *,
    url: Any,
    workers: Any,
    durability: Any,
    max_text_chars: Any,
    retry_base_seconds: Any,
    retry_max_seconds: Any,
    max_attempts: Any,
    lease_seconds: Any,
    job_batch: Any,
    allow_model_change: Any,
    model_cache_dir: Any,
    ann_min_rows: Any,
    vector_weight: Any,
    marker: Any,
    sweep_seconds: Any,
    user_dict: Any,
    clock: Any,
    chunking: Any,
) -> None:
    """Check ``Memory.open``'s options before anything is opened or started.

    Raises:
        InvalidInputError: naming the option and what it takes (a string where a number
            belongs, a negative time, an unknown durability), so a wrong setting fails at
            open with a sentence instead of a TypeError in a worker thread later.
    """
    _path("url", url)
    if isinstance(url, str) and (not url.strip() or "\x00" in url):
        raise InvalidInputError(
            "url is empty; pass a file path, sqlite:///path.db, postgresql://... or None",
            field="url",
        )
    check_whole(workers, "workers", 0, MAX_WORKERS)
    if durability not in ("full", "normal"):
        raise InvalidInputError(
            f"durability must be 'full' (fsync each commit) or 'normal', got {durability!r}",
            field="durability",
        )
    check_whole(max_text_chars, "max_text_chars", 1)
    check_seconds(retry_base_seconds, "retry_base_seconds", zero=True)
    check_seconds(retry_max_seconds, "retry_max_seconds", zero=True)
    if retry_max_seconds < retry_base_seconds:
        raise InvalidInputError(
            f"retry_max_seconds ({retry_max_seconds}) is below retry_base_seconds "
            f"({retry_base_seconds}); the backoff grows from the base up to the most",
            field="retry_max_seconds",
        )
    check_whole(max_attempts, "max_attempts", 1)
    check_seconds(lease_seconds, "lease_seconds")
    check_whole(job_batch, "job_batch", 1, most=MAX_LIMIT)
    check_flag(allow_model_change, "allow_model_change")
    _path("model_cache_dir", model_cache_dir)
    check_whole(ann_min_rows, "ann_min_rows")
    if vector_weight is not None and (
        isinstance(vector_weight, bool)
        or not isinstance(vector_weight, int | float)
        or not 0 <= vector_weight < math.inf
    ):
        raise InvalidInputError(
            f"vector_weight must be a finite number >= 0 (BM25 weighs 1) or None, "
            f"got {vector_weight!r}",
            field="vector_weight",
        )
    _needs("marker", marker, ("mark",), "a Marker (an object with mark())")
    check_seconds(sweep_seconds, "sweep_seconds", zero=True)  # 0: never
    _path("user_dict", user_dict)
    if user_dict is not None and not Path(user_dict).is_file():
        raise InvalidInputError(
            f"user_dict {str(user_dict)!r} is not a readable file; pass a jieba dictionary "
            "(one word per line)",
            field="user_dict",
        )
    _needs("clock", clock, ("now",), "a Clock (an object with now())")
    check_chunking(chunking)


def check_chunking(chunking: Any) -> None:
    """A ``chunking`` option: a ChunkingPolicy or None."""
    if chunking is not None and not isinstance(chunking, ChunkingPolicy):
        raise InvalidInputError(
            "chunking must be a ChunkingPolicy (e.g. ChunkingPolicy(max_turns=6)) or None, "
            f"got {type(chunking).__name__}",
            field="chunking",
        )


def _embedder_for(
    store: SQLStore, embedder: Embedder | None, allow_model_change: bool, cache_dir: Path | None
) -> Embedder:
    """The configured embedder (already resolved by ``chosen_embedder``), checked against the
    model the store was built with; None: the store's own model."""
    recorded = store.embedding_model()
    if embedder is None:
        embedder = resolve_embedder(recorded[0] if recorded else "auto", cache_dir=cache_dir)
    if recorded is None:
        store.set_embedding_model(embedder.model_id, embedder.dimension)
    elif (embedder.model_id, embedder.dimension) != recorded and not allow_model_change:
        raise EmbeddingMismatchError(
            f"Store at {store.url} holds {recorded[1]}-d vectors from '{recorded[0]}'; "
            f"the configured embedder gives {embedder.dimension}-d "
            f"'{embedder.model_id}'. To move the store to the new model, run 'convmem "
            "--store URL reindex --embedder SPEC' with the embedder you passed here (a plain "
            "'convmem reindex' re-embeds with the store's own model), or in Python "
            "Memory.open(url, embedder=..., allow_model_change=True).reindex(); or open the "
            "store with its own model."
        )
    return embedder


def _chunking_for(
    store: SQLStore, chunking: ChunkingPolicy | None, tenant: str
) -> ChunkingPolicy | None:
    """The handle's own chunking policy (a warning when the tenant's dialogue was re-cut
    under another), or None: each tenant's dialogue follows the policy its ``rechunk``
    records in the store, read again at every pass, so a process opened without one cuts
    new turns as the tenant's last rechunk does (made by any process, before or after this
    one opened), instead of undoing it."""
    if chunking is not None:
        recorded = store.chunking_policy(tenant)
        if recorded is not None and recorded != asdict(chunking):
            logger.warning(
                "this handle cuts new turns under %s; the tenant's dialogue was re-cut under "
                "%s (Memory.rechunk records the policy)",
                asdict(chunking),
                recorded,
            )
    return chunking


def open_engine(
    url: str | os.PathLike[str] | None,
    *,
    tenant: str,
    embedder: Embedder | str | None,
    chunking: ChunkingPolicy | None,
    workers: int,
    durability: str,
    max_text_chars: int,
    retry: RetryPolicy,
    allow_model_change: bool,
    model_cache_dir: Path | None,
    ann_min_rows: int,
    vector_weight: float | None,
    fusion: str,
    marker: Marker | None,
    policy: GovernancePolicy | Mapping[str, Any] | str | Path | None,
    sweep_seconds: float,
    user_dict: str | Path | None,
    clock: Clock | None,
) -> Engine:
    """Open the store, check its model, and start the workers (see ``Memory.open``)."""
    product_policy = load_policy(policy)
    if user_dict is not None:
        load_user_dict(user_dict)
    clock = clock or SYSTEM_CLOCK
    # before the store: a spec no model answers must not leave a new, empty store behind
    chosen = chosen_embedder(embedder, cache_dir=model_cache_dir)
    store = open_store(
        os.fspath(url) if url is not None else None, durability=durability, clock=clock
    )
    try:
        model = _embedder_for(store, chosen, allow_model_change, model_cache_dir)
        store.recover_dead_claims()
        embedding = EmbeddingService.get_instance(model)
        searcher = HybridSearcher(
            store,
            embedding,
            # each model's own weight for the fusion in use (hashing 0.15: its vectors are
            # a noisier lexical signal; see bench/README.md)
            vector_weight=(
                vector_weight if vector_weight is not None else embedding.fusion_weight_for(fusion)
            ),
            fusion=fusion,
            ann_min_rows=ann_min_rows,
        )
        indexer = Indexer(
            store,
            embedding,
            marker=marker if marker is not None else RuleMarker(),
            policy=product_policy,
            chunking=_chunking_for(store, chunking, tenant),
            retry=retry,
            clock=clock,
        )
        pool = WorkerPool(indexer, clock=clock, sweep_seconds=sweep_seconds)
        try:
            pool.start(workers)
        except BaseException:
            pool.stop()  # the threads that did start (the machine may allow fewer)
            raise
    except BaseException:
        store.close()
        raise
    logger.info("opened %s (model %s, %d workers)", store.url, model.model_id, workers)
    return Engine(
        store=store,
        embedding=embedding,
        searcher=searcher,
        indexer=indexer,
        pool=pool,
        clock=clock,
        max_text_chars=max_text_chars,
    )
