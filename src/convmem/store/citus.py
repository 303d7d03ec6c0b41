"""PostgreSQL with Citus: the server store's tables distributed over worker nodes by tenant.

When the database has the ``citus`` extension, :class:`CitusStore` creates the same tables
as :class:`~convmem.store.postgres.PostgresStore` and then distributes them:

- every table with a ``tenant`` column is hash-distributed by ``tenant``, all colocated
  with ``turns``: one tenant's turns, jobs, chunks (with their vectors and ``tsvector``),
  marks, pins and notes live in one shard group on one worker, and every query that names
  the tenant is routed to that one node;
- ``meta`` (schema version, embedding model, change counter) and ``api_keys`` (looked up
  by key hash, across tenants) are reference tables, copied to every node.

Citus refuses unique constraints that leave out the distribution column, so the identity
keys ``jobs.job_id`` and ``chunks.rowid`` become ``(tenant, job_id)`` and
``(tenant, rowid)`` (the identity values stay globally unique; the coordinator draws them).
Clients connect to the coordinator; the advisory locks that serialise writers of one
conversation are taken there. See docs/deployment.md for what is measured and what is
still routed to every shard.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from convmem.clock import Clock
from convmem.errors import StoreError
from convmem.store.base import SQLStore
from convmem.store.dbapi import Connection
from convmem.store.postgres import OWN_OPTIONS, PostgresStore
from convmem.store.postgres_lexical import COMMON_TERMS_SQL

__all__ = ["CitusStore", "citus_ddl", "has_citus", "open_postgres"]

logger = logging.getLogger(__name__)

#: Small global tables, copied to every node.
REFERENCE_TABLES = ("meta", "api_keys")
#: The table the other distributed tables are colocated with.
ANCHOR_TABLE = "turns"
#: Run on every shard of chunks (``%s``: the shard): ``{term: rows}`` of the terms the
#: shard's statistics of ``tsv`` list as most common.
_IDENTITY_KEY = re.compile(
    r"(?P<column>\w+) BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY(?P<rest>.*?)\n\s*\)(?=;|\s*$)",
    re.DOTALL,
)


def citus_ddl(pg_ddl: str) -> str:
    """PostgreSQL DDL (:func:`~convmem.store.postgres.pg_ddl`) that Citus can distribute.

    An identity primary key (``jobs.job_id``, ``chunks.rowid``) becomes a primary key on
    ``(tenant, column)``: a distributed table's unique constraints must hold the
    distribution column.
    """

    def composite(match: re.Match[str]) -> str:
        column, rest = match.group("column"), match.group("rest")
        body = rest.rstrip()
        return (
            f"{column} BIGINT GENERATED ALWAYS AS IDENTITY{body},\n"
            f"        PRIMARY KEY (tenant, {column})\n    )"
        )

    # A CREATE TABLE of the shared DDL closes with ")" on a line of its own, before ";" or
    # the end of the migration: the first such close after the identity column ends it.
    return _IDENTITY_KEY.sub(composite, pg_ddl)


def has_citus(conninfo: str) -> bool:
    """Whether the database behind ``conninfo`` has the ``citus`` extension."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone()
    return row is not None


def open_postgres(url: str, *, clock: Clock | None = None) -> PostgresStore:
    """A :class:`CitusStore` when the database has Citus, else a :class:`PostgresStore`."""
    import psycopg

    conninfo = _without_options(url)
    try:
        citus = has_citus(conninfo)
    except psycopg.Error as exc:
        raise StoreError(f"Could not open {_redact_url(url)}: {exc}".strip()) from exc
    return CitusStore(url, clock=clock) if citus else PostgresStore(url, clock=clock)


