"""PostgreSQL's lexical index: a ``tsvector`` of convmem's own segmented tokens (GIN), ranked
with the one BM25 of :mod:`convmem.text.bm25` (its idf computed here, its term-frequency
part in SQL with the same constants)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec
from convmem.store.lexical import LexicalStats, query_terms
from convmem.store.reads import ChunkReads
from convmem.text import bm25

__all__ = ["EXACT_COUNT_BELOW", "STATS_SECONDS", "PostgresLexical"]

# Terms the planner estimates in at most this many chunks are counted exactly.
EXACT_COUNT_BELOW = 2000
# Collection statistics for BM25 (documents, mean length) are re-read at most this often.
STATS_SECONDS = 30.0


def _lexeme(token: str) -> str:
    """A quoted lexeme, as ``tsvector`` and ``tsquery`` literals both write it."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsvector(tokens: Sequence[str]) -> str:
    """A ``tsvector`` literal of already segmented tokens, keeping every position (tf)."""
    positions: dict[str, list[int]] = {}
    for index, token in enumerate(tokens, start=1):
        if token and len(token.encode("utf-8")) < 2000:
            positions.setdefault(token, []).append(min(index, 16383))
    return " ".join(
        f"{_lexeme(token)}:{','.join(map(str, spots[:256]))}" for token, spots in positions.items()
    )


def _tsquery(terms: Sequence[str]) -> str:
    return " | ".join(_lexeme(term) for term in terms)


class PostgresLexical(ChunkReads, LexicalStats):
    """The lexical hooks of :class:`~convmem.store.postgres.PostgresStore`."""

    _stats: tuple[float, int, float]
    _stats_lock: threading.Lock

    def _index_tokens(self, conn: Connection, rows: Sequence[tuple[int, Sequence[str]]]) -> None:
        conn.executemany(
            "UPDATE chunks SET tsv = CAST(? AS tsvector), ntokens = ? WHERE rowid = ?",
            [(_tsvector(tokens), len(tokens), rowid) for rowid, tokens in rows],
        )

    def _unindex(self, conn: Connection, tenant: str, rowids: Sequence[int]) -> None:
        if rowids:  # the tenant routes the update to one shard on Citus
            conn.execute(
                "UPDATE chunks SET tsv = NULL, ntokens = 0 WHERE tenant = ? AND rowid = ANY(?)",
                (tenant, list(rowids)),
            )

    def _clear_lexical(self, conn: Connection) -> None:
        conn.execute("UPDATE chunks SET tsv = NULL, ntokens = 0 WHERE tsv IS NOT NULL")

    def _term_counts(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        """Documents per term: the planner's estimate, counted exactly when it is small.

        Counting a common term reads every matching heap row (seconds at a million
        chunks, per new query word); the planner estimates it from the ``tsvector``
        column statistics in a fraction of a millisecond. Rare terms, where the estimate
        is a floor and idf matters most, are counted.
        """
        counts: dict[str, int] = {}
        for term in terms:
            query = _tsquery([term])
            plan = conn.execute(
                "EXPLAIN (FORMAT JSON) SELECT 1 FROM chunks WHERE tsv @@ CAST(? AS tsquery)",
                (query,),
            ).fetchone()[0]
            estimate = int(plan[0]["Plan"]["Plan Rows"])
            if estimate <= EXACT_COUNT_BELOW:
                row = conn.execute(
                    "SELECT count(*) FROM chunks WHERE tsv @@ CAST(? AS tsquery)", (query,)
                ).fetchone()
                estimate = int(row[0])
            if estimate:
                counts[term] = estimate
        return counts

    def _collection(self) -> tuple[int, float]:
        """``(documents, mean tokens per document)`` of the lexical index, briefly cached."""
        with self._stats_lock:
            read_at, documents, mean = self._stats
            if time.monotonic() - read_at < STATS_SECONDS and documents:
                return documents, mean
        row = (
            self._db()
            .execute("SELECT count(*), coalesce(avg(ntokens), 0) FROM chunks WHERE tsv IS NOT NULL")
            .fetchone()
        )
        documents, mean = int(row[0]), float(row[1])
        with self._stats_lock:
            self._stats = (time.monotonic(), documents, mean)
        return documents, mean

    def _forget_terms(self) -> None:
        super()._forget_terms()
        self._stats = (0.0, 0, 0.0)

    def lexical(
        self, tenant: str, spec: FilterSpec, tokens: Sequence[str], limit: int
    ) -> list[tuple[int, float]]:
        """BM25 (k1 1.2, b 0.75) over the ``tsvector`` of each live chunk under the filter.

        Term frequencies come from the stored positions; document frequencies and the
        collection size from the whole index (as FTS5 does), so scores do not depend on
        the filter. The rarest terms within the postings budget are read; repeated query
        terms weigh more (:func:`query_terms`).
        """
        weights = query_terms(tokens, spec)
        if not weights:
            return []
        reader = self._db()
        counts = self._selective_terms(reader, list(weights))
        if not counts:
            return []
        terms = list(counts)
        documents, mean = self._collection()
        # the collection count is cached and may trail a just-counted term: bm25.idf
        # takes the larger of the two
        idf = [bm25.idf(documents, found) * weights[term] for term, found in counts.items()]
        where, params = self._live_clause(spec)
        # Two stages: every matching row is ranked by the idf of the terms it holds (a
        # cheap @@ per term, no unpacking), then exact BM25 with term frequencies is
        # computed for the best few hundred only (unnesting every candidate's tsvector
        # cost 3x more at 20k chunks).
        present = " + ".join(["(c.tsv @@ CAST(? AS tsquery))::int * ?"] * len(terms))
        present_params: list[Any] = []
        for term, weight in zip(terms, idf, strict=True):
            present_params.extend([_tsquery([term]), weight])
        rows = reader.execute(
            f"""
            WITH candidates AS (
                SELECT c.rowid, c.ntokens, c.tsv, {present} AS present
                FROM chunks c
                WHERE c.tsv @@ CAST(? AS tsquery) AND {where}
                ORDER BY present DESC, c.rowid LIMIT ?
            )
            SELECT d.rowid,
                sum(q.idf * u.tf * (? + 1) / (u.tf + ? * (1 - ? + ? * d.ntokens / ?))) AS score
            FROM candidates d
            CROSS JOIN LATERAL (
                SELECT lexeme, cardinality(positions) AS tf FROM unnest(d.tsv)
            ) AS u
            JOIN unnest(CAST(? AS text[]), CAST(? AS float8[])) AS q(term, idf)
                ON q.term = u.lexeme
            GROUP BY d.rowid ORDER BY score DESC, d.rowid LIMIT ?
            """,
            [
                *present_params,
                _tsquery(terms),
                tenant,
                self.now(),
                *params,
                max(limit * 4, 200),
                bm25.K1,
                bm25.K1,
                bm25.B,
                bm25.B,
                max(mean, 1.0),
                terms,
                idf,
                limit,
            ],
        ).fetchall()
        return [(int(rowid), float(score)) for rowid, score in rows]
