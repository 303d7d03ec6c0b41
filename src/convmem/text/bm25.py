"""The one BM25: idf, query term weights and the per-document score, used by every backend.

Every lexical ranking in convmem (SQLite's conversation scans and its FTS5 candidates,
PostgreSQL's ``tsvector`` ranking, the notes tier, turn scoring) computes its scores with
these functions and constants, so the same document gets the same score everywhere. SQL
that computes the term-frequency part in the database takes :data:`K1` and :data:`B`
from here as parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["K1", "B", "idf", "query_weights", "rank", "score", "tf_part"]

K1 = 1.2
B = 0.75


def idf(documents: int, containing: int) -> float:
    """Inverse document frequency, ``ln(1 + (N - n + 0.5) / (n + 0.5))``: always positive,
    so a term in most documents still counts a little (never against a match)."""
    documents = max(documents, containing)
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


def tf_part(tf: float, length: float, mean_length: float) -> float:
    """The saturated, length-normalised term frequency of one term in one document."""
    mean = mean_length if mean_length > 0 else 1.0
    return tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / mean))


def score(
    weights: Mapping[str, float],
    idfs: Mapping[str, float],
    counts: Mapping[str, int],
    length: float,
    mean_length: float,
) -> float:
    """BM25 of one document: the sum over query terms it holds of weight x idf x tf part."""
    return sum(
        weights[term] * idfs[term] * tf_part(tf, length, mean_length)
        for term, tf in counts.items()
        if term in weights and tf
    )


def query_weights(tokens: Iterable[str], limit: int) -> dict[str, float]:
    """A query's distinct terms with their weights, at most ``limit`` of them.

    A term said n times weighs ``1 + ln n``: a long query (a dialogue window) keeps what
    it keeps coming back to without letting one word drown the rest. Past ``limit`` the
    most repeated terms stay, earlier ones first among equals.
    """
    counts: dict[str, int] = {}
    for token in tokens:
        if token:
            counts[token] = counts.get(token, 0) + 1
    kept = sorted(counts, key=lambda term: -counts[term])[:limit]  # stable: first seen first
    return {term: 1.0 + math.log(counts[term]) for term in kept}


def rank(weights: Mapping[str, float], documents: Sequence[Sequence[str]]) -> list[float]:
    """BM25 of each tokenised document against the query weights, with collection
    statistics (document count, frequencies, mean length) from ``documents`` themselves."""
    if not documents:
        return []
    # plain dicts and loops: a Counter per document cost twice as much (a search ranks a
    # hundred candidate lines this way)
    frequency = dict.fromkeys(weights, 0)
    counted: list[dict[str, int]] = []
    total = 0
    for document in documents:
        counts: dict[str, int] = {}
        for token in document:
            if token in weights:
                counts[token] = counts.get(token, 0) + 1
        for term in counts:
            frequency[term] += 1
        counted.append(counts)
        total += len(document)
    mean = total / len(documents)
    idfs = {term: idf(len(documents), frequency[term]) for term in weights}
    return [
        score(weights, idfs, counts, len(document), mean)
        for counts, document in zip(counted, documents, strict=True)
    ]