class CitusStore(PostgresStore):
    """PostgreSQL + pgvector + Citus: tables distributed by tenant over the workers."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        ef_search: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        # SET LOCAL (hnsw.ef_search, iterative scans, maintenance_work_mem) must reach the
        # workers that run the shard queries; Citus forwards them only when asked to.
        # (Spaces in options travel as %20: libpq decodes that, not '+'.)
        super().__init__(
            _with_options(url, "--citus.propagate_set_commands=local"),
            pool_size=pool_size,
            ef_search=ef_search,
            clock=clock,
        )
        self._public_url = _redact_url(url)

    # -- schema ------------------------------------------------------------------------

    def _migrations(self) -> list[str]:
        return [citus_ddl(ddl) for ddl in super()._migrations()]

    def _migrate(self) -> None:
        super()._migrate()
        self._distribute()

    def _distribute(self) -> None:
        """Distribute (or replicate) every table of the schema that Citus does not hold yet.

        Runs after the migrations, in its own transaction: tables a later schema version
        adds are distributed too, and a process that stopped in between leaves local
        tables that the next open distributes. The schema lock keeps two processes from
        distributing one table twice.
        """
        with self._write() as conn:
            self._lock_schema(conn)
            local = conn.execute(
                "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE "
                "a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped) "
                "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
                "AND c.relkind = 'r' AND NOT EXISTS "
                "(SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid) "
                "ORDER BY c.relname <> ?, c.relname",
                (ANCHOR_TABLE,),
            ).fetchall()
            for name, has_tenant in local:
                table = self._qualified(name)
                if name in REFERENCE_TABLES:
                    conn.execute("SELECT create_reference_table(?)", (table,))
                elif not has_tenant:
                    raise StoreError(
                        f"Table {table} has no tenant column, so Citus cannot distribute it "
                        "by tenant; add it to REFERENCE_TABLES if it is small and global"
                    )
                elif name == ANCHOR_TABLE:
                    # shards: the database's citus.shard_count (32 unless set)
                    conn.execute(
                        "SELECT create_distributed_table(?, 'tenant', colocate_with => 'none')",
                        (table,),
                    )
                else:
                    conn.execute(
                        "SELECT create_distributed_table(?, 'tenant', colocate_with => ?)",
                        (table, self._qualified(ANCHOR_TABLE)),
                    )
                logger.info("distributed %s over the Citus workers", table)

    def _qualified(self, table: str) -> str:
        return f'"{self.schema}".{table}' if self.schema else table

    # -- jobs --------------------------------------------------------------------------

    #: Citus cannot lock rows of a query over several shards (``FOR UPDATE`` needs a
    #: single-shard query), so ready jobs are read without row locks; see _claimable.
    READY_JOBS = SQLStore.READY_JOBS

    def _claimable(
        self, conn: Connection, rows: list[Any], worker_id: str, now: float
    ) -> list[Any]:
        """Candidates still ready once this worker holds their conversation's lock.

        Without row locks two workers may read the same candidates, and one may claim,
        run and finish a job before the other gets to it. The conversation's advisory
        lock (tried, as on PostgreSQL) and the check for live claims under it keep one
        conversation to one worker; what ``FOR UPDATE`` re-checked on PostgreSQL (the
        row is still ready in its newest version) is read again here, under the lock,
        which every claim and every index write of the conversation takes.
        """
        usable = super()._claimable(conn, rows, worker_id, now)
        if not usable:
            return []
        still: set[tuple[str, int]] = set()
        for tenant in sorted({row[1] for row in usable}):
            ids = [row[0] for row in usable if row[1] == tenant]
            still.update(
                (tenant, job_id)
                for (job_id,) in conn.execute(
                    "SELECT job_id FROM jobs WHERE tenant = ? AND job_id = ANY(?) AND "
                    "((status = 'pending' AND next_retry_at <= ?) OR "
                    "(status = 'running' AND lease_until < ?))",
                    (tenant, ids, now, now),
                )
            )
        return [row for row in usable if (row[1], row[0]) in still]

    # -- sizes and statistics ----------------------------------------------------------

    def _size_bytes(self) -> int:
        """Bytes of this store's tables over every node (shards, indexes, toast)."""
        row = (
            self._db()
            .execute(
                "SELECT coalesce(sum(citus_total_relation_size(p.logicalrelid)), 0) "
                "FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
                "WHERE c.relnamespace = current_schema()::regnamespace"
            )
            .fetchone()
        )
        return int(row[0])

    def _read_common_terms(self) -> list[dict[str, Any]]:
        """Each shard's statistics, in one statement (the coordinator's table is an empty
        shell without any)."""
        return [
            json.loads(result)
            for (result,) in self._db().execute(
                "SELECT result FROM run_command_on_shards(?, ?) WHERE success",
                (self._qualified("chunks"), COMMON_TERMS_SQL),
            )
        ]

    def _row_estimate(self, reader: Connection) -> float:
        """The shards' own estimates summed (the coordinator's table is an empty shell)."""
        row = reader.execute(
            "SELECT coalesce(sum(greatest(result::float8, 0)), 0) "
            "FROM run_command_on_shards(?, ?) WHERE success",
            (
                self._qualified("chunks"),
                "SELECT reltuples FROM pg_class WHERE oid = '%s'::regclass",
            ),
        )
        return float(row.fetchone()[0])


def _without_options(url: str) -> str:
    """The URL libpq accepts: convmem's own options (``schema``, ``ef_search``) taken out."""
    parts = urlsplit(url)
    query = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in OWN_OPTIONS
    ]
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(query, quote_via=quote), ""))


def _with_options(url: str, option: str) -> str:
    """``url`` with ``option`` added to libpq's ``options``."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = " ".join([v for k, v in query if k == "options"] + [option])
    query = [(k, v) for k, v in query if k != "options"] + [("options", options)]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return urlunsplit(
            parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@"))
        )
    return url
