"""The server store: PostgreSQL with pgvector, for many writers and many workers.

Same tables and queries as the embedded store (:class:`~convmem.store.base.SQLStore`);
what differs lives here:

- connections come from a psycopg 3 pool; reads are one statement on a pooled connection,
  writes one transaction;
- writers of one conversation are serialised with a transaction-scoped advisory lock, and
  workers claim jobs with ``FOR UPDATE SKIP LOCKED`` (never two on one conversation);
- vectors are pgvector values with an HNSW index (cosine) for the store's dimension, queried
  with iterative scans so filtered queries still return ``limit`` rows;
- the lexical index is a ``tsvector`` of the same segmented tokens (GIN), ranked by BM25
  computed in SQL from term frequencies and cached collection statistics.

Open with ``postgresql://user@host:port/db``; ``?schema=name`` keeps this deployment's
tables in their own schema (created if missing).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import numpy as np

from convmem.clock import Clock
from convmem.errors import InvalidInputError, StoreError
from convmem.store.base import MIGRATIONS, IndexedChunk, SQLStore
from convmem.store.chunks import ChunkWrite
from convmem.store.dbapi import Connection, Cursor
from convmem.store.filters import FilterSpec
from convmem.store.postgres_lexical import PostgresLexical, _tsvector

__all__ = ["PostgresStore", "pg_ddl"]

logger = logging.getLogger(__name__)

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: HNSW candidates per tenant-wide vector query (pgvector's ``hnsw.ef_search``).
EF_SEARCH = 200
#: HNSW graph: links per node and candidates per insert (pgvector: 16, 64). At 1 M
#: chunks ef_construction 128 lifted recall@10 from .91 to .997 (ef_search 200) and built
#: in the same time (362 s against 348 s, two parallel workers); see bench/README.md.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128

#: Draws the change numbers of chunk writes (see ``_next_change``).
CHANGE_SEQUENCE = "convmem_change_seq"

LEXICAL_MIGRATIONS = {
    1: """
    ALTER TABLE chunks ADD COLUMN IF NOT EXISTS tsv tsvector;
    ALTER TABLE chunks ADD COLUMN IF NOT EXISTS ntokens INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING gin (tsv);
    CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (job_id) WHERE status IN ('pending', 'running')
    """
}


def pg_ddl(sqlite_ddl: str) -> str:
    """The shared (SQLite-flavoured) DDL in PostgreSQL's types.

    Integers are 64-bit, reals double precision, JSON arrays ``jsonb`` and vectors
    pgvector values; ``WITHOUT ROWID`` goes, autoincrement keys become identity columns.
    """
    ddl = sqlite_ddl
    ddl = ddl.replace(
        "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    )
    ddl = ddl.replace(
        "rowid INTEGER PRIMARY KEY", "rowid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    )
    ddl = ddl.replace(") WITHOUT ROWID", ")")
    ddl = re.sub(
        r"\b(participants|speakers) TEXT NOT NULL DEFAULT '\[\]'",
        r"\1 JSONB NOT NULL DEFAULT '[]'",
        ddl,
    )
    ddl = re.sub(r"\bvector BLOB\b", "vector vector", ddl)
    ddl = re.sub(r"\bBLOB\b", "BYTEA", ddl)
    ddl = re.sub(r"\bINTEGER\b", "BIGINT", ddl)
    ddl = re.sub(r"\bREAL\b", "DOUBLE PRECISION", ddl)
    return ddl


@functools.lru_cache(maxsize=2048)
def _pg_sql(sql: str) -> str:
    """``?`` parameters to psycopg's ``%s`` (and a literal ``%`` to ``%%``), outside quotes."""
    out: list[str] = []
    quoted = False
    for char in sql:
        if char == "'":
            quoted = not quoted
            out.append(char)
        elif char == "?" and not quoted:
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


class _Rows:
    """A finished read: rows fetched before the connection went back to the pool."""

    def __init__(self, rows: list[Any], rowcount: int, description: Any = None) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self.description = description

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class _Transaction:
    """A pooled connection inside one transaction, taking ``?`` parameters."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        cursor: Cursor = self._conn.execute(_pg_sql(sql), parameters or ())
        return cursor

    def executemany(self, sql: str, parameters: Any, /) -> Cursor:
        cursor = self._conn.cursor()
        rows = list(parameters)
        if rows:
            cursor.executemany(_pg_sql(sql), rows)
        result: Cursor = cursor
        return result


class _Reader:
    """One-statement reads, each on a connection borrowed from the pool."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        with self._store._connection() as conn:
            cursor = conn.execute(_pg_sql(sql), parameters or ())
            rows = cursor.fetchall() if cursor.description else []
            return _Rows(rows, cursor.rowcount, cursor.description)

    def executemany(self, sql: str, parameters: Any, /) -> Cursor:
        with self._store._write() as conn:
            return conn.executemany(sql, parameters)


