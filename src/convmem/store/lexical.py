"""Lexical search shared by every backend: the query's terms and weights, and which of them
a tenant-wide search can afford to read (rarest first, within a postings budget)."""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import combinations
from typing import Any, NamedTuple

from convmem.store.contract import Backend
from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec
from convmem.text import bm25, is_mostly_cjk

__all__ = [
    "CONVERSATION_QUERY_TERMS",
    "LEXICAL_POSTINGS_BUDGET",
    "PAIRS",
    "PAIR_ROWS",
    "PAIR_TERMS",
    "PRESENCE_BATCH",
    "PRESENCE_POSTINGS",
    "QUERY_TERMS",
    "SECONDARY_SHARE",
    "TERM_CACHE_SECONDS",
    "LexicalStats",
    "Scope",
    "query_terms",
    "score_rows",
]

logger = logging.getLogger(__name__)

# Tenant-wide BM25 reads every posting of its terms. Terms are taken rarest first until
# their postings reach this budget (a term alone past it is not read); the common words left
# out add the least to the ranking and most of the cost. FTS5 ranks about 1.7 µs a posting:
# at 100k chunks of chat a Chinese question's query met the old budget of 8,000 (12-14 ms).
# At 4,000 (the server stores' budget too), tenant-wide recall was the same on 600 Chinese
# questions among 100k chunks and on LoCoMo dev in its own store, and p50 / p99 fell 27.0 /
# 52.5 -> 23.4 / 47.1 ms (bench/README.md, stop 34). LoCoMo's English questions among the
# 100k chunks did lose by it (R@5 .585 at 8,000, .517 at 4,000), which the left-out terms'
# pairs (PAIRS) more than won back: .601 (stop 35).
LEXICAL_POSTINGS_BUDGET = 4000
# A secondary ranking (a Chinese question's everyday synonyms, its words in English) reads
# this share of both budgets tenant-wide: its words are looser than the question's own, and
# each such query cost as much as the question's. 600 Chinese questions among 100k chunks,
# tenant-wide: R@5 .488 -> .493, p50 / p99 19.6 / 53.7 -> 17.7 / 31.1 ms at a quarter
# (bench/speed.py budget --shares; bench/README.md, stop 35).
SECONDARY_SHARE = 0.25
# The terms a tenant-wide query leaves out for the budget still say something together:
# "When did Melanie read the book" keeps melani and noth and drops read and book, each in
# thousands of chunks, but few chunks hold both. Pairs of the left-out terms (the
# ``PAIR_TERMS`` rarest, each within ``LONE_TERM_POSTINGS``) are read as conjunctions, at
# most ``PAIRS``, those with the fewest expected rows first (``a * b / chunks``, as if
# the words were independent) until ``PAIR_ROWS`` rows are expected. FTS5 ranks only the
# rows a conjunction matches: LoCoMo dev asked of a 100k-chunk tenant, R@5 .517 -> .601,
# p50 +1.1 ms (bench/speed.py budget --pairs; bench/README.md, stop 35). The question's own
# ranking only: a secondary one reads none. Terms that are not mostly CJK only (stop 36).
PAIR_TERMS = 4
PAIRS = 6
PAIR_ROWS = 500
# Distinct query terms read by an index-wide lexical search, and by one scored over a
# single conversation's rows (cheap: a few hundred rows, so a whole dialogue window fits).
QUERY_TERMS = 64
CONVERSATION_QUERY_TERMS = 256
TERM_CACHE_SECONDS = 300.0
# Long conversations whose average chunk length is cached (LexicalStats._scope_average)
SCOPE_AVERAGES = 1024
# Postings of a word read to learn whether one tenant's memory says it
# (LexicalStats.tenant_terms), a batch at a time, the first of PRESENCE_BATCH: in a store
# of one tenant (or for a word no other tenant says often) its first posting answers, and
# checking 64 rows against the filter cost 45 us more than checking 8 (at 100k chunks).
# A small tenant beside a large one reads its own rows instead (SQLiteStore._said): at
# 4,096 postings a question of a one-line tenant beside 100k chunks took 6-28 ms.
PRESENCE_POSTINGS = 1024
PRESENCE_BATCH = 8


