"""The embedded store: one SQLite file in WAL mode, the system of record.

The shared tables and queries live in :class:`~convmem.store.base.SQLStore`. Here: one
connection per thread, one writer at a time, vectors as float32 blobs scored exactly
(tenant-wide queries go through the :class:`~convmem.store.ann.AnnIndex` sidecar), and
the lexical index ``chunks_fts`` (FTS5 over pre-segmented tokens, rowid = chunk rowid).
"""

from __future__ import annotations

import glob
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from itertools import islice
from pathlib import Path

import numpy as np

from convmem.clock import Clock
from convmem.errors import StoreError
from convmem.store.base import MIGRATIONS, SQLStore, query_terms, select_in
from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec
from convmem.store.lexical import Scope

__all__ = ["SQLiteStore", "sidecar_files"]

# Page cache per connection (one connection per thread): 8 MiB keeps a busy server's memory
# bounded (64 MiB each grew RSS by hundreds of MB under a dozen clients).
CACHE_KIB = 8192

# A conversation scope of more than SCOPE_SCAN_ROWS rows is not read row by row when the
# full-text index holds fewer than MATCHED_POSTINGS postings of the asked terms a scope
# row: only the rows that hold an asked term are read. Scanning a 5,000-chunk conversation
# read and counted every row, about 90 ms, up to twice a search. A posting costs about
# 0.5 µs to list, a scanned row about 10 µs to read and count (bench/README.md, stop 37).
MATCHED_POSTINGS = 8

LEXICAL_MIGRATIONS = {
    1: "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(tokens, "
    "tokenize = 'unicode61 remove_diacritics 0')",
    # term statistics of the lexical index, for pruning tenant-wide queries
    2: "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row')",
}


def sidecar_files(store_path: Path, digest: str = "*") -> list[Path]:
    """The HNSW files beside a SQLite store: of one tenant's index (its ``digest``) or of
    every tenant's: saved indexes, their records, records being written."""
    return list(store_path.parent.glob(f"{glob.escape(store_path.name)}.{digest}.*usearch*"))


