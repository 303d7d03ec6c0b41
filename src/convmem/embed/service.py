"""``EmbeddingService``: one instance per model, thread-safe, batched, normalised (seed 001)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from convmem.embed.base import (
    Embedder,
    Vectors,
    check_joins,
    embed_joined,
    embed_joined_texts,
    embed_query,
    embeds_turns,
    fusion_weight,
    window_boost,
)
from convmem.errors import EmbedderError
from convmem.metrics import Histogram

__all__ = ["EmbeddingService"]


class EmbeddingService:
    """Wraps an embedder with batching, locking and latency metrics.

    ``get_instance(embedder)`` returns the one service for that embedder's ``model_id``,
    so a model is loaded once per process.
    """

    _instances: ClassVar[dict[str, EmbeddingService]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, embedder: Embedder, *, batch_size: int = 256) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self.latency = Histogram("embedding_seconds")
        self._lock = threading.Lock()

    @classmethod
    def get_instance(cls, embedder: Embedder | None = None) -> EmbeddingService:
        """The shared service for ``embedder`` (default: the 'auto' embedder)."""
        if embedder is None:
            from convmem.embed.resolve import resolve_embedder

            with cls._registry_lock:
                if "auto" in cls._instances:
                    return cls._instances["auto"]
            embedder = resolve_embedder("auto")
            with cls._registry_lock:
                return cls._instances.setdefault("auto", cls(embedder))
        with cls._registry_lock:
            service = cls._instances.get(embedder.model_id)
            if service is None or service.embedder is not embedder:
                service = cls(embedder)
                cls._instances[embedder.model_id] = service
            return service

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    @property
    def dimension(self) -> int:
        return self.embedder.dimension

    @property
    def fusion_weight(self) -> float:
        """The vector weight rrf hybrid fusion should use with this model (see embed.base)."""
        return fusion_weight(self.embedder)

    @property
    def window_boost(self) -> float:
        """How much more a dialogue-window query weighs this model's vector ranking."""
        return window_boost(self.embedder)

    @property
    def embeds_turns(self) -> bool:
        """Whether search may embed a query's candidate turns with this model."""
        return embeds_turns(self.embedder)

    def fusion_weight_for(self, fusion: str) -> float:
        """The vector weight for a fusion method ("rrf", "convex") with this model."""
        return fusion_weight(self.embedder, fusion)

    def embed_array(self, texts: Sequence[str]) -> Vectors:
        """Embed passages (what the store keeps) in batches; rows are L2-normalised float32."""
        return self._batched(texts, self.embedder.embed)

    def embed_query_array(self, texts: Sequence[str]) -> Vectors:
        """Embed search queries through the model's query side (its own prefix, if any).

        Same as ``embed_array`` for symmetric models and embedders without ``embed_query``.
        """
        embedder = self.embedder
        return self._batched(texts, lambda batch: embed_query(embedder, batch))

    def embed_joined_arrays(
        self, pieces: Sequence[str], joins: Sequence[Sequence[int]], own: Sequence[int] = ()
    ) -> tuple[Vectors, Vectors]:
        """Passage vectors of the pieces named in ``own`` and of each join of pieces
        (:func:`convmem.embed.embed_joined`), checked like ``embed_array``'s. Joins go to
        the model ``batch_size`` at a time with the pieces they use (a piece two batches
        use is read twice), so a long conversation never holds every piece's features at
        once. A model without its own ``embed_joined`` embeds the texts in batches."""
        import numpy as np

        check_joins(len(pieces), joins, own)
        if not callable(getattr(self.embedder, "embed_joined", None)):
            return embed_joined_texts(self.embed_array, self.dimension, pieces, joins, own)
        own_rows = np.zeros((len(own), self.dimension), dtype=np.float32)
        joined = np.zeros((len(joins), self.dimension), dtype=np.float32)
        wanted: dict[int, list[int]] = {}  # piece -> its rows in ``own``
        for row, piece in enumerate(own):
            wanted.setdefault(piece, []).append(row)
        for start in range(0, max(len(joins), 1), self.batch_size):
            block = joins[start : start + self.batch_size]
            used = sorted({piece for join in block for piece in join})
            if start + self.batch_size >= len(joins):  # the last batch takes the rest
                used = sorted({*used, *wanted})
            mine = [piece for piece in used if piece in wanted]
            local = {piece: i for i, piece in enumerate(used)}
            began = time.perf_counter()
            with self._lock:
                rows, vectors = embed_joined(
                    self.embedder,
                    [pieces[piece] for piece in used],
                    [[local[piece] for piece in join] for join in block],
                    [local[piece] for piece in mine],
                )
                rows = self._checked(rows, len(mine))
                joined[start : start + len(block)] = self._checked(vectors, len(block))
            self.latency.observe(time.perf_counter() - began)
            for piece, vector in zip(mine, rows, strict=True):
                own_rows[wanted.pop(piece)] = vector
        return own_rows, joined

    def _batched(self, texts: Sequence[str], embed: Callable[[Sequence[str]], Vectors]) -> Vectors:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            began = time.perf_counter()
            with self._lock:
                parts.append(self._checked(embed(batch), len(batch)))
            self.latency.observe(time.perf_counter() - began)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _checked(self, vectors: Vectors, count: int) -> Vectors:
        """The embedder's batch, refused unless it is ``count`` finite rows of the model's
        dimension: a bad batch fails its index job with a clear error instead of being
        stored (NaN scores nothing, a wrong length breaks every later search)."""
        import numpy as np

        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.shape != (count, self.dimension):
            raise EmbedderError(
                f"embedder {self.model_id!r} returned vectors of shape {matrix.shape} for "
                f"{count} texts; expected ({count}, {self.dimension}). Check the model or its "
                "dimensions setting"
            )
        if not np.isfinite(matrix).all():
            raise EmbedderError(
                f"embedder {self.model_id!r} returned NaN or infinite values; the batch was "
                "not stored. Check the model (or the embedding endpoint)"
            )
        return matrix

    def embed_chunk(self, text: str) -> list[float]:
        """One text to a normalised vector (seed 001 ``embed_chunk``)."""
        return [float(value) for value in self.embed_array([text])[0]]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Many texts to normalised vectors, in order."""
        return [[float(value) for value in row] for row in self.embed_array(list(texts))]
