"""Fusing rankings and keeping hits diverse: pure functions over ``(row, score)`` lists,
and over the hit lists of a question's parts (:func:`interleave`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from convmem.models import Hit

__all__ = [
    "FUSIONS",
    "RRF_K",
    "convex",
    "diverse",
    "evidence_key",
    "fuse",
    "interleave",
    "rrf",
    "turns_of",
]

RRF_K = 60
Ranking = Sequence[tuple[int, float]]


def rrf(rankings: Sequence[tuple[float, Ranking]]) -> list[tuple[int, float]]:
    """Weighted reciprocal-rank fusion, scaled so rank 1 in every list scores 1.0."""
    scores: dict[int, float] = {}
    for weight, ranking in rankings:
        for rank, (rowid, _) in enumerate(ranking):
            scores[rowid] = scores.get(rowid, 0.0) + weight / (RRF_K + rank + 1)
    best = sum(weight for weight, ranking in rankings if ranking) / (RRF_K + 1) or 1.0
    return sorted(
        ((rowid, score / best) for rowid, score in scores.items()), key=lambda x: (-x[1], x[0])
    )


def convex(rankings: Sequence[tuple[float, Ranking]]) -> list[tuple[int, float]]:
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


FUSIONS = {"rrf": rrf, "convex": convex}


def fuse(name: str, rankings: Sequence[tuple[float, Ranking]]) -> list[tuple[int, float]]:
    """Fuse with the named method (``rrf`` or ``convex``)."""
    return FUSIONS[name](rankings)


def turns_of(metadata: Mapping[str, Any]) -> set[int] | None:
    """The turn sequence numbers a hit covers (None when unknown and too wide to list)."""
    seqs = metadata.get("turn_seqs")
    if seqs:
        return set(seqs)
    start, end = metadata.get("turn_range", (0, 0))
    return set(range(start, end + 1)) if end - start <= 64 else None


def diverse(
    ranked: Sequence[tuple[int, float]], metadata: Mapping[int, Mapping[str, Any]], top_k: int
) -> list[tuple[int, float]]:
    """Rank order, but a hit whose turns are mostly (2/3) in higher hits of the same
    conversation waits until nothing else is left: overlapping chunks are not repeated."""
    chosen: list[tuple[int, float]] = []
    later: list[tuple[int, float]] = []
    covered: dict[str, set[int]] = {}
    for rowid, score in ranked:
        if rowid not in metadata:
            continue
        meta = metadata[rowid]
        seqs = turns_of(meta)
        seen = covered.setdefault(str(meta.get("conversation_id")), set())
        if seqs and len(seqs & seen) * 3 >= len(seqs) * 2:
            later.append((rowid, score))
            continue
        chosen.append((rowid, score))
        seen.update(seqs or ())
        if len(chosen) == top_k:
            return chosen
    return (chosen + later)[:top_k]


def evidence_key(hit: Hit) -> tuple[Any, ...]:
    """What a hit is evidence of: the turns a dialogue hit names (a recent turn, a turn or
    a chunk), else a note's id."""
    span = hit.metadata.get("turn_range")
    if span is None or hit.tier == "LTM":
        return ("note", hit.chunk_id)
    return (hit.metadata.get("conversation_id"), tuple(span))


def interleave(parts: Sequence[tuple[str, Sequence[Hit]]], top_k: int) -> list[Hit]:
    """One list for the parts of one question, each searched on its own.

    Round by round, each part gives its next best hit not yet taken (the part whose best
    hit scores higher goes first), so every part of "A, and also B" keeps its evidence in
    the first ``top_k``, which one ranking of the whole question does not promise: the part
    with more words in common with the memory fills the list (measured in bench/README.md).
    A part with no hits gives nothing. Each hit names its part in ``metadata["sub_query"]``.
    """
    pending = sorted(
        ((query, list(hits)) for query, hits in parts),
        key=lambda item: -item[1][0].score if item[1] else 0.0,
    )
    out: list[Hit] = []
    seen: set[tuple[Any, ...]] = set()
    while len(out) < top_k and any(rest for _, rest in pending):
        for query, rest in pending:
            while rest and evidence_key(rest[0]) in seen:
                rest.pop(0)
            if rest and len(out) < top_k:
                hit = rest.pop(0)
                seen.add(evidence_key(hit))
                metadata = {**hit.metadata, "sub_query": query}
                out.append(hit.model_copy(update={"metadata": metadata}))
    return out