class PostgresStore(PostgresLexical, SQLStore):
    """PostgreSQL + pgvector. Thread- and process-safe; share one database among workers."""

    GREATEST = "greatest"
    TOMBSTONE_METADATA = "CAST(CAST(metadata AS jsonb) || '{\"deleted\": true}' AS text)"
    VECTOR_PARAM = "?"
    DIALECT = "postgres"
    CODE_POINTS = ' COLLATE "C"'
    native_vector_index = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        ef_search: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``ef_search``: HNSW candidates per tenant-wide vector query (or ``?ef_search=``
        in the URL; default :data:`EF_SEARCH`)."""
        try:
            import psycopg
            from pgvector.psycopg import register_vector
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise StoreError(
                "The PostgreSQL backend needs psycopg, psycopg-pool and pgvector: "
                "pip install 'convmem[postgres]'"
            ) from exc
        super().__init__(clock=clock)
        self._conninfo, self.schema, breadth = _parse_url(url)
        self._public_url = _redact(url)
        self._ef_search = ef_search or breadth or EF_SEARCH
        self._closed = False
        self._stats: tuple[float, int, float] = (0.0, 0, 0.0)
        self._stats_lock = threading.Lock()
        self._common: tuple[float, list[dict[str, int]]] = (0.0, [])
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                if self.schema:
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        except psycopg.Error as exc:
            raise StoreError(f"Could not open {self._public_url}: {exc}".strip()) from exc

        def configure(conn: Any) -> None:
            conn.autocommit = True
            register_vector(conn)
            if self.schema:
                conn.execute(f'SET search_path TO "{self.schema}", public')

        self._pool = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=max(2, pool_size),
            configure=configure,
            open=True,
            name="convmem",
        )
        self._pool.wait(timeout=30.0)
        self._migrate()
        self._check_tokenizer()
        self._dimension = self._recorded_dimension()

    # -- connections -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._public_url

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        if self._closed:
            raise StoreError(f"Store {self.url} is closed; open it again with Memory.open")
        with self._pool.connection() as conn:
            yield conn

    def _db(self) -> Connection:
        return _Reader(self)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._connection() as conn, conn.transaction():
            yield _Transaction(conn)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()

    def _migrations(self) -> list[str]:
        return [
            ";".join(part for part in (pg_ddl(ddl), LEXICAL_MIGRATIONS.get(version, "")) if part)
            for version, ddl in enumerate(MIGRATIONS, start=1)
        ]

    def _migrate(self) -> None:
        super()._migrate()
        with self._write() as conn:
            self._lock_schema(conn)
            # in the store's own schema: a bare name would find one in public first
            home = self.schema or conn.execute("SELECT current_schema()").fetchone()[0]
            self._sequence = f'"{home}".{CHANGE_SEQUENCE}'
            if conn.execute(f"SELECT to_regclass('{self._sequence}')").fetchone()[0] is None:
                # go on from the counter row that stores of earlier releases kept in meta
                row = conn.execute("SELECT value FROM meta WHERE key='change_seq'").fetchone()
                start = int(row[0]) + 1 if row else 1
                conn.execute(f"CREATE SEQUENCE {self._sequence} START WITH {start}")

    def _next_change(self, conn: Connection) -> int:
        """From a sequence, not the ``meta`` row: concurrent writers do not queue on one
        row, and on Citus an indexing transaction stays on the tenant's node (``meta`` is a
        reference table there, so writing it made every commit two-phase on every node).
        Numbers are handed out in call order, not commit order; only the SQLite sidecar
        needs commit order, and it never runs on a server store."""
        return int(conn.execute(f"SELECT nextval('{self._sequence}')").fetchone()[0])

    def latest_change(self) -> int:
        last, called = (
            self._db().execute(f"SELECT last_value, is_called FROM {self._sequence}").fetchone()
        )
        return int(last) if called else int(last) - 1

    def _lock_schema(self, conn: Connection) -> None:
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
            (f"convmem-schema:{self.schema}",),
        )

    def _lock_model(self, conn: Connection, *, exclusive: bool) -> None:
        kind = "" if exclusive else "_shared"
        conn.execute(
            f"SELECT pg_advisory_xact_lock{kind}(hashtextextended(?, 0))",
            (f"convmem-model:{self.schema}",),
        )

    def _conversation_key(self, tenant: str, conversation_id: str) -> str:
        """The advisory-lock key of one conversation (writers and claims share it)."""
        return f"{self.schema}\x1f{tenant}\x1f{conversation_id}"

    def _lock_conversation(self, conn: Connection, tenant: str, conversation_id: str) -> None:
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
            (self._conversation_key(tenant, conversation_id),),
        )

    def _size_bytes(self) -> int:
        """Bytes of this store's tables (indexes and toast included), not of the whole
        database: one server often holds several stores (``?schema=``)."""
        row = (
            self._db()
            .execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"
            )
            .fetchone()
        )
        return int(row[0])

    #: The tables whose rows hold memory text (story states, job errors included).
    TEXT_TABLES = ("chunks", "turns", "notes", "marks", "pins", "jobs", "entity_states")

    def _after_purge(self) -> None:
        # A deleted row's text stays in its dead tuple, and a plain VACUUM only marks the
        # space free: the bytes stay in the table's and its indexes' files until they are
        # overwritten. VACUUM FULL writes each table anew (under its exclusive lock).
        with self._connection() as conn:
            for table in self.TEXT_TABLES:
                conn.execute(f"VACUUM FULL {table}")

    # -- meta and jobs -----------------------------------------------------------------

    def _recorded_dimension(self) -> int | None:
        recorded = self.embedding_model()
        return recorded[1] if recorded else None

    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        """Record the model and keep one HNSW index, for its dimension."""
        super().set_embedding_model(model_id, dimension)
        self._dimension = dimension
        self.build_vector_index()

    @staticmethod
    def _vector_indexes(conn: Connection) -> list[str]:
        return [
            name
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND "
                "tablename = 'chunks' AND indexname LIKE 'chunks\\_hnsw\\_%'"
            )
        ]

    def drop_vector_index(self) -> None:
        """Drop the HNSW index: a bulk load runs several times faster without it."""
        with self._write() as conn:
            self._lock_schema(conn)
            for name in self._vector_indexes(conn):
                conn.execute(f"DROP INDEX IF EXISTS {name}")

    def build_vector_index(
        self, *, memory: str = "1GB", m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION
    ) -> None:
        """(Re)build the HNSW index of the recorded dimension if it is missing.

        ``memory`` is ``maintenance_work_mem`` for the build; a graph that does not fit
        builds far slower (PostgreSQL logs a notice when that happens). ``m`` (links per
        node) and ``ef_construction`` (candidates per insert) trade build and insert time
        for recall; they are fixed when the index is built.
        """
        if not (2 <= m <= 100 and 4 <= ef_construction <= 1000 and ef_construction >= 2 * m):
            raise InvalidInputError(
                "HNSW needs 2 <= m <= 100 and 2*m <= ef_construction <= 1000 (pgvector)",
                field="ef_construction",
            )
        dimension = self._dimension
        if dimension is None:
            return
        with self._write() as conn:
            self._lock_schema(conn)
            for name in self._vector_indexes(conn):
                if name != f"chunks_hnsw_{dimension}":
                    conn.execute(f"DROP INDEX IF EXISTS {name}")
            if not re.fullmatch(r"\d+[kMG]B", memory):
                raise InvalidInputError("memory must look like 512MB or 2GB", field="memory")
            conn.execute(f"SET LOCAL maintenance_work_mem = '{memory}'")
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS chunks_hnsw_{dimension} ON chunks USING hnsw "
                f"((CAST(vector AS vector({dimension}))) vector_cosine_ops) "
                f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) "
                f"WHERE vector_dims(vector) = {dimension}"
            )

    def _upsert_chunk(
        self, conn: Connection, tenant: str, item: IndexedChunk, write: ChunkWrite
    ) -> bool:
        """One statement per chunk: insert, or overwrite in place with its ``tsvector``."""
        columns = [c.strip() for c in self.CHUNK_COLUMNS.split(",")]
        extra = ["tsv", "ntokens", "tenant", "chunk_id", "deleted"]
        updates = ", ".join(f"{c} = excluded.{c}" for c in [*columns, "tsv", "ntokens", "deleted"])
        values = self._chunk_values(item, write)
        row = conn.execute(
            f"INSERT INTO chunks ({', '.join(columns + extra)}) VALUES "
            f"({', '.join(['?'] * len(columns))}, CAST(? AS tsvector), ?, ?, ?, 0) "
            f"ON CONFLICT (tenant, chunk_id) DO UPDATE SET {updates} "
            "RETURNING (xmax <> 0) AS existed",
            (*values, _tsvector(item.tokens), len(item.tokens), tenant, item.record.chunk_id),
        ).fetchone()
        return bool(row[0])

    READY_JOBS = SQLStore.READY_JOBS + " FOR UPDATE SKIP LOCKED"

    def _claimable(
        self, conn: Connection, rows: list[Any], worker_id: str, now: float
    ) -> list[Any]:
        """Candidates whose conversation this worker can hold (``SKIP LOCKED`` picked them).

        A conversation is only ever worked by one worker: its advisory lock is tried (a
        busy conversation is skipped, not waited for) and, once held, the check for a
        live claim by another worker is repeated against the newest committed state.
        """
        usable: dict[tuple[str, str], bool] = {}
        for row in rows:
            key = (row[1], row[2])
            if key in usable:
                continue
            got = conn.execute(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))",
                (self._conversation_key(*key),),
            ).fetchone()[0]
            busy = (
                got
                and conn.execute(
                    "SELECT 1 FROM jobs WHERE tenant=? AND conversation_id=? AND "
                    "status='running' AND lease_until >= ? AND claimed_by <> ? LIMIT 1",
                    (key[0], key[1], now, worker_id),
                ).fetchone()
            )
            usable[key] = bool(got) and not busy
        return [row for row in rows if usable[(row[1], row[2])]]

    # -- vectors -----------------------------------------------------------------------

    def _vector_param(self, vector: np.ndarray) -> Any:
        return np.asarray(vector, dtype=np.float32)

    def _vector_bytes(self, stored: Any) -> bytes:
        values = stored.to_numpy() if hasattr(stored, "to_numpy") else stored
        return np.asarray(values, dtype=np.float32).tobytes()

    def scan_vectors(
        self,
        tenant: str,
        spec: FilterSpec,
        query: np.ndarray,
        limit: int,
        *,
        model_id: str | None = None,
        exact: bool = False,
    ) -> list[tuple[int, float]]:
        """Nearest live chunks by cosine through the HNSW index (``exact``: a full scan).

        Iterative index scans (pgvector 0.8) keep reading the graph until ``limit`` rows
        pass the filter, so a selective filter does not starve the result.
        """
        where, params = self._live_clause(spec)
        if model_id is not None:  # a store part way through a reindex holds two models
            where, params = f"{where} AND c.model_id = ?", [*params, model_id]
        vector = np.asarray(query, dtype=np.float32)
        # The index holds only vectors of its dimension (the predicate below), so a
        # re-embedding with another model can rewrite rows while the old index exists.
        # Exact: ordering by the bare column, which no index holds, makes PostgreSQL score
        # every admitted row. One conversation (a few hundred rows, found through its
        # b-tree index) is always scored exactly: walking the graph for them is far slower.
        scan_all = exact or spec.conversation_id is not None
        # rows of the query's dimension (a store being reindexed holds two; pgvector
        # refuses to compare vectors of different dimensions)
        column, same_model = "c.vector", f"vector_dims(c.vector) = {int(vector.shape[0])}"
        if not scan_all and self._dimension is not None and vector.shape == (self._dimension,):
            column = f"CAST(c.vector AS vector({self._dimension}))"
            same_model = f"vector_dims(c.vector) = {self._dimension}"
        # ordered by the selected distance: the expression again, with its own parameter,
        # was computed again for every row (5,000 rows 48 -> 36 ms). A scan breaks ties
        # by the oldest row, as SQLite does; the graph gives its own order.
        sql = (
            f"SELECT c.rowid, {column} <=> ? AS distance FROM chunks c WHERE {where} "
            f"AND {same_model} ORDER BY distance{', c.rowid' if scan_all else ''} LIMIT ?"
        )
        values = [vector, tenant, self.now(), *params, limit]
        if scan_all:  # one statement: no transaction to open and commit (two round trips)
            rows = self._db().execute(sql, values).fetchall()
        else:
            with self._write() as conn:  # SET LOCAL lasts until the end of the transaction
                conn.execute(f"SET LOCAL hnsw.ef_search = {max(self._ef_search, min(limit, 1000))}")
                conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                rows = conn.execute(sql, values).fetchall()
        hits = [(int(rowid), 1.0 - float(distance)) for rowid, distance in rows]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))  # ties: oldest row first, as everywhere
        return hits


#: convmem's own options in a ``postgresql://`` URL, taken out before libpq sees it.
OWN_OPTIONS = ("schema", "ef_search")


def _parse_url(url: str) -> tuple[str, str | None, int | None]:
    """libpq conninfo from a ``postgresql://`` URL, with convmem's options taken out:
    ``schema`` (the store's tables live there) and ``ef_search`` (HNSW search breadth)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = query.pop("schema", None)
    if schema is not None and not SCHEMA_NAME.match(schema):
        raise InvalidInputError(
            f"schema {schema!r} is not a plain lower-case identifier; use letters, digits and _",
            field="url",
        )
    breadth = query.pop("ef_search", None)
    ef_search = None
    if breadth is not None:
        if not breadth.isdigit() or not 1 <= int(breadth) <= 1000:
            raise InvalidInputError(
                f"ef_search {breadth!r} must be a whole number from 1 to 1000 "
                "(pgvector's limit), e.g. ?ef_search=400",
                field="url",
            )
        ef_search = int(breadth)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    # libpq decodes %XX in a URL but not "+": a space must travel as %20
    encoded = urlencode(query, quote_via=quote)
    return urlunsplit((scheme, parts.netloc, parts.path, encoded, "")), schema, ef_search


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url
