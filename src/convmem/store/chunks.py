"""Chunks and their vectors and lexical rows: the worker's index batches, caller upserts,
logical deletes that cascade, re-chunking and physical purge."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from convmem.store.dbapi import Connection
from convmem.store.filters import dumps_list
from convmem.store.governance import GovernanceTables
from convmem.store.records import IndexBatch, IndexedChunk, matrix_bytes, select_in, text_digest

__all__ = ["ChunkTables", "ChunkWrite"]


def _blob(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


class ChunkWrite(NamedTuple):
    """Where a chunk write comes from (``worker`` or ``api``), the model of its vector, and
    the change number of its transaction."""

    origin: str
    model_id: str
    change: int


logger = logging.getLogger(__name__)


class ChunkTables(GovernanceTables):
    """Chunks: the worker's batches, caller upserts, deletes that cascade, purge."""

    def chunk_fingerprints(
        self, tenant: str, chunk_ids: Sequence[str]
    ) -> dict[str, tuple[str, str, bytes, bytes | None]]:
        """``chunk_id -> (text_sha256, model_id, vector, turn_vectors)`` for live chunks
        with vectors (``turn_vectors``: the rows of its turns' vectors, or None)."""
        rows = select_in(
            self._db(),
            "SELECT chunk_id, text_sha256, model_id, vector, turn_vectors FROM chunks WHERE "
            "tenant=? AND deleted=0 AND vector IS NOT NULL AND chunk_id IN ({marks})",
            chunk_ids,
            before=[tenant],
        )
        return {row[0]: (row[1], row[2], self._vector_bytes(row[3]), _blob(row[4])) for row in rows}

    #: Chunk columns in the order of :meth:`_chunk_values`.
    CHUNK_COLUMNS = (
        "conversation_id, start_seq, end_seq, chunk_version, text, text_sha256, metadata, "
        "participants, speakers, intent_tag, ts_start, ts_end, provisional, origin, "
        "importance, category, expires_at, pinned, requires_confirmation, vector, model_id, "
        "updated_at, change_seq, turn_vectors, turn_tokens"
    )

    def _chunk_values(self, item: IndexedChunk, write: ChunkWrite) -> tuple[Any, ...]:
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
            write.origin,
            meta.importance,
            meta.category,
            expires,
            1 if meta.pinned else 0,
            1 if meta.requires_confirmation else 0,
            vector,
            write.model_id,
            self.now(),
            write.change,
            None if item.turn_vectors is None else matrix_bytes(item.turn_vectors),
            item.turn_tokens,
        )

    def _upsert_chunk(
        self, conn: Connection, tenant: str, item: IndexedChunk, write: ChunkWrite
    ) -> bool:
        """Insert or overwrite one chunk and its lexical row. Returns True when it existed."""
        record = item.record
        values = self._chunk_values(item, write)
        existing = conn.execute(
            "SELECT rowid FROM chunks WHERE tenant=? AND chunk_id=?", (tenant, record.chunk_id)
        ).fetchone()
        if existing is None:
            rowid = conn.execute(
                f"INSERT INTO chunks ({self.CHUNK_COLUMNS}, tenant, chunk_id, deleted) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                f"{self.VECTOR_PARAM},?,?,?,?,?,?,?,0) RETURNING rowid",
                (*values, tenant, record.chunk_id),
            ).fetchone()[0]
        else:
            rowid = existing[0]
            conn.execute(
                "UPDATE chunks SET conversation_id=?, start_seq=?, end_seq=?, chunk_version=?, "
                "text=?, text_sha256=?, metadata=?, participants=?, speakers=?, intent_tag=?, "
                "ts_start=?, ts_end=?, provisional=?, origin=?, importance=?, category=?, "
                f"expires_at=?, pinned=?, requires_confirmation=?, vector={self.VECTOR_PARAM}, "
                "model_id=?, updated_at=?, change_seq=?, turn_vectors=?, turn_tokens=?, "
                "deleted=0 WHERE rowid=?",
                (*values, rowid),
            )
            self._unindex(conn, tenant, [rowid])
        self._index_tokens(conn, tenant, [(rowid, item.tokens)])
        return existing is not None

    def apply_index(self, batches: Sequence[IndexBatch], *, model_id: str) -> list[bool]:
        """Write re-planned chunks of several conversations and finish their jobs.

        One transaction (one fsync) for the whole worker pass. For each conversation, live
        worker chunks ending after ``supersede_after`` that the new plan does not contain
        are removed (they were provisional or re-cut). A conversation that changed since
        it was read (a delete, a late turn, another worker) is skipped and reported False;
        the caller releases its jobs to run again.
        """
        now = self.now()
        results: list[bool] = []
        with self._write() as conn:
            # every lock up front, in one order, so two workers can never deadlock
            for tenant, conversation_id in sorted({(b.tenant, b.conversation_id) for b in batches}):
                self._lock_conversation(conn, tenant, conversation_id)
            self._check_model(conn, model_id)
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
        if batch.claimed_by is not None and batch.job_ids:
            held = select_in(
                conn,
                "SELECT count(*) FROM jobs WHERE tenant=? AND claimed_by=? AND "
                "status='running' AND job_id IN ({marks})",
                list(batch.job_ids),
                before=[tenant, batch.claimed_by],
            )
            if sum(row[0] for row in held) != len(batch.job_ids):
                return False  # another worker took them (this pass outlived its lease)
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
            self._upsert_chunk(conn, tenant, item, ChunkWrite("worker", model_id, change))
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
            "error_code=NULL, error_message=NULL, updated_at=? WHERE tenant=? AND job_id=?",
            [(now, tenant, job_id) for job_id in batch.job_ids],
        )
        return True

    def _remove_rows(
        self, conn: Connection, tenant: str, rowids: Sequence[int], change: int
    ) -> None:
        """Delete chunk rows outright (superseded, never deleted by a user) and log them."""
        self._unindex(conn, tenant, rowids)
        # the tenant routes each statement to one shard on Citus
        conn.executemany(
            "DELETE FROM chunks WHERE tenant=? AND rowid=?", [(tenant, rowid) for rowid in rowids]
        )
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
            self._check_model(conn, model_id)
            change = self._next_change(conn)
            for item in items:
                if self._upsert_chunk(conn, tenant, item, ChunkWrite("api", model_id, change)):
                    updated += 1
                else:
                    inserted += 1
        return inserted, updated

    def extend_caller_expiry(self, tenant: str, expiries: Mapping[str, float]) -> int:
        """Move the expiry of live, unexpired caller-made chunks (``chunk_id -> epoch
        seconds``) in their column and their metadata; text and vectors stay. Returns how
        many were moved (an expired or deleted chunk is not brought back)."""
        if not expiries:
            return 0
        moved = 0
        now = self.now()
        with self._write() as conn:
            for chunk_id, expires in expiries.items():
                row = conn.execute(
                    "SELECT rowid, metadata FROM chunks WHERE tenant=? AND chunk_id=? AND "
                    "deleted=0 AND origin='api' AND (expires_at IS NULL OR expires_at > ?)",
                    (tenant, chunk_id, now),
                ).fetchone()
                if row is None:
                    continue
                metadata = json.loads(row[1])
                metadata["expires_at"] = datetime.fromtimestamp(expires, UTC).isoformat()
                conn.execute(
                    "UPDATE chunks SET expires_at=?, metadata=?, updated_at=? "
                    "WHERE tenant=? AND rowid=?",
                    (expires, json.dumps(metadata, ensure_ascii=False), now, tenant, row[0]),
                )
                moved += 1
        return moved

    # -- delete and purge --------------------------------------------------------------

    def _tombstone_chunks(self, conn: Connection, tenant: str, rowids: Sequence[int]) -> None:
        change = self._next_change(conn)
        self._unindex(conn, tenant, rowids)
        conn.executemany(
            "UPDATE chunks SET deleted=1, vector=NULL, turn_vectors=NULL, turn_tokens=NULL, "
            "updated_at=?, "
            "change_seq=?, "
            f"metadata={self.TOMBSTONE_METADATA} WHERE tenant=? AND rowid=?",
            [(self.now(), change, tenant, rowid) for rowid in rowids],
        )

    def delete_turns(
        self, tenant: str, conversation_id: str, turn_range: tuple[int, int]
    ) -> tuple[int, int, int | None]:
        """Logically delete turns in a range and every chunk overlapping it; re-cut the rest.

        Returns ``(chunks_deleted, turns_deleted, job_id)``; the job re-chunks the
        surviving turns of the deleted chunks.
        """
        start, end = turn_range
        now = self.now()
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
        now = self.now()
        with self._write() as conn:
            sql = "SELECT conversation_id, last_seq FROM conversations WHERE tenant=?"
            params: list[Any] = [tenant]
            if conversation_id is not None:
                sql += " AND conversation_id=?"
                params.append(conversation_id)
            conversations = conn.execute(sql + " ORDER BY conversation_id", params).fetchall()
            change = self._next_change(conn)
            for conversation, last_seq in conversations:
                # as every writer of a conversation does (in one order: no deadlock), so an
                # index pass under way cannot write its frontier back over the reset
                self._lock_conversation(conn, tenant, conversation)
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
        rows = select_in(
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
                for row in select_in(
                    conn,
                    "SELECT rowid FROM chunks WHERE tenant=? AND deleted=0 AND chunk_id IN ({marks})",
                    chunk_ids,
                    before=[tenant],
                )
            ]
            self._tombstone_chunks(conn, tenant, rowids)
        return len(rowids)

    def purge(self, tenant: str | None) -> dict[str, int]:
        """Physically remove deleted text of one tenant (None: every tenant, an operator's
        command): tombstoned chunks, its story projects' too (their spaces are named
        ``tenant + "\\x1f" + ...``, and no tenant name holds a control character), deleted
        turns' text, deleted or expired notes, the error messages of jobs over deleted turns.

        Turn rows stay as tombstones (id and hash only) so a re-sent deleted turn is
        recognised and not stored again.
        """
        scope, params = ("", []) if tenant is None else (" AND tenant=?", [tenant])
        spaces: list[Any] = [] if tenant is None else [tenant, len(tenant) + 1, tenant + "\x1f"]
        with self._write() as conn:
            chunks = conn.execute(
                "DELETE FROM chunks WHERE deleted=1"
                + ("" if tenant is None else " AND (tenant=? OR substr(tenant, 1, ?)=?)"),
                spaces,
            ).rowcount
            turns = conn.execute(
                "UPDATE turns SET text=NULL, name=NULL, meta='{}' WHERE deleted=1 AND "
                "text IS NOT NULL" + scope,
                params,
            ).rowcount
            notes = self._purge_notes(conn, tenant)
            # a failed job's message may quote its turns (an endpoint's error answer)
            conn.execute(
                "UPDATE jobs SET error_message=NULL WHERE error_message IS NOT NULL"
                + scope
                + " AND EXISTS (SELECT 1 FROM turns WHERE turns.tenant=jobs.tenant AND "
                "turns.conversation_id=jobs.conversation_id AND turns.deleted=1 AND "
                "turns.seq BETWEEN jobs.min_seq AND jobs.max_seq)",
                params,
            )
        self._after_purge()
        logger.info(
            "purged %d chunks and %d turns from %s (%s)",
            chunks,
            turns,
            self.url,
            "every tenant" if tenant is None else "one tenant",
        )
        return {"chunks": chunks, "turns": turns, "notes": notes}
