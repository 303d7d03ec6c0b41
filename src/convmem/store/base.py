"""The system of record, written once for every SQL backend.

Tables (see docs/storage.md): ``meta`` (schema version, embedding model and dimension),
``turns`` (the event log), ``conversations`` (indexing frontier and revision), ``jobs``
(index jobs with retry state), ``chunks`` (records, vectors, governance columns), the
governance, key and story tables, and the lexical index.

:class:`SQLStore` holds every query both backends share (written with ``?`` parameters
and SQL that SQLite and PostgreSQL both accept); :class:`~convmem.store.sqlite.SQLiteStore`
and :class:`~convmem.store.postgres.PostgresStore` add connections, the lexical index,
vector search and the few statements that differ. Each public method is one transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from convmem.errors import NotFoundError, StoreError, TurnConflictError
from convmem.governance import NoteDraft, PinRecord
from convmem.models import ChunkRecord, JobInfo, Turn
from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec, dumps_list, to_sql
from convmem.store.governance import GOVERNANCE_SCHEMA, GovernanceTables, MarkWrite
from convmem.store.keys import KEYS_SCHEMA, KeyTables
from convmem.store.story import STORY_SCHEMA, StoryTables
from convmem.text import tokenize, tokenizer_signature

__all__ = [
    "ClaimedJob",
    "ConversationState",
    "IndexBatch",
    "IndexedChunk",
    "SQLStore",
    "StoredTurn",
    "text_digest",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 5

MIGRATIONS: list[str] = [
    # 1: initial schema
    """
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS turns (
        tenant TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        turn_id_is_int INTEGER NOT NULL,
        role TEXT NOT NULL,
        name TEXT,
        text TEXT,
        text_sha256 TEXT NOT NULL,
        ts TEXT NOT NULL,
        meta TEXT NOT NULL DEFAULT '{}',
        deleted INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        PRIMARY KEY (tenant, conversation_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS conversations (
        tenant TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        frontier_start INTEGER,
        frontier_end INTEGER,
        rewind_to INTEGER,
        revision INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER,
        indexed_seq INTEGER,
        PRIMARY KEY (tenant, conversation_id)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS jobs (
        job_id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        min_seq INTEGER NOT NULL,
        max_seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        error_code TEXT,
        error_message TEXT,
        next_retry_at REAL NOT NULL,
        claimed_by TEXT,
        lease_until REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS jobs_ready ON jobs (status, next_retry_at);
    CREATE INDEX IF NOT EXISTS jobs_conversation ON jobs (tenant, conversation_id, status);
    CREATE TABLE IF NOT EXISTS chunks (
        rowid INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        chunk_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        start_seq INTEGER NOT NULL,
        end_seq INTEGER NOT NULL,
        chunk_version INTEGER NOT NULL,
        text TEXT,
        text_sha256 TEXT,
        metadata TEXT NOT NULL,
        participants TEXT NOT NULL DEFAULT '[]',
        speakers TEXT NOT NULL DEFAULT '[]',
        intent_tag TEXT,
        ts_start REAL,
        ts_end REAL,
        deleted INTEGER NOT NULL DEFAULT 0,
        provisional INTEGER NOT NULL DEFAULT 0,
        origin TEXT NOT NULL,
        importance REAL,
        category TEXT,
        expires_at REAL,
        pinned INTEGER NOT NULL DEFAULT 0,
        requires_confirmation INTEGER NOT NULL DEFAULT 0,
        vector BLOB,
        model_id TEXT,
        updated_at REAL NOT NULL,
        change_seq INTEGER NOT NULL,
        UNIQUE (tenant, chunk_id)
    );
    CREATE INDEX IF NOT EXISTS chunks_conversation ON chunks (tenant, conversation_id, deleted, end_seq);
    CREATE INDEX IF NOT EXISTS chunks_change ON chunks (tenant, change_seq);
    CREATE TABLE IF NOT EXISTS removed_rows (
        tenant TEXT NOT NULL, row INTEGER NOT NULL, change_seq INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS removed_rows_change ON removed_rows (tenant, change_seq)
    """,
    # 2: term statistics of the lexical index (backend-specific, see LEXICAL_MIGRATIONS)
    "",
    # 3: Stage 2 governance: marks, pins, notes, tenant policies
    GOVERNANCE_SCHEMA,
    # 4: API keys of the HTTP service
    KEYS_SCHEMA,
    # 5: entity state snapshots of story projects
    STORY_SCHEMA,
]

UPSERT_META = "ON CONFLICT (key) DO UPDATE SET value = excluded.value"

# Tenant-wide BM25 reads every posting of its terms. Terms are taken rarest first until
# their postings reach this budget (the rarest is always kept); the common words left out
# add the least to the ranking and most of the cost.
LEXICAL_POSTINGS_BUDGET = 8000
# Distinct query terms read by an index-wide lexical search, and by one scored over a
# single conversation's rows (cheap: a few hundred rows, so a whole dialogue window fits).
QUERY_TERMS = 64
CONVERSATION_QUERY_TERMS = 256
TERM_CACHE_SECONDS = 300.0


@dataclass(frozen=True)
class StoredTurn:
    seq: int
    turn_id: int | str
    role: str
    name: str | None
    text: str
    timestamp: datetime
    accepted_at: float = 0.0


@dataclass(frozen=True)
class ConversationState:
    frontier: tuple[int, int] | None
    rewind_to: int | None
    revision: int
    last_seq: int | None
    indexed_seq: int | None


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    tenant: str
    conversation_id: str
    min_seq: int
    max_seq: int
    attempts: int


@dataclass(frozen=True)
class IndexedChunk:
    """A chunk ready for the store: record, its vector and lexical tokens."""

    record: ChunkRecord
    vector: np.ndarray
    tokens: Sequence[str]


@dataclass(frozen=True)
class IndexBatch:
    """One conversation's re-planned chunks, as the worker hands them to the store."""

    tenant: str
    conversation_id: str
    expected_revision: int
    supersede_after: int
    chunks: Sequence[IndexedChunk]
    frontier: tuple[int, int] | None
    indexed_seq: int | None
    job_ids: Sequence[int]
    # Governance derived in the same pass (None: written by a caller without marking).
    marks_from: int | None = None
    marks: Sequence[MarkWrite] = ()
    pins: Sequence[PinRecord] = ()
    notes: Sequence[NoteDraft] = ()


def text_digest(text: str) -> str:
    """sha256 of the UTF-8 text: how stored text is fingerprinted (vector reuse, duplicates)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> float:
    return time.time()


def query_terms(tokens: Sequence[str], spec: FilterSpec) -> dict[str, float]:
    """The query's distinct terms with their BM25 query weights.

    A term said n times weighs ``1 + ln n``: a long query (a dialogue window) keeps what
    it keeps coming back to without letting one word drown the rest. At most
    ``CONVERSATION_QUERY_TERMS`` are kept when the filter names one conversation, else
    ``QUERY_TERMS``; past that the most repeated terms stay, earlier ones first among equals.
    """
    limit = CONVERSATION_QUERY_TERMS if spec.conversation_id is not None else QUERY_TERMS
    counts: dict[str, int] = {}
    for token in tokens:
        if token:
            counts[token] = counts.get(token, 0) + 1
    kept = sorted(counts, key=lambda term: -counts[term])[:limit]  # stable: first seen first
    return {term: 1.0 + math.log(counts[term]) for term in kept}


def worker_identity() -> str:
    """``host:pid:thread`` of the calling thread."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


IN_BATCH = 500


def _select_in(
    conn: Connection,
    sql: str,
    values: Sequence[Any],
    *,
    before: Sequence[Any] = (),
    after: Sequence[Any] = (),
) -> list[Any]:
    """Run ``sql`` (with one ``{marks}`` placeholder list) over ``values`` in batches."""
    rows: list[Any] = []
    for start in range(0, len(values), IN_BATCH):
        batch = list(values[start : start + IN_BATCH])
        rows.extend(
            conn.execute(
                sql.replace("{marks}", ",".join("?" * len(batch))), [*before, *batch, *after]
            )
        )
    return rows


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SQLStore(GovernanceTables, KeyTables, StoryTables):
    """The shared system of record; subclasses supply connections and the search indexes.

    Hooks a backend provides: ``_db`` (a connection for one-statement reads), ``_write``
    (a transaction), ``_lock_conversation`` (serialise writers of one conversation),
    ``_next_change``, the lexical index (``_index_tokens``, ``_unindex``,
    ``_clear_lexical``, ``lexical``), ``_vector_param``/``_vector_bytes`` (how vectors
    are stored), ``scan_vectors``, ``admit``, ``load_rows`` and ``_after_purge``.
    """

    #: SQL of the larger of two values (``max`` in SQLite, ``greatest`` in PostgreSQL).
    GREATEST = "max"
    #: SQL that sets ``deleted`` in the JSON metadata column of a tombstoned chunk.
    TOMBSTONE_METADATA = "json_set(metadata, '$.deleted', json('true'))"
    #: How a vector parameter is written in SQL.
    VECTOR_PARAM = "?"
    #: Keeps SQLite's planner off the tenant index when looking up a handful of rowids.
    NOT_INDEXED = ""
    #: Which SQL the filters compile to.
    DIALECT = "sqlite"
    #: True when the backend answers vector queries from its own index (no AnnIndex).
    native_vector_index = False

    def __init__(self) -> None:
        # document frequencies of query terms, see _selective_terms
        self._term_cache: dict[str, int] = {}
        self._term_cache_time = time.monotonic()

    # -- what a backend provides -----------------------------------------------------

    @property
    def url(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _migrations(self) -> list[str]:
        """DDL per schema version (index i: version i + 1)."""
        raise NotImplementedError

    def _lock_schema(self, conn: Connection) -> None:
        """Keep two processes from migrating at once (SQLite's write lock already does)."""

    def _index_tokens(self, conn: Connection, rows: Sequence[tuple[int, Sequence[str]]]) -> None:
        raise NotImplementedError

    def _unindex(self, conn: Connection, rowids: Sequence[int]) -> None:
        raise NotImplementedError

    def _clear_lexical(self, conn: Connection) -> None:
        raise NotImplementedError

    def _vector_param(self, vector: np.ndarray) -> Any:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def _vector_bytes(self, stored: Any) -> bytes:
        return bytes(stored)

    def _after_purge(self) -> None:
        """Give the freed space back (VACUUM and the like), outside the transaction."""

    def _size_bytes(self) -> int:
        raise NotImplementedError

    # -- schema ------------------------------------------------------------------------

    def _migrate(self) -> None:
        migrations = self._migrations()
        with self._write() as conn:
            self._lock_schema(conn)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"Store {self.url} has schema version {current}, newer than this convmem "
                    f"({SCHEMA_VERSION}); upgrade convmem"
                )
            for version in range(current + 1, len(migrations) + 1):
                for statement in migrations[version - 1].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?) " + UPSERT_META,
                    (str(version),),
                )
                logger.info("migrated %s to schema version %d", self.url, version)

    def _check_tokenizer(self) -> None:
        """Rebuild the lexical index when search tokens changed since it was written."""
        row = self._db().execute("SELECT value FROM meta WHERE key='tokenizer_version'").fetchone()
        signature = tokenizer_signature()
        if row is not None and row[0] == signature:
            return
        began = time.perf_counter()
        count = 0
        with self._write() as conn:
            rows = conn.execute(
                "SELECT rowid, text FROM chunks WHERE deleted=0 AND text IS NOT NULL"
            ).fetchall()
            count = len(rows)
            if rows:
                self._clear_lexical(conn)
                for start in range(0, len(rows), 1000):
                    self._index_tokens(
                        conn,
                        [(rowid, tokenize(text)) for rowid, text in rows[start : start + 1000]],
                    )
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('tokenizer_version', ?) " + UPSERT_META,
                (signature,),
            )
        self._forget_terms()
        if count:
            logger.info(
                "rebuilt the lexical index of %s for tokenizer %s: %d chunks in %.1fs",
                self.url,
                signature,
                count,
                time.perf_counter() - began,
            )

    def _forget_terms(self) -> None:
        """Drop cached term statistics (after the lexical index was rebuilt)."""
        self._term_cache.clear()

    def _term_counts(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        """Documents holding each term (terms in no document may be left out)."""
        raise NotImplementedError

    def _selective_terms(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        """The query's rarest terms within the postings budget (see LEXICAL_POSTINGS_BUDGET),
        each with the number of chunks holding it, rarest first.

        Document frequencies are cached in-process for a few minutes: they only steer which
        terms are read, so a slightly stale count costs nothing in correctness. A term whose
        postings alone exceed four budgets is never read (it is in so many chunks that it
        says little, and the vector side still answers).
        """
        now = time.monotonic()
        if now - self._term_cache_time > TERM_CACHE_SECONDS:
            self._term_cache.clear()
            self._term_cache_time = now
        missing = [t for t in terms if t not in self._term_cache]
        if missing:
            found = self._term_counts(conn, missing)
            # absent terms are not cached: a word first indexed a moment later must be found
            self._term_cache.update({term: int(count) for term, count in found.items()})
        counts = {t: self._term_cache.get(t, 0) for t in terms}
        present = sorted((count, t) for t, count in counts.items() if count)
        chosen: dict[str, int] = {}
        postings = 0
        for count, term in present:
            if count > 4 * LEXICAL_POSTINGS_BUDGET or (
                chosen and postings + count > LEXICAL_POSTINGS_BUDGET
            ):
                break
            chosen[term] = count
            postings += count
        return chosen

    # -- meta --------------------------------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        rows = dict(
            self._db()
            .execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim')"
            )
            .fetchall()
        )
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["embedding_dim"])

    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('embedding_model', ?) " + UPSERT_META,
                (model_id,),
            )
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('embedding_dim', ?) " + UPSERT_META,
                (str(dimension),),
            )

    def add_turns(
        self, tenant: str, conversation_id: str, turns: Sequence[Turn], *, accepted_at: datetime
    ) -> tuple[list[int | str], list[int | str], int | None]:
        """Store new turns and one index job atomically.

        Returns ``(accepted, duplicates, job_id)``. Re-sent identical turns are duplicates;
        a stored turn id with other text raises ``TurnConflictError`` and stores nothing.
        """
        now = _now()
        with self._write() as conn:
            self._lock_conversation(conn, tenant, conversation_id)
            seqs = [turn.seq for turn in turns]
            stored = {
                row[0]: row
                for row in conn.execute(
                    "SELECT seq, text_sha256, turn_id, deleted FROM turns WHERE tenant=? AND "
                    "conversation_id=? AND seq BETWEEN ? AND ?",
                    (tenant, conversation_id, min(seqs), max(seqs)),
                )
            }
            accepted: list[int | str] = []
            duplicates: list[int | str] = []
            rows = []
            for index, turn in enumerate(turns):
                digest = text_digest(turn.text)
                if turn.seq in stored:
                    if stored[turn.seq][1] != digest and stored[turn.seq][3]:
                        raise TurnConflictError(
                            f"turn {turn.turn_id!r} (sequence {turn.seq}) of conversation "
                            f"{conversation_id!r} was deleted and its id is retired; send the "
                            "new text under a new turn id",
                            field=f"turns[{index}].turn_id",
                        )
                    if stored[turn.seq][1] != digest:
                        raise TurnConflictError(
                            f"turn {turn.turn_id!r} (sequence {turn.seq}) of conversation "
                            f"{conversation_id!r} is already stored with different text; turns "
                            "are immutable: delete the turn range first to replace it",
                            field=f"turns[{index}].text",
                        )
                    duplicates.append(turn.turn_id)
                    continue
                timestamp = turn.timestamp or accepted_at
                rows.append(
                    (
                        tenant,
                        conversation_id,
                        turn.seq,
                        str(turn.turn_id),
                        1 if isinstance(turn.turn_id, int) else 0,
                        turn.role,
                        turn.name,
                        turn.text,
                        digest,
                        timestamp.isoformat(),
                        json.dumps(turn.meta, ensure_ascii=False),
                        now,
                    )
                )
                accepted.append(turn.turn_id)
            if not rows:
                return accepted, duplicates, None
            conn.executemany(
                "INSERT INTO turns (tenant, conversation_id, seq, turn_id, turn_id_is_int, role, "
                "name, text, text_sha256, ts, meta, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            new_min = min(row[2] for row in rows)
            new_max = max(row[2] for row in rows)
            state = conn.execute(
                "SELECT last_seq, rewind_to FROM conversations WHERE tenant=? AND conversation_id=?",
                (tenant, conversation_id),
            ).fetchone()
            if state is None:
                conn.execute(
                    "INSERT INTO conversations (tenant, conversation_id, last_seq) VALUES (?,?,?)",
                    (tenant, conversation_id, new_max),
                )
            else:
                last_seq, rewind_to = state
                # A turn before the newest one is late: it can change the unit that closed a
                # chunk already planned, so the worker re-plans from there.
                late = last_seq is not None and new_min < last_seq
                conn.execute(
                    f"UPDATE conversations SET last_seq={self.GREATEST}(coalesce(last_seq, -1), ?), "
                    "rewind_to=?, revision=revision + ? WHERE tenant=? AND conversation_id=?",
                    (
                        new_max,
                        (min(rewind_to, new_min) if rewind_to is not None else new_min)
                        if late
                        else rewind_to,
                        1 if late else 0,
                        tenant,
                        conversation_id,
                    ),
                )
            job_id = conn.execute(
                "INSERT INTO jobs (tenant, conversation_id, min_seq, max_seq, status, "
                "next_retry_at, created_at, updated_at) VALUES (?,?,?,?,'pending',?,?,?) "
                "RETURNING job_id",
                (tenant, conversation_id, new_min, new_max, now, now, now),
            ).fetchone()[0]
        return accepted, duplicates, job_id

    # -- jobs --------------------------------------------------------------------------

    def recover_dead_claims(self) -> int:
        """Release jobs claimed by processes on this host that no longer exist."""
        host = socket.gethostname()
        released = 0
        with self._write() as conn:
            for job_id, claimed_by in conn.execute(
                "SELECT job_id, claimed_by FROM jobs WHERE status='running'"
            ).fetchall():
                parts = (claimed_by or "").split(":")
                dead = (
                    len(parts) >= 2
                    and parts[0] == host
                    and parts[1].isdigit()
                    and not _pid_alive(int(parts[1]))
                )
                if dead:
                    conn.execute(
                        "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL "
                        "WHERE job_id=?",
                        (job_id,),
                    )
                    released += 1
        if released:
            logger.info("released %d jobs of dead workers", released)
        return released

    #: Ready jobs whose conversation no other worker holds a live claim on.
    READY_JOBS = """
        SELECT job_id, tenant, conversation_id, min_seq, max_seq, attempts FROM jobs AS j
        WHERE ((status = 'pending' AND next_retry_at <= ?)
               OR (status = 'running' AND lease_until < ?))
          AND NOT EXISTS (
              SELECT 1 FROM jobs AS o
              WHERE o.tenant = j.tenant AND o.conversation_id = j.conversation_id
                AND o.status = 'running' AND o.lease_until >= ?
                AND o.claimed_by <> ?)
        ORDER BY job_id LIMIT ?
    """

    def _claimable(
        self, conn: Connection, rows: list[Any], worker_id: str, now: float
    ) -> list[Any]:
        """The candidate rows this worker may take (SQLite: all; one writer at a time)."""
        return rows

    def claim_jobs(self, worker_id: str, *, limit: int, lease_seconds: float) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs, never two workers on one conversation."""
        now = _now()
        with self._write() as conn:
            rows = conn.execute(self.READY_JOBS, (now, now, now, worker_id, limit)).fetchall()
            rows = self._claimable(conn, rows, worker_id, now)
            if rows:
                conn.executemany(
                    "UPDATE jobs SET status='running', claimed_by=?, lease_until=?, updated_at=? "
                    "WHERE job_id=?",
                    [(worker_id, now + lease_seconds, now, row[0]) for row in rows],
                )
        return [ClaimedJob(*row) for row in rows]

    def fail_jobs(
        self,
        job_ids: Sequence[int],
        *,
        error_code: str,
        message: str,
        base_delay: float,
        max_delay: float,
        max_attempts: int,
    ) -> None:
        """Record a failure; retry with exponential backoff, or mark failed after max_attempts."""
        now = _now()
        with self._write() as conn:
            for job_id in job_ids:
                row = conn.execute("SELECT attempts FROM jobs WHERE job_id=?", (job_id,)).fetchone()
                if row is None:
                    continue
                attempts = int(row[0]) + 1
                delay = min(max_delay, base_delay * (2 ** (attempts - 1)))
                status = "failed" if attempts >= max_attempts else "pending"
                conn.execute(
                    "UPDATE jobs SET status=?, attempts=?, error_code=?, error_message=?, "
                    "next_retry_at=?, claimed_by=NULL, lease_until=NULL, updated_at=? WHERE job_id=?",
                    (status, attempts, error_code, message[:500], now + delay, now, job_id),
                )

    def release_jobs(self, job_ids: Sequence[int]) -> None:
        """Hand claimed jobs back untouched (shutdown, or a lost race to run again at once)."""
        with self._write() as conn:
            conn.executemany(
                "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL, "
                "next_retry_at=? WHERE job_id=? AND status='running'",
                [(_now(), job_id) for job_id in job_ids],
            )

    def release_worker(self, worker_prefix: str) -> int:
        """Release every job a worker (by identity prefix) still holds."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL "
                "WHERE status='running' AND claimed_by LIKE ? ESCAPE '\\'",
                (worker_prefix.replace("%", "\\%").replace("_", "\\_") + "%",),
            )
            return cursor.rowcount

    def _job_info(self, row: Sequence[Any]) -> JobInfo:
        def stamp(value: float | None) -> datetime | None:
            return None if value is None else datetime.fromtimestamp(value, UTC)

        return JobInfo(
            job_id=row[0],
            conversation_id=row[1],
            status=row[2],
            attempts=row[3],
            error_code=row[4],
            error_message=row[5],
            next_retry_at=stamp(row[6]) if row[2] in ("pending", "failed") and row[3] else None,
            created_at=datetime.fromtimestamp(row[7], UTC),
            updated_at=datetime.fromtimestamp(row[8], UTC),
        )

    _JOB_COLUMNS = (
        "job_id, conversation_id, status, attempts, error_code, error_message, next_retry_at, "
        "created_at, updated_at"
    )

    def job(self, tenant: str, job_id: int) -> JobInfo:
        row = (
            self._db()
            .execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE tenant=? AND job_id=?",
                (tenant, job_id),
            )
            .fetchone()
        )
        if row is None:
            raise NotFoundError(f"No job {job_id} in tenant {tenant!r}")
        return self._job_info(row)

    def jobs(self, tenant: str, *, status: str | None = None, limit: int = 100) -> list[JobInfo]:
        sql = f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE tenant=?"
        params: list[Any] = [tenant]
        if status is not None:
            sql += " AND status=?"
            params.append(status)
        sql += " ORDER BY job_id DESC LIMIT ?"
        params.append(limit)
        return [self._job_info(row) for row in self._db().execute(sql, params)]

    def retry_job(self, tenant: str, job_id: int) -> JobInfo:
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status='pending', next_retry_at=?, updated_at=? "
                "WHERE tenant=? AND job_id=? AND status IN ('failed', 'pending')",
                (_now(), _now(), tenant, job_id),
            )
            if cursor.rowcount == 0:
                exists = conn.execute(
                    "SELECT status FROM jobs WHERE tenant=? AND job_id=?", (tenant, job_id)
                ).fetchone()
                if exists is None:
                    raise NotFoundError(f"No job {job_id} in tenant {tenant!r}")
        return self.job(tenant, job_id)

    def backlog(self, tenant: str | None = None) -> tuple[int, int]:
        """``(pending_or_running, failed)`` job counts, for one tenant or all."""
        sql = "SELECT status, count(*) FROM jobs WHERE status IN ('pending','running','failed')"
        params: list[Any] = []
        if tenant is not None:
            sql += " AND tenant=?"
            params.append(tenant)
        counts = dict(self._db().execute(sql + " GROUP BY status", params).fetchall())
        return counts.get("pending", 0) + counts.get("running", 0), counts.get("failed", 0)

    def backlog_by_conversation(self, tenant: str) -> dict[str, int]:
        return dict(
            self._db()
            .execute(
                "SELECT conversation_id, count(*) FROM jobs WHERE tenant=? AND status IN "
                "('pending','running') GROUP BY conversation_id",
                (tenant,),
            )
            .fetchall()
        )

    # -- indexing ----------------------------------------------------------------------

    def conversation_state(self, tenant: str, conversation_id: str) -> ConversationState:
        row = (
            self._db()
            .execute(
                "SELECT frontier_start, frontier_end, rewind_to, revision, last_seq, indexed_seq "
                "FROM conversations WHERE tenant=? AND conversation_id=?",
                (tenant, conversation_id),
            )
            .fetchone()
        )
        if row is None:
            return ConversationState(None, None, 0, None, None)
        frontier = (row[0], row[1]) if row[0] is not None else None
        return ConversationState(frontier, row[2], row[3], row[4], row[5])

    def last_final_chunk_before(
        self, tenant: str, conversation_id: str, seq: int
    ) -> tuple[int, int] | None:
        """The live, final, worker-made chunk with the greatest end before ``seq``."""
        row = (
            self._db()
            .execute(
                "SELECT start_seq, end_seq FROM chunks WHERE tenant=? AND conversation_id=? AND "
                "origin='worker' AND deleted=0 AND provisional=0 AND end_seq < ? "
                "ORDER BY end_seq DESC LIMIT 1",
                (tenant, conversation_id, seq),
            )
            .fetchone()
        )
        return (row[0], row[1]) if row else None

    def load_turns(
        self,
        tenant: str,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        between: tuple[int, int] | None = None,
        include_deleted: bool = False,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[StoredTurn]:
        sql = (
            "SELECT seq, turn_id, turn_id_is_int, role, name, text, ts, created_at FROM turns "
            "WHERE tenant=? AND conversation_id=?"
        )
        params: list[Any] = [tenant, conversation_id]
        if not include_deleted:
            sql += " AND deleted=0"
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if before is not None:
            sql += " AND seq < ?"
            params.append(before)
        if between is not None:
            sql += " AND seq BETWEEN ? AND ?"
            params.extend(between)
        sql += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            StoredTurn(
                seq=row[0],
                turn_id=int(row[1]) if row[2] else row[1],
                role=row[3],
                name=row[4],
                text=row[5] or "",
                timestamp=datetime.fromisoformat(row[6]),
                accepted_at=row[7],
            )
            for row in self._db().execute(sql, params)
        ]

    def chunk_fingerprints(
        self, tenant: str, chunk_ids: Sequence[str]
    ) -> dict[str, tuple[str, str, bytes]]:
        """``chunk_id -> (text_sha256, model_id, vector)`` for live chunks with vectors."""
        rows = _select_in(
            self._db(),
            "SELECT chunk_id, text_sha256, model_id, vector FROM chunks WHERE tenant=? AND "
            "deleted=0 AND vector IS NOT NULL AND chunk_id IN ({marks})",
            chunk_ids,
            before=[tenant],
        )
        return {row[0]: (row[1], row[2], self._vector_bytes(row[3])) for row in rows}

    def _next_change(self, conn: Connection) -> int:
        """A new change number (orders writes for incremental vector-index sync)."""
        row = conn.execute(
            "INSERT INTO meta(key, value) VALUES ('change_seq', '1') ON CONFLICT (key) DO "
            "UPDATE SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT) RETURNING value"
        ).fetchone()
        return int(row[0])

    #: Chunk columns in the order of :meth:`_chunk_values`.
    CHUNK_COLUMNS = (
        "conversation_id, start_seq, end_seq, chunk_version, text, text_sha256, metadata, "
        "participants, speakers, intent_tag, ts_start, ts_end, provisional, origin, "
        "importance, category, expires_at, pinned, requires_confirmation, vector, model_id, "
        "updated_at, change_seq"
    )

    def _chunk_values(
        self, item: IndexedChunk, *, origin: str, model_id: str, change: int
    ) -> tuple[Any, ...]:
        """One chunk's column values, in ``CHUNK_COLUMNS`` order."""
        record = item.record
        meta = record.metadata
        ts_start = ts_end = None
        if meta.timestamp_range:
            ts_start = datetime.fromisoformat(meta.timestamp_range[0]).timestamp()
            ts_end = datetime.fromisoformat(meta.timestamp_range[1]).timestamp()
        expires = datetime.fromisoformat(meta.expires_at).timestamp() if meta.expires_at else None
        vector = self._vector_param(item.vector)
        metadata_json = meta.model_dump_json()
        return (
            meta.conversation_id,
            meta.turn_range[0],
            meta.turn_range[1],
            meta.chunk_version,
            record.text,
            text_digest(record.text),
            metadata_json,
            dumps_list(meta.participants),
            dumps_list(meta.speakers),
            meta.intent_tag,
            ts_start,
            ts_end,
            1 if meta.provisional else 0,
            origin,
            meta.importance,
            meta.category,
            expires,
            1 if meta.pinned else 0,
            1 if meta.requires_confirmation else 0,
            vector,
            model_id,
            _now(),
            change,
        )

    def _upsert_chunk(
        self,
        conn: Connection,
        tenant: str,
        item: IndexedChunk,
        *,
        origin: str,
        model_id: str,
        change: int,
    ) -> bool:
        """Insert or overwrite one chunk and its lexical row. Returns True when it existed."""
        record = item.record
        values = self._chunk_values(item, origin=origin, model_id=model_id, change=change)
        existing = conn.execute(
            "SELECT rowid FROM chunks WHERE tenant=? AND chunk_id=?", (tenant, record.chunk_id)
        ).fetchone()
        if existing is None:
            rowid = conn.execute(
                f"INSERT INTO chunks ({self.CHUNK_COLUMNS}, tenant, chunk_id, deleted) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                f"{self.VECTOR_PARAM},?,?,?,?,?,0) RETURNING rowid",
                (*values, tenant, record.chunk_id),
            ).fetchone()[0]
        else:
            rowid = existing[0]
            conn.execute(
                "UPDATE chunks SET conversation_id=?, start_seq=?, end_seq=?, chunk_version=?, "
                "text=?, text_sha256=?, metadata=?, participants=?, speakers=?, intent_tag=?, "
                "ts_start=?, ts_end=?, provisional=?, origin=?, importance=?, category=?, "
                f"expires_at=?, pinned=?, requires_confirmation=?, vector={self.VECTOR_PARAM}, "
                "model_id=?, updated_at=?, change_seq=?, deleted=0 WHERE rowid=?",
                (*values, rowid),
            )
            self._unindex(conn, [rowid])
        self._index_tokens(conn, [(rowid, item.tokens)])
        return existing is not None

    def apply_index(self, batches: Sequence[IndexBatch], *, model_id: str) -> list[bool]:
        """Write re-planned chunks of several conversations and finish their jobs.

        One transaction (one fsync) for the whole worker pass. For each conversation, live
        worker chunks ending after ``supersede_after`` that the new plan does not contain
        are removed (they were provisional or re-cut). A conversation that changed since
        it was read (a delete, a late turn, another worker) is skipped and reported False;
        the caller releases its jobs to run again.
        """
        now = _now()
        results: list[bool] = []
        with self._write() as conn:
            # every lock up front, in one order, so two workers can never deadlock
            for tenant, conversation_id in sorted({(b.tenant, b.conversation_id) for b in batches}):
                self._lock_conversation(conn, tenant, conversation_id)
            change = self._next_change(conn)
            for batch in batches:
                results.append(
                    self._apply_one(conn, batch, model_id=model_id, change=change, now=now)
                )
        return results

    def _apply_one(
        self, conn: Connection, batch: IndexBatch, *, model_id: str, change: int, now: float
    ) -> bool:
        tenant, conversation_id = batch.tenant, batch.conversation_id
        row = conn.execute(
            "SELECT revision FROM conversations WHERE tenant=? AND conversation_id=?",
            (tenant, conversation_id),
        ).fetchone()
        if row is None or row[0] != batch.expected_revision:
            return False
        keep = {item.record.chunk_id for item in batch.chunks}
        stale = [
            rowid
            for rowid, chunk_id in conn.execute(
                "SELECT rowid, chunk_id FROM chunks WHERE tenant=? AND conversation_id=? AND "
                "origin='worker' AND deleted=0 AND end_seq > ?",
                (tenant, conversation_id, batch.supersede_after),
            )
            if chunk_id not in keep
        ]
        if stale:
            self._remove_rows(conn, tenant, stale, change)
        for item in batch.chunks:
            self._upsert_chunk(
                conn, tenant, item, origin="worker", model_id=model_id, change=change
            )
        if batch.marks_from is not None:
            self._write_governance(
                conn,
                tenant,
                conversation_id,
                from_seq=batch.marks_from,
                marks=batch.marks,
                pins=batch.pins,
                notes=batch.notes,
                now=now,
            )
        frontier = batch.frontier
        conn.execute(
            "UPDATE conversations SET frontier_start=?, frontier_end=?, rewind_to=NULL, "
            f"revision=revision + 1, indexed_seq={self.GREATEST}(coalesce(indexed_seq, -1), ?) "
            "WHERE tenant=? AND conversation_id=?",
            (
                frontier[0] if frontier else None,
                frontier[1] if frontier else None,
                batch.indexed_seq if batch.indexed_seq is not None else -1,
                tenant,
                conversation_id,
            ),
        )
        conn.executemany(
            "UPDATE jobs SET status='done', claimed_by=NULL, lease_until=NULL, "
            "error_code=NULL, error_message=NULL, updated_at=? WHERE job_id=?",
            [(now, job_id) for job_id in batch.job_ids],
        )
        return True

    def _remove_rows(
        self, conn: Connection, tenant: str, rowids: Sequence[int], change: int
    ) -> None:
        """Delete chunk rows outright (superseded, never deleted by a user) and log them."""
        self._unindex(conn, rowids)
        conn.executemany("DELETE FROM chunks WHERE rowid=?", [(rowid,) for rowid in rowids])
        conn.executemany(
            "INSERT INTO removed_rows (tenant, row, change_seq) VALUES (?,?,?)",
            [(tenant, rowid, change) for rowid in rowids],
        )

    def upsert_records(
        self, tenant: str, items: Sequence[IndexedChunk], *, model_id: str
    ) -> tuple[int, int]:
        """Upsert caller-built chunks (seed ``upsert_vector_records``): ``(inserted, updated)``."""
        inserted = updated = 0
        with self._write() as conn:
            change = self._next_change(conn)
            for item in items:
                if self._upsert_chunk(
                    conn, tenant, item, origin="api", model_id=model_id, change=change
                ):
                    updated += 1
                else:
                    inserted += 1
        return inserted, updated

    # -- delete and purge --------------------------------------------------------------

    def _tombstone_chunks(self, conn: Connection, tenant: str, rowids: Sequence[int]) -> None:
        change = self._next_change(conn)
        self._unindex(conn, rowids)
        conn.executemany(
            "UPDATE chunks SET deleted=1, vector=NULL, updated_at=?, change_seq=?, "
            f"metadata={self.TOMBSTONE_METADATA} WHERE rowid=?",
            [(_now(), change, rowid) for rowid in rowids],
        )

    def delete_turns(
        self, tenant: str, conversation_id: str, turn_range: tuple[int, int]
    ) -> tuple[int, int, int | None]:
        """Logically delete turns in a range and every chunk overlapping it; re-cut the rest.

        Returns ``(chunks_deleted, turns_deleted, job_id)``; the job re-chunks the
        surviving turns of the deleted chunks.
        """
        start, end = turn_range
        now = _now()
        with self._write() as conn:
            self._lock_conversation(conn, tenant, conversation_id)
            turns_deleted = conn.execute(
                "UPDATE turns SET deleted=1 WHERE tenant=? AND conversation_id=? AND seq BETWEEN ? "
                "AND ? AND deleted=0",
                (tenant, conversation_id, start, end),
            ).rowcount
            rowids = [
                row[0]
                for row in conn.execute(
                    "SELECT rowid FROM chunks WHERE tenant=? AND conversation_id=? AND deleted=0 "
                    "AND start_seq <= ? AND end_seq >= ?",
                    (tenant, conversation_id, end, start),
                )
            ]
            self._tombstone_chunks(conn, tenant, rowids)
            rewind_from = self._cascade_delete(conn, tenant, conversation_id, start, end)
            job_id = (
                self._rewind(conn, tenant, conversation_id, rewind_from, now)
                if rowids or turns_deleted
                else None
            )
        return len(rowids), turns_deleted, job_id

    def reset_conversations(self, tenant: str, conversation_id: str | None = None) -> int:
        """Drop worker-made live chunks and re-chunk from the start (a new chunking policy).

        Deleted turns stay deleted; tombstones stay until purge. Returns the number of
        conversations queued.
        """
        now = _now()
        with self._write() as conn:
            sql = "SELECT conversation_id, last_seq FROM conversations WHERE tenant=?"
            params: list[Any] = [tenant]
            if conversation_id is not None:
                sql += " AND conversation_id=?"
                params.append(conversation_id)
            conversations = conn.execute(sql, params).fetchall()
            change = self._next_change(conn)
            for conversation, last_seq in conversations:
                rowids = [
                    row[0]
                    for row in conn.execute(
                        "SELECT rowid FROM chunks WHERE tenant=? AND conversation_id=? AND "
                        "origin='worker' AND deleted=0",
                        (tenant, conversation),
                    )
                ]
                self._remove_rows(conn, tenant, rowids, change)
                conn.execute(
                    "UPDATE conversations SET frontier_start=NULL, frontier_end=NULL, "
                    "rewind_to=NULL, revision=revision+1 WHERE tenant=? AND conversation_id=?",
                    (tenant, conversation),
                )
                conn.execute(
                    "INSERT INTO jobs (tenant, conversation_id, min_seq, max_seq, status, "
                    "next_retry_at, created_at, updated_at) VALUES (?,?,0,?,'pending',?,?,?)",
                    (tenant, conversation, last_seq or 0, now, now, now),
                )
        return len(conversations)

    def chunk_sources(
        self, tenant: str, chunk_ids: Sequence[str]
    ) -> dict[str, tuple[str, int, int, str]]:
        """``chunk_id -> (conversation_id, start, end, origin)`` for live chunks."""
        rows = _select_in(
            self._db(),
            "SELECT chunk_id, conversation_id, start_seq, end_seq, origin FROM chunks WHERE "
            "tenant=? AND deleted=0 AND chunk_id IN ({marks})",
            chunk_ids,
            before=[tenant],
        )
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    def delete_chunk_rows(self, tenant: str, chunk_ids: Sequence[str]) -> int:
        """Logically delete chunks by id (for caller-made chunks without turns)."""
        with self._write() as conn:
            rowids = [
                row[0]
                for row in _select_in(
                    conn,
                    "SELECT rowid FROM chunks WHERE tenant=? AND deleted=0 AND chunk_id IN ({marks})",
                    chunk_ids,
                    before=[tenant],
                )
            ]
            self._tombstone_chunks(conn, tenant, rowids)
        return len(rowids)

    def purge(self) -> dict[str, int]:
        """Physically remove deleted text: tombstoned chunks and deleted turns' text.

        Turn rows stay as tombstones (id and hash only) so a re-sent deleted turn is
        recognised and not stored again.
        """
        with self._write() as conn:
            chunks = conn.execute("DELETE FROM chunks WHERE deleted=1").rowcount
            turns = conn.execute(
                "UPDATE turns SET text=NULL, name=NULL, meta='{}' WHERE deleted=1 AND text IS NOT NULL"
            ).rowcount
            notes = self._purge_notes(conn)
        self._after_purge()
        logger.info("purged %d chunks and %d turns from %s", chunks, turns, self.url)
        return {"chunks": chunks, "turns": turns, "notes": notes}

    def _live_clause(self, spec: FilterSpec) -> tuple[str, list[Any]]:
        where, params = to_sql(spec, dialect=self.DIALECT)
        return (
            f"c.tenant = ? AND c.deleted = 0 AND (c.expires_at IS NULL OR c.expires_at > ?) "
            f"AND {where}",
            params,
        )

    def scan_vectors(
        self, tenant: str, spec: FilterSpec, query: np.ndarray, limit: int
    ) -> list[tuple[int, float]]:
        """The nearest live chunks the filter admits: ``(rowid, cosine)``, best first."""
        raise NotImplementedError

    def lexical(
        self, tenant: str, spec: FilterSpec, tokens: Sequence[str], limit: int
    ) -> list[tuple[int, float]]:
        """BM25 over segmented tokens under the filter: ``(rowid, score)``, best first."""
        raise NotImplementedError

    def admit(self, tenant: str, spec: FilterSpec, rowids: Sequence[int]) -> set[int]:
        """Which of ``rowids`` are live and pass the filter (post-check for ANN candidates)."""
        if not rowids:
            return set()
        where, params = self._live_clause(spec)
        rows = _select_in(
            self._db(),
            f"SELECT c.rowid FROM chunks c {self.NOT_INDEXED} WHERE c.rowid IN ({{marks}}) AND {where}",
            rowids,
            after=[tenant, _now(), *params],
        )
        return {row[0] for row in rows}

    def load_rows(
        self, tenant: str, rowids: Sequence[int]
    ) -> dict[int, tuple[str, str, dict[str, Any]]]:
        """``rowid -> (chunk_id, text, metadata)`` for live rows of this tenant."""
        out: dict[int, tuple[str, str, dict[str, Any]]] = {}
        if not rowids:
            return out
        for row in self._db().execute(
            # NOT INDEXED: without it the planner walks the tenant index instead of
            # looking up a handful of rowids (measured: 10 ms instead of 0.1 ms at 100k).
            f"SELECT rowid, chunk_id, text, metadata FROM chunks {self.NOT_INDEXED} WHERE tenant=? AND "
            f"deleted=0 AND rowid IN ({','.join('?' * len(rowids))})",
            [tenant, *rowids],
        ):
            out[row[0]] = (row[1], row[2], json.loads(row[3]))
        return out

    def latest_change(self) -> int:
        row = self._db().execute("SELECT value FROM meta WHERE key='change_seq'").fetchone()
        return int(row[0]) if row else 0

    def changes_since(
        self, tenant: str, after: int, upto: int, *, page: int = 50_000
    ) -> Iterator[list[tuple[int, bytes | None]]]:
        """Pages of ``(rowid, vector or None if deleted)`` changed in ``(after, upto]``.

        Keyset-paginated on ``(change_seq, rowid)``, so a rebuild never holds more than one
        page of vectors in memory.
        """
        conn = self._db()
        cursor = (after, 0)
        while True:
            rows = conn.execute(
                "SELECT rowid, vector, deleted, change_seq FROM chunks WHERE tenant=? AND "
                "(change_seq, rowid) > (?, ?) AND change_seq <= ? ORDER BY change_seq, rowid "
                "LIMIT ?",
                (tenant, cursor[0], cursor[1], upto, page),
            ).fetchall()
            if not rows:
                return
            yield [(row[0], None if row[2] else row[1]) for row in rows]
            cursor = (rows[-1][3], rows[-1][0])

    def removed_since(self, tenant: str, after: int, upto: int) -> list[int]:
        """Rowids removed (superseded or re-chunked) in ``(after, upto]``."""
        return [
            row[0]
            for row in self._db().execute(
                "SELECT row FROM removed_rows WHERE tenant=? AND change_seq > ? AND change_seq <= ?",
                (tenant, after, upto),
            )
        ]

    # -- maintenance -------------------------------------------------------------------

    def iter_live_chunks(self, batch: int = 512) -> Iterator[list[tuple[int, str]]]:
        """Live chunks' ``(rowid, text)`` in batches, across tenants (for reindex)."""
        last = 0
        conn = self._db()
        while True:
            rows = conn.execute(
                "SELECT rowid, text FROM chunks WHERE deleted=0 AND rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            yield [(row[0], row[1]) for row in rows]
            last = rows[-1][0]

    def replace_vectors(self, rows: Sequence[tuple[int, np.ndarray]], model_id: str) -> None:
        with self._write() as conn:
            change = self._next_change(conn)
            conn.executemany(
                f"UPDATE chunks SET vector={self.VECTOR_PARAM}, model_id=?, change_seq=? "
                "WHERE rowid=?",
                [(self._vector_param(vector), model_id, change, rowid) for rowid, vector in rows],
            )

    def stats(self, tenant: str) -> dict[str, Any]:
        conn = self._db()
        chunks = dict(
            conn.execute(
                "SELECT deleted, count(*) FROM chunks WHERE tenant=? GROUP BY deleted", (tenant,)
            ).fetchall()
        )
        turns = dict(
            conn.execute(
                "SELECT deleted, count(*) FROM turns WHERE tenant=? GROUP BY deleted", (tenant,)
            ).fetchall()
        )
        conversations = conn.execute(
            "SELECT count(*) FROM conversations WHERE tenant=?", (tenant,)
        ).fetchone()[0]
        jobs = dict(
            conn.execute(
                "SELECT status, count(*) FROM jobs WHERE tenant=? GROUP BY status", (tenant,)
            ).fetchall()
        )
        return {
            "conversations": conversations,
            "turns": turns.get(0, 0),
            "turns_deleted": turns.get(1, 0),
            "chunks": chunks.get(0, 0),
            "chunks_deleted": chunks.get(1, 0),
            "jobs": jobs,
            "notes": dict(
                conn.execute(
                    "SELECT status, count(*) FROM notes WHERE tenant=? AND deleted=0 AND "
                    "expired=0 GROUP BY status",
                    (tenant,),
                ).fetchall()
            ),
            "turns_kept": conn.execute(
                "SELECT count(*) FROM marks WHERE tenant=? AND keep=1", (tenant,)
            ).fetchone()[0],
            "turns_marked": conn.execute(
                "SELECT count(*) FROM marks WHERE tenant=?", (tenant,)
            ).fetchone()[0],
            "file_bytes": self._size_bytes(),
        }