class SQLiteStore(SQLStore):
    """The embedded store. Thread-safe: each thread gets its own connection."""

    NOT_INDEXED = "NOT INDEXED"
    #: How long a connection waits for another's write lock (milliseconds).
    BUSY_TIMEOUT_MS = 30000
    #: How long a purge waits for readers of other connections to leave the write-ahead
    #: log before it gives up emptying it (milliseconds).
    CHECKPOINT_WAIT_MS = 5000

    def __init__(
        self, path: str | Path, *, durability: str = "full", clock: Clock | None = None
    ) -> None:
        if durability not in ("full", "normal"):
            raise ValueError("durability must be 'full' (fsync each commit) or 'normal'")
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._durability = durability
        self._local = threading.local()
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._write_lock = threading.Lock()
        super().__init__(clock=clock)
        self._migrate()
        self._check_tokenizer()

    # -- connections -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def _db(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"Store {self.url} is closed; open it again with Memory.open")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._durability.upper()}")
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute(f"PRAGMA busy_timeout={self.BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self._local.conn = conn
            with self._lock:
                self._close_orphans()
                self._connections.append((threading.current_thread(), conn))
        return conn

    def _close_orphans(self) -> None:
        """Close the connections of threads that have ended (a server's thread pool and
        short-lived callers would otherwise leave one connection and its page cache each)."""
        alive = []
        for thread, conn in self._connections:
            if thread.is_alive():
                alive.append((thread, conn))
            else:
                with suppress(sqlite3.Error):  # closing is best effort
                    conn.close()
        self._connections = alive

    @property
    def open_connections(self) -> int:
        """Connections this store holds (one per live thread that used it)."""
        with self._lock:
            return len(self._connections)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # Writers of this process queue on a lock that wakes them the moment it is free;
        # SQLite's busy handler (for other processes) sleeps in steps of up to 25 ms,
        # which is what an acknowledgement would otherwise wait behind the index worker.
        conn = self._db()
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"Could not start a write on {self.url}: {exc}") from exc
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for _, conn in self._connections:
                with suppress(sqlite3.Error):  # closing is best effort
                    conn.close()
            self._connections.clear()

    def _migrations(self) -> list[str]:
        return [
            ";".join(part for part in (ddl, LEXICAL_MIGRATIONS.get(version, "")) if part)
            for version, ddl in enumerate(MIGRATIONS, start=1)
        ]

    def _size_bytes(self) -> int:
        """The store's bytes on disk: the file and its write-ahead log (rows written since
        the last checkpoint live only there)."""
        files = (self.path, self.path.with_name(self.path.name + "-wal"))
        return sum(path.stat().st_size for path in files if path.exists())

    def purges(self) -> int:
        """How many purges have run on this file. An HNSW sidecar built before the last
        one is rebuilt (:class:`~convmem.store.ann.AnnIndex`): usearch keeps a removed
        key's vector in its file."""
        row = self._db().execute("SELECT value FROM meta WHERE key='purges'").fetchone()
        return int(row[0]) if row else 0

    def _after_purge(self) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('purges', '1') ON CONFLICT (key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
            )
        # the sidecars hold the purged rows' vectors: they are rebuilt from the store
        for sidecar in sidecar_files(self.path):
            sidecar.unlink(missing_ok=True)
        conn = self._db()
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        self._truncate_wal(conn)
        conn.execute("VACUUM")
        self._truncate_wal(conn)

    def _truncate_wal(self, conn: sqlite3.Connection) -> None:
        """Copy the write-ahead log into the file and empty it: the purged rows' old pages
        are in it. Raises StoreError when a reader of another connection holds it past
        ``CHECKPOINT_WAIT_MS`` (the log is then left as it was, purged text and all)."""
        conn.execute(f"PRAGMA busy_timeout={self.CHECKPOINT_WAIT_MS}")
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            conn.execute(f"PRAGMA busy_timeout={self.BUSY_TIMEOUT_MS}")
        if busy:
            raise StoreError(
                f"Purged the rows of {self.url}, but {self.path.name}-wal still holds their "
                "text: another connection kept a read transaction open. Run the purge again "
                "when it has ended (convmem purge)"
            )

    # -- lexical index -----------------------------------------------------------------

    def _index_tokens(
        self, conn: Connection, tenant: str, rows: Sequence[tuple[int, Sequence[str]]]
    ) -> None:
        conn.executemany(
            "INSERT INTO chunks_fts (rowid, tokens) VALUES (?, ?)",
            [(rowid, " ".join(tokens)) for rowid, tokens in rows],
        )

    def _unindex(self, conn: Connection, tenant: str, rowids: Sequence[int]) -> None:
        conn.executemany("DELETE FROM chunks_fts WHERE rowid=?", [(rowid,) for rowid in rowids])

    def _clear_lexical(self, conn: Connection) -> None:
        conn.execute("DELETE FROM chunks_fts")

    def _term_counts(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        return {
            term: int(count)
            for term, count in select_in(
                conn, "SELECT term, doc FROM chunks_vocab WHERE term IN ({marks})", terms
            )
        }

    # -- search ------------------------------------------------------------------------

    def scan_vectors(
        self,
        tenant: str,
        spec: FilterSpec,
        query: np.ndarray,
        limit: int,
        *,
        model_id: str | None = None,
    ) -> list[tuple[int, float]]:
        """Exact cosine over every live chunk the filter admits (filter first, then score),
        of the query's dimension and ``model_id``'s (a store being reindexed holds two)."""
        where, params = self._live_clause(spec)
        if model_id is not None:
            where, params = f"{where} AND c.model_id = ?", [*params, model_id]
        conn = self._db()
        rowids: list[int] = []
        blobs: list[bytes] = []
        cursor = conn.execute(
            f"SELECT c.rowid, c.vector FROM chunks c WHERE {where} AND length(c.vector) = ?",
            [tenant, self.now(), *params, 4 * len(query)],
        )
        while True:
            rows = cursor.fetchmany(8192)
            if not rows:
                break
            for rowid, blob in rows:
                rowids.append(rowid)
                blobs.append(blob)
        if not rowids:
            return []
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rowids), -1)
        scores = matrix @ np.asarray(query, dtype=np.float32)
        take = min(limit, len(rowids))
        # the best ``take``; rows tied at the cut: the oldest first, as everywhere
        cut = np.partition(scores, len(scores) - take)[len(scores) - take]
        above = np.flatnonzero(scores > cut)
        tied = np.flatnonzero(scores == cut)
        if len(above) + len(tied) > take:
            order = np.argsort(np.asarray(rowids)[tied], kind="stable")
            tied = tied[order][: take - len(above)]
        hits = [(rowids[i], float(scores[i])) for i in (*above, *tied)]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits

    def lexical(
        self,
        tenant: str,
        spec: FilterSpec,
        tokens: Sequence[str],
        limit: int,
        *,
        secondary: bool = False,
    ) -> list[tuple[int, float]]:
        """BM25 over segmented tokens under the filter. Score: higher is better.

        Within one conversation the conversation's own rows are scored directly (a few
        hundred rows; BM25 statistics from the conversation; repeated query terms weigh
        more, see :func:`query_terms`). Across a tenant, FTS5 ranks
        the whole index and candidates are then checked against the filter, widening the
        window until enough pass.
        """
        weights = query_terms(tokens, spec)
        if not weights:
            return []
        if spec.conversation_id is not None:
            return self._lexical_rows(tenant, spec, weights, limit)
        conn = self._db()
        unique = list(self._selective_terms(conn, list(weights), secondary=secondary))
        if not unique:
            return []
        # FTS5's bm25() sums over the query's phrases, so a phrase given twice counts
        # twice: query weights are applied rounded to whole repeats
        match = " OR ".join(
            " OR ".join([_phrase(token)] * round(weights[token])) for token in unique
        )
        if not secondary:
            # the left-out terms' pairs (each term of a pair counts once more in bm25());
            # the largest rowid bounds the index's size
            bound = "SELECT coalesce(max(rowid), 0) FROM chunks"
            for a, b in self._pairs(
                list(weights), unique, lambda: int(conn.execute(bound).fetchone()[0])
            ):
                match += f" OR ({_phrase(a)} AND {_phrase(b)})"
        window = max(limit * 4, 200)
        while True:
            rows = conn.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
                "ORDER BY bm25(chunks_fts), rowid LIMIT ?",
                (match, window),
            ).fetchall()
            # Ranked rows are checked against the filter a ``limit`` at a time, best first:
            # each check reads the rows' pages of the chunk table, and where every row
            # passes (most tenant-wide searches) the first ``limit`` are the answer.
            hits: list[tuple[int, float]] = []
            for start in range(0, len(rows), limit):
                ranked = rows[start : start + limit]
                admitted = self.admit(tenant, spec, [rowid for rowid, _ in ranked])
                hits.extend((rowid, -float(rank)) for rowid, rank in ranked if rowid in admitted)
                if len(hits) >= limit:
                    return hits[:limit]
            if len(rows) < window:
                return hits
            window *= 4

    def _said(
        self, conn: Connection, tenant: str, spec: FilterSpec, terms: Sequence[str]
    ) -> set[str]:
        """The terms' postings in the full-text index (every tenant's), a batch of each at a
        time (each four times the last), all batches checked against the filter at once,
        until one of a term's is a live row the filter admits. In a store of one tenant
        the first batch answers. Where it does not and the filter admits at most
        :attr:`SCOPE_SCAN_ROWS` rows (a small tenant beside large ones), those rows' own
        tokens are read instead: a common word of the other tenants would cost its
        postings."""
        postings = {
            term: iter(
                conn.execute(
                    "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?",
                    (_phrase(term), self.PRESENCE_POSTINGS),
                )
            )
            for term in terms
        }
        read = dict.fromkeys(terms, 0)
        said: set[str] = set()
        size = self.PRESENCE_BATCH
        while postings:
            batches = {
                term: [int(row[0]) for row in islice(rows, size)] for term, rows in postings.items()
            }
            admitted = self.admit(
                tenant, spec, [rowid for batch in batches.values() for rowid in batch]
            )
            for term, batch in batches.items():
                read[term] += len(batch)
                if admitted.intersection(batch) or read[term] >= self.PRESENCE_POSTINGS:
                    said.add(term)
                    del postings[term]
                elif len(batch) < size:
                    del postings[term]
            if postings and size == self.PRESENCE_BATCH:
                scope = self.scope_rowids(tenant, spec, limit=self.SCOPE_SCAN_ROWS + 1)
                if len(scope) <= self.SCOPE_SCAN_ROWS:
                    left = set(postings)
                    for _, text in _tokens_of(conn, scope):
                        said.update(left.intersection(text.split(" ")))
                    return said
            size *= 4
        return said

    def _scope_documents(self, tenant: str, spec: FilterSpec, terms: Collection[str]) -> Scope:
        """One conversation's rows under the filter. Its rowids come from the
        ``chunks_live`` index alone; a scope of up to :attr:`SCOPE_SCAN_ROWS` rows then has
        every row's tokens read and counted. A larger one (a long-running conversation)
        reads only its rows that hold an asked term, found through the full-text index,
        when that index holds fewer than ``MATCHED_POSTINGS`` postings of the asked
        terms a scope row; its average length is then :meth:`_scope_average`'s. Both
        give the same scores."""
        conn = self._db()
        scope = self.scope_rowids(tenant, spec)
        wanted = set(terms)
        if not scope or not wanted:  # no row holds a term: nothing to read but the count
            return Scope(len(scope), 0.0, [])
        if len(scope) > self.SCOPE_SCAN_ROWS:
            postings = sum(self._document_counts(conn, list(wanted)).values())
            if postings <= MATCHED_POSTINGS * len(scope):
                inside = set(scope)
                match = " OR ".join(_phrase(term) for term in sorted(wanted))
                holding = [
                    rowid
                    for (rowid,) in conn.execute(
                        "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)
                    )
                    if rowid in inside
                ]
                rows = _counted(_tokens_of(conn, holding), wanted)
                where, params = self._live_clause(spec)
                average = self._scope_average(
                    (tenant, where, *params), lambda: self._scope_length(conn, scope)
                )
                return Scope(len(scope), average, [row for row in rows if row[2]])
        return Scope.of(_counted(_tokens_of(conn, scope), wanted))

    def _scope_length(self, conn: Connection, scope: list[int]) -> float:
        """The average length in tokens of the rows of ``scope`` (reads every row's tokens)."""
        total = sum(
            int(length)
            for (length,) in select_in(
                conn,
                "SELECT length(tokens) - length(replace(tokens, ' ', '')) + 1 "
                "FROM chunks_fts WHERE rowid IN ({marks})",
                scope,
            )
        )
        return total / len(scope)


def _tokens_of(conn: Connection, rowids: Sequence[int]) -> Iterable[tuple[int, str]]:
    """``(rowid, search tokens)`` of these rows of the full-text index."""
    return select_in(conn, "SELECT rowid, tokens FROM chunks_fts WHERE rowid IN ({marks})", rowids)


def _counted(
    rows: Iterable[tuple[int, str]], wanted: Collection[str]
) -> list[tuple[int, int, dict[str, int]]]:
    """Each row as ``(rowid, length in tokens, {term: count})``, counts of ``wanted`` only."""
    documents = []
    for rowid, text in rows:
        words = text.split(" ")
        counts: dict[str, int] = {}
        for word in words:
            if word in wanted:
                counts[word] = counts.get(word, 0) + 1
        documents.append((rowid, len(words), counts))
    return documents


def _phrase(token: str) -> str:
    """``token`` as an FTS5 phrase."""
    return '"' + token.replace('"', '""') + '"'