def query_terms(tokens: Sequence[str], spec: FilterSpec) -> dict[str, float]:
    """The query's distinct terms with their BM25 query weights (:func:`bm25.query_weights`).

    At most ``CONVERSATION_QUERY_TERMS`` are kept when the filter names one conversation
    (a few hundred rows are scored, so a whole dialogue window fits), else ``QUERY_TERMS``.
    """
    limit = CONVERSATION_QUERY_TERMS if spec.conversation_id is not None else QUERY_TERMS
    return bm25.query_weights(tokens, limit)


class Scope(NamedTuple):
    """One conversation's rows under a filter, as lexical scoring reads them: how many
    there are (``size``), their average length in tokens, and ``rows``: ``(rowid, length,
    {term: count})`` of those that hold at least one asked term (counts of asked terms
    only). A row that holds none adds nothing to BM25 but its share of the statistics,
    which ``size`` and ``average`` carry."""

    size: int
    average: float
    rows: list[tuple[int, int, dict[str, int]]]

    @classmethod
    def of(cls, documents: Sequence[tuple[int, int, dict[str, int]]]) -> Scope:
        """The scope of every row under the filter, read directly."""
        if not documents:
            return cls(0, 0.0, [])
        average = sum(length for _, length, _ in documents) / len(documents)
        return cls(len(documents), average, [row for row in documents if row[2]])


def score_rows(terms: Mapping[str, float], scope: Scope, limit: int) -> list[tuple[int, float]]:
    """BM25 of the rows of ``scope`` (one conversation's, read directly) with statistics
    from that scope: best ``limit`` first.

    How both stores score one conversation's rows."""
    if not scope.size:
        return []
    frequency: dict[str, int] = dict.fromkeys(terms, 0)
    for _, _, counts in scope.rows:
        for word in counts:
            if word in frequency:
                frequency[word] += 1
    idf = {term: bm25.idf(scope.size, found) for term, found in frequency.items()}
    scored = [
        (rowid, bm25.score(terms, idf, counts, length, scope.average))
        for rowid, length, counts in scope.rows
        if counts
    ]
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


