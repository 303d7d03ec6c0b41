"""PostgreSQL's lexical index: a ``tsvector`` of convmem's own segmented tokens (GIN), ranked
with the one BM25 of :mod:`convmem.text.bm25` (its idf computed here, its term-frequency
part in SQL with the same constants)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec
from convmem.store.lexical import LexicalStats, Scope, query_terms
from convmem.store.reads import ChunkReads
from convmem.text import bm25

__all__ = ["COMMON_TERMS_SQL", "EXACT_COUNT_BELOW", "STATS_SECONDS", "PostgresLexical"]

# Terms estimated in at most this many chunks are counted exactly.
EXACT_COUNT_BELOW = 2000
# Collection statistics for BM25 (documents, mean length) are re-read at most this often.
STATS_SECONDS = 30.0
# Above this many chunks (the planner's row estimate) the collection statistics come from
# a page sample of about SAMPLE_ROWS rows: counting every row took 300 ms at a million
# chunks, paid by one search every STATS_SECONDS. BM25 barely moves with either figure.
SAMPLE_ABOVE = 200_000
SAMPLE_ROWS = 20_000


#: Rows per term for the most common elements of ``tsv`` in table ``%s`` (what the planner
#: estimates ``@@`` from), and under the key "" the planner's estimate for any other term:
#: min(0.005, the least listed frequency / 2) of the rows (PostgreSQL's ``tsquerysel``).
COMMON_TERMS_SQL = (
    "WITH e AS (SELECT u.e, u.f, greatest(c.reltuples, 0) AS n "
    "FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace "
    "JOIN pg_stats s ON s.schemaname = ns.nspname AND s.tablename = c.relname "
    "AND s.attname = 'tsv' CROSS JOIN LATERAL unnest("
    "CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs) AS u(e, f) "
    "WHERE c.oid = '%s'::regclass AND u.e IS NOT NULL) "
    "SELECT coalesce(json_object_agg(k, v), '{}') FROM ("
    "SELECT e AS k, round(f * n) AS v FROM e UNION ALL "
    "SELECT '', round(least(0.005, min(f) / 2) * max(n)) FROM e HAVING count(*) > 0) t"
)


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


def _average_sql(where: str) -> str:
    """The average length in tokens of the indexed rows under ``where`` (alias ``c``)."""
    return f"SELECT avg(c.ntokens) FROM chunks c WHERE c.tsv IS NOT NULL AND {where}"


class PostgresLexical(ChunkReads, LexicalStats):
    """The lexical hooks of :class:`~convmem.store.postgres.PostgresStore`."""

    _stats: tuple[float, int, float]
    _stats_lock: threading.Lock
    _common: tuple[float, list[dict[str, int]]]
    #: Each posting costs a heap visit here (2-4.5 us at a million chunks, measured with
    #: 256 MB of shared buffers), so a tenant-wide query reads at most 4,000 of them, lone
    #: rarest term included: about 15 ms. Terms in more chunks are left to the vector side.
    POSTINGS_BUDGET = 4000
    LONE_TERM_POSTINGS = 4000

    def _index_tokens(
        self, conn: Connection, tenant: str, rows: Sequence[tuple[int, Sequence[str]]]
    ) -> None:
        conn.executemany(  # the tenant routes each update to one shard on Citus
            "UPDATE chunks SET tsv = CAST(? AS tsvector), ntokens = ? "
            "WHERE tenant = ? AND rowid = ?",
            [(_tsvector(tokens), len(tokens), tenant, rowid) for rowid, tokens in rows],
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

        The estimate comes from the ``tsv`` column statistics, as PostgreSQL's planner
        makes it (:meth:`_common_terms`): the listed count of a common term, else the
        floor for unlisted ones. Counting a common term reads every matching heap row
        (seconds at a million chunks, per new query word). Rare terms, where the estimate
        is a floor and idf matters most, are counted, together in one statement, each
        up to ``LONE_TERM_POSTINGS`` + 1 (a term past it is never read). Asking
        the planner itself (``EXPLAIN`` per term) gave the same figures for a round trip
        per term; through a Citus coordinator it has no statistics at all.
        """
        tables = self._common_terms()
        counts = {}
        for term in terms:
            # a table (a shard) that does not list the term gives the floor, under ""
            estimate = sum(table.get(term, table.get("", 0)) for table in tables)
            if estimate > EXACT_COUNT_BELOW:
                counts[term] = estimate
        rare = [term for term in terms if term not in counts]
        if rare:
            # one GIN-driven count per term; counting them all in one pass over the rows
            # that hold any of them tested every term on every such row (26 words of a
            # Chinese dialogue window at 100k chunks: 460-610 ms, this way 32 ms). A count
            # stops past LONE_TERM_POSTINGS: such a term is never read, whatever its count,
            # and a word the statistics miss can be in tens of thousands of chunks
            count = (
                "(SELECT count(*) FROM "
                "(SELECT 1 FROM chunks WHERE tsv @@ CAST(? AS tsquery) LIMIT ?) AS s)"
            )
            cap = self.LONE_TERM_POSTINGS + 1
            row = conn.execute(
                f"SELECT {', '.join([count] * len(rare))}",
                [value for term in rare for value in (_tsquery([term]), cap)],
            ).fetchone()
            counts.update((term, int(count)) for term, count in zip(rare, row, strict=True))
        return {term: count for term, count in counts.items() if count}

    def _common_terms(self) -> list[dict[str, int]]:
        """Rows per term for the terms the ``tsv`` statistics list as common, and the
        planner's floor for any other term under "" (:data:`COMMON_TERMS_SQL`); one dict
        per table that holds chunks (Citus: per shard). Cached for ``STATS_SECONDS``."""
        with self._stats_lock:
            read_at, tables = self._common
            if time.monotonic() - read_at < STATS_SECONDS:
                return tables
        tables = [
            {term: int(rows) for term, rows in table.items()} for table in self._read_common_terms()
        ]
        with self._stats_lock:
            self._common = (time.monotonic(), tables)
        return tables

    def _read_common_terms(self) -> list[dict[str, Any]]:
        """:data:`COMMON_TERMS_SQL` for each table holding chunks (here: one)."""
        (table,) = self._db().execute(COMMON_TERMS_SQL.replace("%s", "chunks")).fetchone()
        return [table if isinstance(table, dict) else json.loads(table)]

    def _collection(self) -> tuple[int, float]:
        """``(documents, mean tokens per document)`` of the lexical index, briefly cached."""
        with self._stats_lock:
            read_at, documents, mean = self._stats
            if time.monotonic() - read_at < STATS_SECONDS and documents:
                return documents, mean
        reader = self._db()
        estimate = self._row_estimate(reader)
        sample = ""
        if estimate >= SAMPLE_ABOVE:
            percent = 100.0 * SAMPLE_ROWS / estimate
            sample = f"TABLESAMPLE SYSTEM ({percent:.6f})"
        row = reader.execute(
            f"SELECT count(*), coalesce(avg(ntokens), 0) FROM chunks {sample} WHERE tsv IS NOT NULL"
        ).fetchone()
        documents, mean = int(row[0]), float(row[1])
        if sample:
            documents = round(documents * estimate / SAMPLE_ROWS)
        with self._stats_lock:
            self._stats = (time.monotonic(), documents, mean)
        return documents, mean

    def _row_estimate(self, reader: Connection) -> float:
        """The planner's estimate of the rows of ``chunks`` (-1 before the first ANALYZE)."""
        row = reader.execute("SELECT reltuples FROM pg_class WHERE oid = 'chunks'::regclass")
        return float(row.fetchone()[0])

    def _forget_terms(self) -> None:
        super()._forget_terms()
        self._stats = (0.0, 0, 0.0)
        self._common = (0.0, [])

    def _said(
        self, conn: Connection, tenant: str, spec: FilterSpec, terms: Sequence[str]
    ) -> set[str]:
        """One ``EXISTS`` per term in one statement (the GIN index and the tenant's rows;
        each stops at its first live row)."""
        where, params = self._live_clause(spec)
        exists = f"EXISTS (SELECT 1 FROM chunks c WHERE c.tsv @@ CAST(? AS tsquery) AND {where})"
        row = conn.execute(
            f"SELECT {', '.join([exists] * len(terms))}",
            [value for term in terms for value in (_tsquery([term]), tenant, self.now(), *params)],
        ).fetchone()
        return {term for term, found in zip(terms, row, strict=True) if found}

    def _scope_documents(self, tenant: str, spec: FilterSpec, terms: Collection[str]) -> Scope:
        """One conversation's rows, read directly as on SQLite, statistics from those rows,
        no document frequencies to look up (counting a new query word cost 10-30 ms at
        1 M chunks): their number from the ``chunks_live`` index, their average length
        (read with it up to ``SCOPE_SCAN_ROWS`` rows, cached past that, as on SQLite), then
        only the rows that hold an asked term (``tsv @@`` any of them), each with those
        terms' counts. Up to ``SCOPE_SCAN_ROWS`` rows the conversation's rows are read
        first, past that the GIN index finds the rows that hold a term (bench/README.md,
        stops 37 and 38). The asked terms are joined as a table, not tested with ``=
        ANY(array)``: a prepared statement's generic plan tests each lexeme of each row
        against every term in turn (60-100 against 26-33 ms for a 33-term line at 5,000
        rows)."""
        where, params = self._live_clause(spec)
        reader = self._db()
        now = self.now()
        # the count from the chunks_live index alone; the average length (every row read,
        # 20 ms at 5,000 rows) only for a short conversation, cached for a long one
        values = [tenant, now, *params]
        size, average = reader.execute(
            f"""
            WITH n AS MATERIALIZED (SELECT count(*) AS size FROM chunks c WHERE {where})
            SELECT n.size, CASE WHEN n.size <= ? THEN ({_average_sql(where)}) END FROM n
            """,
            [*values, self.SCOPE_SCAN_ROWS, *values],
        ).fetchone()
        if not size or not terms:
            return Scope(int(size), float(average or 0.0), [])
        if average is None:
            average = self._scope_average(
                (tenant, where, *params),
                lambda: float(reader.execute(_average_sql(where), values).fetchone()[0] or 0.0),
            )
        query = _tsquery(list(terms))
        if size <= self.SCOPE_SCAN_ROWS:
            # the conversation's rows first, through its b-tree: the planner would otherwise
            # go through the GIN index for a common word (p99 26-31 -> 47-54 ms at 200 rows)
            rows = reader.execute(
                f"""
                WITH scope AS MATERIALIZED (
                    SELECT c.rowid, c.ntokens, c.tsv FROM chunks c
                    WHERE c.tsv IS NOT NULL AND {where}
                ), q AS (SELECT * FROM unnest(CAST(? AS text[])) AS q(term))
                SELECT s.rowid, s.ntokens, u.lexeme, cardinality(u.positions)
                FROM scope s CROSS JOIN LATERAL unnest(s.tsv) AS u
                JOIN q ON q.term = u.lexeme
                WHERE s.tsv @@ CAST(? AS tsquery)
                """,
                [*values, list(terms), query],
            )
        else:  # a long conversation: the GIN index finds its rows that hold a term
            rows = reader.execute(
                f"""
                WITH q AS (SELECT * FROM unnest(CAST(? AS text[])) AS q(term))
                SELECT c.rowid, c.ntokens, u.lexeme, cardinality(u.positions)
                FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u
                JOIN q ON q.term = u.lexeme
                WHERE c.tsv @@ CAST(? AS tsquery) AND {where}
                """,
                [list(terms), query, *values],
            )
        documents: dict[int, tuple[int, dict[str, int]]] = {}
        for rowid, length, lexeme, count in rows:
            documents.setdefault(int(rowid), (int(length), {}))[1][lexeme] = int(count)
        return Scope(
            int(size),
            float(average),
            [(rowid, length, counts) for rowid, (length, counts) in documents.items()],
        )

    def lexical(
        self,
        tenant: str,
        spec: FilterSpec,
        tokens: Sequence[str],
        limit: int,
        *,
        secondary: bool = False,
    ) -> list[tuple[int, float]]:
        """BM25 (k1 1.2, b 0.75) over the ``tsvector`` of each live chunk under the filter.

        Within one conversation its rows are scored directly (:meth:`_scope_documents`).
        Across a tenant, term frequencies come from the stored positions, document
        frequencies and the collection size from the whole index (as FTS5 does), and the
        rarest terms within the postings budget are read, and pairs of the terms left out
        as conjunctions (:meth:`_pairs`); repeated query terms weigh more
        (:func:`query_terms`).
        """
        weights = query_terms(tokens, spec)
        if not weights:
            return []
        if spec.conversation_id is not None:
            return self._lexical_rows(tenant, spec, weights, limit)
        reader = self._db()
        counts = self._selective_terms(reader, list(weights), secondary=secondary)
        if not counts:
            return []
        documents, mean = self._collection()
        # the left-out terms' pairs (LexicalStats._pairs): candidates through a GIN
        # conjunction, each term of a pair scored once in the exact stage
        pairs = [] if secondary else self._pairs(list(weights), counts, lambda: documents)
        found = {**counts, **{t: self._term_cache.get(t, 0) for pair in pairs for t in pair}}
        terms = list(found)
        # the collection count is cached and may trail a just-counted term: bm25.idf
        # takes the larger of the two
        idf = {term: bm25.idf(documents, n) * weights[term] for term, n in found.items()}
        # what finds the candidates: each chosen term, each pair, with its summed idf
        seeds = [([term], idf[term]) for term in counts]
        seeds += [(list(pair), idf[pair[0]] + idf[pair[1]]) for pair in pairs]
        where, params = self._live_clause(spec)
        # Two stages. First every matching row is ranked by BM25 as if each of its terms
        # occurred once (idf and the row's length, both at hand): one GIN lookup per term
        # and a heap visit per posting, no candidate's tsvector read (detoasting and
        # testing it per term per row made this stage 160 ms at a million chunks). Then
        # exact BM25 with term frequencies is computed for the best few hundred only.
        rows = reader.execute(
            f"""
            WITH q AS (
                SELECT * FROM unnest(CAST(? AS text[]), CAST(? AS float8[])) AS q(term, idf)
            ), seeds AS (
                SELECT * FROM unnest(CAST(? AS tsquery[]), CAST(? AS float8[]))
                    AS s(query, idf)
            ), candidates AS (
                SELECT m.rowid FROM seeds s CROSS JOIN LATERAL (
                    SELECT c.rowid, c.ntokens FROM chunks c WHERE c.tsv @@ s.query AND {where}
                ) AS m
                GROUP BY m.rowid
                ORDER BY sum(s.idf / (1 + ? * (1 - ? + ? * m.ntokens / ?))) DESC, m.rowid
                LIMIT ?
            )
            SELECT d.rowid,
                sum(q.idf * u.tf * (? + 1) / (u.tf + ? * (1 - ? + ? * d.ntokens / ?))) AS score
            FROM candidates k
            JOIN chunks d ON d.tenant = ? AND d.rowid = k.rowid
            CROSS JOIN LATERAL (
                SELECT lexeme, cardinality(positions) AS tf FROM unnest(d.tsv)
            ) AS u
            JOIN q ON q.term = u.lexeme
            GROUP BY d.rowid ORDER BY score DESC, d.rowid LIMIT ?
            """,
            [
                terms,
                [idf[term] for term in terms],
                [" & ".join(_lexeme(term) for term in seed) for seed, _ in seeds],
                [weight for _, weight in seeds],
                tenant,
                self.now(),
                *params,
                bm25.K1,
                bm25.B,
                bm25.B,
                max(mean, 1.0),
                max(limit * 4, 200),
                bm25.K1,
                bm25.K1,
                bm25.B,
                bm25.B,
                max(mean, 1.0),
                tenant,
                limit,
            ],
        ).fetchall()
        return [(int(rowid), float(score)) for rowid, score in rows]
