"""The schema, written once in SQLite's dialect (PostgreSQL derives its DDL from it), its
numbered migrations, and what the ``meta`` table records."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from convmem.errors import StoreError
from convmem.models import runs_backwards
from convmem.store.contract import Backend
from convmem.store.dbapi import Connection
from convmem.store.governance import GOVERNANCE_SCHEMA
from convmem.store.keys import KEYS_SCHEMA
from convmem.store.story import STORY_SCHEMA
from convmem.text import tokenize, tokenizer_signature

__all__ = ["DATA_MIGRATIONS", "MIGRATIONS", "SCHEMA_VERSION", "UPSERT_META", "SchemaTables"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 10

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
    # 6: each dialogue chunk keeps its turns' vectors (turn-level evidence)
    "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS turn_vectors BLOB",
    # 7: ... and its lines' search tokens (convmem.ingest.line_tokens)
    "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS turn_tokens TEXT",
    # 8: who speaks in a conversation, read from the index alone (every search of one
    # conversation asks; from the rows, which hold the vectors, it cost 1-10 ms at 100k)
    "CREATE INDEX IF NOT EXISTS chunks_participants "
    "ON chunks (tenant, conversation_id, deleted, participants)",
    # 9: a conversation's live rows, read from the index alone (a search of one
    # conversation lists them; the expiry check read each row, which holds the vectors:
    # 10-18 ms for a 5,000-chunk conversation, 1.5-2 ms from this index)
    "CREATE INDEX IF NOT EXISTS chunks_live ON chunks (tenant, conversation_id, deleted, expires_at)",
    # 10: chunk times as this convmem keeps them, in rows an older one wrote (no DDL: the
    # data step _forward_spans)
    "",
]

UPSERT_META = "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
#: The meta key of a tenant's chunking policy: this, then the tenant's name.
CHUNKING_KEY = "chunking_policy\x1f"


_ADD_COLUMN = re.compile(
    r"^\s*ALTER TABLE (?P<table>\w+) ADD COLUMN IF NOT EXISTS (?P<column>\w+) (?P<type>.+)$",
    re.DOTALL,
)


def _execute_once(conn: Connection, statement: str) -> None:
    """Run a migration statement; ``ADD COLUMN IF NOT EXISTS`` (which SQLite lacks) is
    checked against the table's columns first, so every migration can run again."""
    match = _ADD_COLUMN.match(statement)
    if match is None:
        conn.execute(statement)
        return
    cursor = conn.execute(f"SELECT * FROM {match['table']} LIMIT 0")
    if match["column"] not in [column[0] for column in cursor.description or []]:
        conn.execute(
            f"ALTER TABLE {match['table']} ADD COLUMN {match['column']} {match['type'].strip()}"
        )


def _zoned(value: object) -> bool:
    """Whether ``value`` is an ISO 8601 time with a zone, as chunk metadata keeps times."""
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _forward_spans(conn: Connection) -> int:
    """Schema 10: live chunk rows an older convmem wrote, with their times as this one
    keeps them. Returns how many rows it rewrote.

    A chunk whose turns' times ran out of order, or a caller's chunk sent so, kept a span
    that ends before it starts (``ts_start > ts_end`` and a backwards
    ``timestamp_range``), which no ``timestamp_range`` filter met; it now runs forwards.
    A caller's chunk could hold times without a zone (``2026-11-05T08:00:00``, an
    ``expires_at`` of ``2027-12-31``), which listing it (``Memory.chunks``) refused; they
    are written as the instants the row's columns kept, in UTC.
    """
    count, after = 0, -1
    while True:
        rows = conn.execute(
            "SELECT tenant, rowid, metadata, ts_start, ts_end, expires_at FROM chunks "
            "WHERE deleted=0 AND (ts_start > ts_end OR origin='api') AND rowid > ? "
            "ORDER BY rowid LIMIT 1000",
            (after,),
        ).fetchall()
        if not rows:
            return count
        after = rows[-1][1]
        for tenant, rowid, text, start, end, expires in rows:
            try:
                metadata = json.loads(text)
            except ValueError:
                continue
            if not isinstance(metadata, dict):
                continue
            backwards = start is not None and end is not None and start > end
            if backwards:
                start, end = end, start
            changed = backwards
            span = metadata.get("timestamp_range")
            if isinstance(span, list) and len(span) == 2:
                if not all(_zoned(moment) for moment in span):
                    if start is not None and end is not None:
                        metadata["timestamp_range"] = [_utc(start), _utc(end)]
                        changed = True
                elif runs_backwards(span):
                    metadata["timestamp_range"] = [span[1], span[0]]
                    changed = True
            stated = metadata.get("expires_at")
            if stated is not None and not _zoned(stated) and expires is not None:
                metadata["expires_at"] = _utc(expires)
                changed = True
            if changed:
                conn.execute(
                    "UPDATE chunks SET ts_start=?, ts_end=?, metadata=? WHERE tenant=? AND rowid=?",
                    (
                        start,
                        end,
                        json.dumps(metadata, ensure_ascii=False, separators=(",", ":")),
                        tenant,
                        rowid,
                    ),
                )
                count += 1


#: Data steps of a schema version, run after its DDL in the same transaction.
DATA_MIGRATIONS: dict[int, Callable[[Connection], int]] = {10: _forward_spans}


class SchemaTables(Backend):
    """Schema versions, the tokenizer signature, and the embedding model the store records."""

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
                        _execute_once(conn, statement)
                step = DATA_MIGRATIONS.get(version)
                if step is not None and (rows := step(conn)):
                    logger.info("schema version %d rewrote %d chunk rows", version, rows)
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
                "SELECT tenant, rowid, text FROM chunks WHERE deleted=0 AND text IS NOT NULL "
                "ORDER BY tenant, rowid"
            ).fetchall()
            count = len(rows)
            if rows:
                self._clear_lexical(conn)
                for start in range(0, len(rows), 1000):
                    page = rows[start : start + 1000]
                    for tenant in dict.fromkeys(row[0] for row in page):
                        self._index_tokens(
                            conn,
                            tenant,
                            [
                                (rowid, tokenize(text))
                                for owner, rowid, text in page
                                if owner == tenant
                            ],
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

    def chunking_policy(self, tenant: str) -> dict[str, int] | None:
        """The chunking policy ``rechunk`` recorded for ``tenant`` (its fields), or None.
        A store whose policy a convmem of stop 54 recorded for every tenant at once keeps
        that one for the tenants that have none of their own."""
        rows = dict(
            self._db()
            .execute(
                "SELECT key, value FROM meta WHERE key IN (?, 'chunking_policy')",
                (CHUNKING_KEY + tenant,),
            )
            .fetchall()
        )
        row = rows.get(CHUNKING_KEY + tenant, rows.get("chunking_policy"))
        if row is None:
            return None
        value = json.loads(row)
        return value if isinstance(value, dict) else None

    def set_chunking_policy(self, tenant: str, policy: dict[str, int]) -> None:
        """Record the chunking policy ``tenant``'s dialogue is cut under (``rechunk``), so
        a process that opens the store without one of its own cuts the tenant's new turns
        the same way. Other tenants keep theirs."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) " + UPSERT_META,
                (CHUNKING_KEY + tenant, json.dumps(policy, sort_keys=True)),
            )

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
        """Record the store's model; from then on vector writes of any other are refused
        (:meth:`_check_model`)."""
        with self._write() as conn:
            self._lock_model(conn, exclusive=True)
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('embedding_model', ?) " + UPSERT_META,
                (model_id,),
            )
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('embedding_dim', ?) " + UPSERT_META,
                (str(dimension),),
            )