class LexicalStats(Backend):
    """Which query terms a lexical search reads, from cached document frequencies."""

    _term_cache: dict[str, int]
    _term_cache_time: float
    # long conversations' average length: (tenant, filter) -> (when read, average)
    _averages: dict[tuple[Any, ...], tuple[float, float]]
    #: Postings a tenant-wide query reads (its rarest terms first; a term alone past the
    #: budget is not read), and the most a left-out term may have to be read in a pair
    #: (``PAIRS``). FTS5 reads a term's doclist in one sequential pass; a server store
    #: visits a heap row per posting and keeps smaller budgets (see PostgresLexical).
    POSTINGS_BUDGET = LEXICAL_POSTINGS_BUDGET
    LONE_TERM_POSTINGS = 4 * LEXICAL_POSTINGS_BUDGET
    #: Postings of a word read, a batch at a time, to learn whether one tenant says it
    #: (:meth:`tenant_terms`; :data:`PRESENCE_POSTINGS`, :data:`PRESENCE_BATCH`).
    PRESENCE_POSTINGS = PRESENCE_POSTINGS
    PRESENCE_BATCH = PRESENCE_BATCH

    def _forget_terms(self) -> None:
        """Drop cached term statistics (after the lexical index was rebuilt)."""
        self._term_cache.clear()
        self._averages.clear()

    def _scope_average(self, key: tuple[Any, ...], read: Callable[[], float]) -> float:
        """The average length in tokens of a long conversation's rows (``read`` reads it),
        cached for ``TERM_CACHE_SECONDS`` under ``key`` (the tenant and the filter) as the
        term counts are: it moves little as a long conversation grows, and reading it
        reads every row."""
        now = time.monotonic()
        cached = self._averages.get(key)
        if cached is not None and now - cached[0] <= TERM_CACHE_SECONDS:
            return cached[1]
        average = read()
        if len(self._averages) >= SCOPE_AVERAGES:
            self._averages.clear()
        self._averages[key] = (now, average)
        return average

    @abstractmethod
    def _scope_documents(self, tenant: str, spec: FilterSpec, terms: Collection[str]) -> Scope:
        """One conversation's live rows under the filter (:class:`Scope`), with counts of
        ``terms`` only."""

    def _lexical_rows(
        self, tenant: str, spec: FilterSpec, terms: dict[str, float], limit: int
    ) -> list[tuple[int, float]]:
        """One conversation's rows scored with statistics from those rows alone."""
        return score_rows(terms, self._scope_documents(tenant, spec, terms), limit)

    def scope_terms(
        self, tenant: str, spec: FilterSpec, terms: Collection[str]
    ) -> tuple[int, dict[str, int]]:
        """How many live chunks one conversation's filter admits, and how many of them
        hold each of ``terms`` (absent terms: 0). For a search wider than one conversation,
        :meth:`tenant_terms`: whether any live chunk under the filter holds each (the
        index-wide counts are every tenant's, and counting a common word within one tenant
        reads all its postings)."""
        if spec.conversation_id is None:
            return self.tenant_terms(tenant, spec, terms)
        return _scope_counts(self._scope_documents(tenant, spec, terms), terms)

    def tenant_terms(
        self, tenant: str, spec: FilterSpec, terms: Collection[str]
    ) -> tuple[int, dict[str, int]]:
        """:meth:`scope_terms` of a search wider than one conversation, capped at 1: 1 and
        whether some live chunk of ``tenant`` under the filter holds each of ``terms``
        (1 or 0), or 0 and every term 0 where the filter admits no live chunk. What the
        question features read (an unknown name, an absent word) is only whether the scope
        says a word. A word whose first :attr:`PRESENCE_POSTINGS` postings in the index are
        none of this scope's (common in other tenants' memory) counts as said: a word
        wrongly said only lets a hit through. No term asked: ``(0, {})``, nothing read."""
        if not terms:
            return 0, {}
        if not self.scope_rowids(tenant, spec, limit=1):
            return 0, dict.fromkeys(terms, 0)
        conn = self._db()
        asked = list(dict.fromkeys(terms))
        counts = self._document_counts(conn, asked)
        indexed = [term for term in asked if counts[term]]
        said = self._said(conn, tenant, spec, indexed) if indexed else set()
        return 1, {term: int(term in said) for term in terms}

    @abstractmethod
    def scope_rowids(self, tenant: str, spec: FilterSpec, limit: int | None = None) -> list[int]:
        """The rowids of the live chunks the filter admits, at most ``limit`` of them."""

    @abstractmethod
    def _said(
        self, conn: Connection, tenant: str, spec: FilterSpec, terms: Sequence[str]
    ) -> set[str]:
        """Which of ``terms`` (each in the index) some live chunk of ``tenant`` under the
        filter holds. A backend that reads a term's postings across tenants stops after
        :attr:`PRESENCE_POSTINGS` of them and counts the term as held."""

    def lexical_in_scope(
        self,
        tenant: str,
        spec: FilterSpec,
        queries: Sequence[Sequence[str]],
        limit: int,
        terms: Collection[str],
    ) -> tuple[list[list[tuple[int, float]]], tuple[int, dict[str, int]]]:
        """:meth:`lexical` of each token list in ``queries`` and :meth:`scope_terms` of
        ``terms``: within one conversation from a single read of its rows (each would read
        the same rows; a Chinese question and its everyday synonyms are two queries).
        Tenant-wide, every list after the first is a secondary ranking (:meth:`lexical`),
        and the terms' counts are :meth:`tenant_terms`."""
        if spec.conversation_id is None:
            return [
                self.lexical(tenant, spec, tokens, limit, secondary=index > 0)
                for index, tokens in enumerate(queries)
            ], self.tenant_terms(tenant, spec, terms)
        weights = [query_terms(tokens, spec) for tokens in queries]
        wanted = {*terms, *(term for query in weights for term in query)}
        documents = self._scope_documents(tenant, spec, wanted)
        return [
            _ranked(query, documents, limit, narrow=not wanted <= query.keys()) for query in weights
        ], _scope_counts(documents, terms)

    def _document_counts(self, conn: Connection, terms: Collection[str]) -> dict[str, int]:
        """How many chunks of the whole index hold each of ``terms`` (0 for an absent one),
        cached in-process for a few minutes (``TERM_CACHE_SECONDS``): the counts only
        steer which terms and which plan a query reads, so a slightly stale one costs
        nothing in correctness."""
        now = time.monotonic()
        if now - self._term_cache_time > TERM_CACHE_SECONDS:
            self._term_cache.clear()
            self._term_cache_time = now
        missing = [t for t in terms if t not in self._term_cache]
        if missing:
            found = self._term_counts(conn, missing)
            # absent terms are not cached: a word first indexed a moment later must be found
            self._term_cache.update({term: int(count) for term, count in found.items()})
        return {t: self._term_cache.get(t, 0) for t in terms}

    def _selective_terms(
        self, conn: Connection, terms: Sequence[str], *, secondary: bool = False
    ) -> dict[str, int]:
        """The query's rarest terms within the postings budget (``POSTINGS_BUDGET``),
        each with the number of chunks holding it, rarest first; a ``secondary`` ranking's
        within ``SECONDARY_SHARE`` of both budgets.

        Document frequencies come from :meth:`_document_counts`. A term whose
        postings alone exceed the budget is not read, even as the rarest: it is in so many
        chunks that it says little (什么, "what" in a Chinese question: 14 ms of FTS5 at
        100k chunks, for 200 near-random chunks), and the vector side still answers; it can
        still be read in a pair with another left-out term (:meth:`_pairs`). Stop 35 read
        such a term up to ``LONE_TERM_POSTINGS``: at 100k chunks, recall was the same for
        600 Chinese questions and .576 -> .581 for LoCoMo's English ones (bench/README.md,
        stop 36).
        """
        counts = self._document_counts(conn, terms)
        present = sorted((count, t) for t, count in counts.items() if count)
        share = SECONDARY_SHARE if secondary else 1.0
        budget, lone = self.POSTINGS_BUDGET * share, self.LONE_TERM_POSTINGS * share
        chosen: dict[str, int] = {}
        postings = 0
        for count, term in present:
            if count > lone or postings + count > budget:
                break
            chosen[term] = count
            postings += count
        return chosen

    def _pairs(
        self, terms: Sequence[str], chosen: Collection[str], chunks: Callable[[], int]
    ) -> list[tuple[str, str]]:
        """Pairs of the ``terms`` :meth:`_selective_terms` left out (not in ``chosen``) to
        read as conjunctions (``PAIR_TERMS``, ``PAIRS``, ``PAIR_ROWS``), from the cached
        counts it read; ``chunks``: the index's size, or an upper bound of it (asked only
        when two terms or more were left out)."""
        # Chinese terms are not paired: they are a question's words and the character
        # bigrams inside them (最喜, 欢的 of 最喜欢的), which occur together far more often
        # than ``a * b / chunks`` says. 我最喜欢的菜是什么 read 最喜 AND 欢的 in 11 ms; the
        # Chinese questions' recall at 100k chunks was the same without them (bench/README.md,
        # stop 36).
        counts = (
            (self._term_cache.get(term, 0), term)
            for term in terms
            if term not in chosen and not is_mostly_cjk(term)
        )
        left = sorted(item for item in counts if 0 < item[0] <= self.LONE_TERM_POSTINGS)
        left = left[:PAIR_TERMS]
        if len(left) < 2:
            return []
        size = max(chunks(), 1)
        expected = sorted(
            (first * second / size, a, b) for (first, a), (second, b) in combinations(left, 2)
        )
        pairs: list[tuple[str, str]] = []
        rows = 0.0
        for estimate, a, b in expected:
            if len(pairs) == PAIRS or (pairs and rows + estimate > PAIR_ROWS):
                break
            pairs.append((a, b))
            rows += estimate
        return pairs


def _ranked(
    weights: dict[str, float], scope: Scope, limit: int, *, narrow: bool
) -> list[tuple[int, float]]:
    """:func:`score_rows` of ``scope`` for one query; with ``narrow``, its rows' counts
    are first cut to the query's own terms (they also count words another query or the
    scope asked for, and a row holding only those is no candidate of this one)."""
    if not weights:
        return []
    if narrow:
        rows = [
            (rowid, length, {term: n for term, n in counts.items() if term in weights})
            for rowid, length, counts in scope.rows
        ]
        scope = scope._replace(rows=rows)
    return score_rows(weights, scope, limit)


def _scope_counts(scope: Scope, terms: Collection[str]) -> tuple[int, dict[str, int]]:
    """The number of rows in ``scope`` and how many of them hold each of ``terms``."""
    found = dict.fromkeys(terms, 0)
    for _, _, counts in scope.rows:
        for term in counts:
            if term in found:
                found[term] += 1
    return scope.size, found
