"""``EmbeddingService``: one instance per model, thread-safe, batched, normalised (seed 001)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

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
from convmem.embed.resolve import resolve_embedder
from convmem.errors import EmbedderError, InvalidInputError
from convmem.metrics import Histogram
from convmem.models import check_query_text
from convmem.text import clean_text

__all__ = ["EmbedderSpecError", "EmbeddingService", "chosen_embedder", "resolve_spec"]


class EmbedderSpecError(InvalidInputError, EmbedderError):
    """An embedder spec that names no model this machine can load (``field="embedder"``).

    Both an :class:`InvalidInputError` (the setting is wrong) and, as before, an
    :class:`EmbedderError`, so code that caught the latter still does.
    """


def resolve_spec(spec: str, *, cache_dir: Path | None = None, field: str = "embedder") -> Embedder:
    """The embedder a spec string names (:func:`convmem.embed.resolve_embedder`); a spec it
    cannot resolve raises :class:`EmbedderSpecError` naming ``field``."""
    try:
        return resolve_embedder(spec, cache_dir=cache_dir)
    except EmbedderSpecError:
        raise
    except EmbedderError as exc:
        raise EmbedderSpecError(str(exc), field=field) from exc


def chosen_embedder(embedder: object, *, cache_dir: Path | None = None) -> Embedder | None:
    """An embedder as a caller names it: an :class:`Embedder`, a spec such as ``"usem3"``
    (resolved, :func:`resolve_spec`) or None.

    Raises:
        InvalidInputError: naming ``embedder``: another type, or a spec that names no
            model on this machine (:class:`EmbedderSpecError`, also an EmbedderError).
    """
    if embedder is None:
        return None
    if isinstance(embedder, str):
        return resolve_spec(embedder, cache_dir=cache_dir)
    if not all(hasattr(embedder, name) for name in ("model_id", "dimension", "embed")):
        raise InvalidInputError(
            "embedder must be an Embedder (model_id, dimension and embed()), a spec such as "
            f"'usem3' or 'hashing', or None; got {type(embedder).__name__}",
            field="embedder",
        )
    return embedder  # type: ignore[return-value]


def _query_text(text: Any, field: str) -> str:
    """A text to embed as a query: what ``Memory.embed_query`` (and search) accepts."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{field} must be a string, got {type(text).__name__}", field=field)
    return check_query_text(text, field)


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
    def get_instance(cls, embedder: Embedder | str | None = None) -> EmbeddingService:
        """The shared service for ``embedder`` (default: the 'auto' embedder): an
        :class:`Embedder` or a spec such as ``"hashing"`` or ``"usem3"``.

        Raises:
            InvalidInputError: naming ``embedder``: neither an Embedder nor a spec string, or
                a spec no model on this machine answers (:class:`EmbedderSpecError`).
        """
        embedder = chosen_embedder(embedder)
        if embedder is None:
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
        """A query to its normalised vector (seed 001 ``embed_chunk``, the query
        vectorisation interface): the model's query side, as ``Memory.embed_query`` and
        ``rag_ingest_incremental.embed_chunk`` give it. Passages: :meth:`embed_array`.

        Raises:
            InvalidInputError: naming ``text``: not a string, empty (nothing but blanks or
                zero-width characters), over 8,000 characters, or holding a NUL or a lone
                surrogate (what search refuses).
        """
        text = _query_text(text, "text")
        return [float(value) for value in self.embed_query_array([clean_text(text) or text])[0]]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Many queries to normalised vectors, in order, each as :meth:`embed_chunk` embeds it.

        Raises:
            InvalidInputError: ``texts`` is not a list (a bare string is refused, not
                embedded character by character: pass ``[text]``), or ``texts[i]`` is not a
                question :meth:`embed_chunk` takes.
        """
        if not isinstance(texts, list | tuple):
            hint = " (a single text: pass [text])" if isinstance(texts, str) else ""
            raise InvalidInputError(
                f"texts must be a list of strings{hint}, got {type(texts).__name__}", field="texts"
            )
        checked = [_query_text(text, f"texts[{i}]") for i, text in enumerate(texts)]
        rows = self.embed_query_array([clean_text(text) or text for text in checked])
        return [[float(value) for value in row] for row in rows]
