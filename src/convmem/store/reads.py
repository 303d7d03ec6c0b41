"""Reads of live chunks under the filters (never deleted or expired), the change feed the
ANN sidecar follows, maintenance scans and statistics."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from convmem.store.contract import Backend
from convmem.store.filters import FilterSpec, to_sql
from convmem.store.records import matrix_bytes, select_in

__all__ = ["SCOPE_SCAN_ROWS", "ChunkReads"]

logger = logging.getLogger(__name__)

# A conversation of up to this many live chunks is searched by reading its rows: every
# row's tokens for BM25, every row's vector for the cosine (a few milliseconds). A larger
# one (a long-running conversation: scanning 5,000 chunks took 120-250 ms a search) is
# searched through the indexes (SQLiteStore._scope_documents, AnnIndex.search_within).
SCOPE_SCAN_ROWS = 1000


class ChunkReads(Backend):
    """Reads of live chunks: filters, candidates' rows, change feeds, maintenance, stats."""

    #: A conversation of more live chunks is searched through the indexes
    #: (:data:`SCOPE_SCAN_ROWS`).
    SCOPE_SCAN_ROWS = SCOPE_SCAN_ROWS

    def _live_clause(self, spec: FilterSpec) -> tuple[str, list[Any]]:
        where, params = to_sql(spec, dialect=self.DIALECT)
        return (
            f"c.tenant = ? AND c.deleted = 0 AND (c.expires_at IS NULL OR c.expires_at > ?) "
            f"AND {where}",
            params,
        )

    def scope_rowids(self, tenant: str, spec: FilterSpec, limit: int | None = None) -> list[int]:
        """The rowids of the live chunks the filter admits (for one conversation, from an
        index alone: ``chunks_live``), at most ``limit`` of them."""
        where, params = self._live_clause(spec)
        sql = f"SELECT c.rowid FROM chunks c WHERE {where}"
        if limit is not None:
            sql += " LIMIT ?"
            params = [*params, limit]
        rows = self._db().execute(sql, [tenant, self.now(), *params])
        return [int(row[0]) for row in rows]

    def admit(self, tenant: str, spec: FilterSpec, rowids: Sequence[int]) -> set[int]:
        """Which of ``rowids`` are live and pass the filter (post-check for ANN candidates)."""
        if not rowids:
            return set()
        where, params = self._live_clause(spec)
        rows = select_in(
            self._db(),
            f"SELECT c.rowid FROM chunks c {self.NOT_INDEXED} WHERE c.rowid IN ({{marks}}) AND {where}",
            rowids,
            after=[tenant, self.now(), *params],
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

    def conversation_participants(self, tenant: str, conversation_id: str) -> list[str]:
        """Who speaks in one conversation, sorted: the participants of its live chunks
        (names, or "user" / "用户" where a turn has none)."""
        return sorted(
            self._speakers(
                "SELECT DISTINCT participants FROM chunks WHERE tenant=? AND conversation_id=? "
                "AND deleted=0",
                [tenant, conversation_id],
            )
        )

    def participants_since(self, tenant: str, after: int | None, upto: int) -> set[str]:
        """Who speaks in the tenant's live chunks that changed after change number ``after``
        up to ``upto`` (``after`` None: every live chunk, read from the participants index
        alone, whatever its change). A tenant-wide search keeps the set and reads only what
        changed since."""
        if after is None:
            sql = "SELECT DISTINCT participants FROM chunks WHERE tenant=? AND deleted=0"
            params: list[Any] = [tenant]
        else:
            sql = (
                "SELECT DISTINCT participants FROM chunks WHERE tenant=? AND change_seq > ? "
                "AND change_seq <= ? AND deleted=0"
            )
            params = [tenant, after, upto]
        return self._speakers(sql, params)

    def _speakers(self, sql: str, params: Sequence[Any]) -> set[str]:
        """Every name in the ``participants`` lists a query of them returns."""
        found: set[str] = set()
        for (value,) in self._db().execute(sql, params):
            found.update(json.loads(value) if isinstance(value, str) else value or [])
        return found

    def caller_chunks(
        self,
        tenant: str,
        *,
        conversation_id: str | None = None,
        chunk_ids: Sequence[str] | None = None,
        spec: FilterSpec | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """Live, unexpired caller-made chunks (``origin='api'``): ``(chunk_id, text,
        metadata)``, oldest first, of one conversation and/or among ``chunk_ids``, under
        the filter ``spec``."""
        sql = (
            "SELECT c.chunk_id, c.text, c.metadata FROM chunks c WHERE c.tenant=? AND "
            "c.deleted=0 AND c.origin='api' AND (c.expires_at IS NULL OR c.expires_at > ?)"
        )
        params: list[Any] = [tenant, self.now()]
        if conversation_id is not None:
            sql += " AND c.conversation_id=?"
            params.append(conversation_id)
        if chunk_ids is not None:
            if not chunk_ids:
                return []
            sql += f" AND c.chunk_id IN ({','.join('?' * len(chunk_ids))})"
            params.extend(chunk_ids)
        if spec is not None:
            where, values = to_sql(spec, dialect=self.DIALECT)
            sql += f" AND {where}"
            params.extend(values)
        sql += " ORDER BY c.rowid LIMIT ? OFFSET ?"
        rows = self._db().execute(sql, [*params, limit, offset]).fetchall()
        return [(row[0], row[1], json.loads(row[2])) for row in rows]

    def changes_since(
        self, tenant: str, after: int, upto: int, *, page: int = 50_000, model_id: str | None = None
    ) -> Iterator[list[tuple[int, bytes | None]]]:
        """Pages of ``(rowid, vector or None if deleted)`` changed in ``(after, upto]``;
        with ``model_id``, a vector another model made is None too (a store part way
        through a reindex holds both).

        Keyset-paginated on ``(change_seq, rowid)``, so a rebuild never holds more than one
        page of vectors in memory.
        """
        conn = self._db()
        cursor = (after, 0)
        while True:
            rows = conn.execute(
                "SELECT rowid, vector, deleted, change_seq, model_id FROM chunks WHERE tenant=? "
                "AND (change_seq, rowid) > (?, ?) AND change_seq <= ? ORDER BY change_seq, "
                "rowid LIMIT ?",
                (tenant, cursor[0], cursor[1], upto, page),
            ).fetchall()
            if not rows:
                return
            yield [
                (row[0], None if row[2] or model_id not in (None, row[4]) else row[1])
                for row in rows
            ]
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

    def iter_live_chunks(
        self, batch: int = 512
    ) -> Iterator[list[tuple[str, int, str, dict[str, Any]]]]:
        """Live chunks' ``(tenant, rowid, text, metadata)`` in batches, across tenants (for
        reindex; the tenant lets each update name its shard on Citus)."""
        last = 0
        conn = self._db()
        while True:
            rows = conn.execute(
                "SELECT tenant, rowid, text, metadata FROM chunks WHERE deleted=0 AND rowid > ? "
                "ORDER BY rowid LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            yield [(row[0], row[1], row[2], json.loads(row[3])) for row in rows]
            last = rows[-1][1]

    def replace_vectors(
        self,
        rows: Sequence[tuple[str, int, str, np.ndarray, np.ndarray | None, str | None]],
        model_id: str,
    ) -> None:
        """New vectors (and turn vectors, None for none) and stored line tokens
        (convmem.ingest.line_tokens) for live chunks, by ``(tenant, rowid, text)``, of the
        store's model (:meth:`set_embedding_model` first). A row whose chunk was deleted, or
        now holds other text, since it was read is left alone: a chunk rewritten while a
        reindex embedded its old text kept the old text's vector, and a purged chunk's
        rowid taken by a new chunk got the purged text's vector and line tokens."""
        with self._write() as conn:
            self._check_model(conn, model_id)
            change = self._next_change(conn)
            conn.executemany(
                f"UPDATE chunks SET vector={self.VECTOR_PARAM}, turn_vectors=?, turn_tokens=?, "
                "model_id=?, change_seq=? WHERE tenant=? AND rowid=? AND deleted=0 AND text=?",
                [
                    (
                        self._vector_param(vector),
                        None if lines is None else matrix_bytes(lines),
                        tokens,
                        model_id,
                        change,
                        tenant,
                        rowid,
                        text,
                    )
                    for tenant, rowid, text, vector, lines, tokens in rows
                ],
            )

    def turn_parts(
        self, tenant: str, rowids: Sequence[int], model_id: str | None = None
    ) -> dict[int, tuple[bytes | None, str | None]]:
        """``rowid -> (turn vectors, stored line tokens)`` of the live chunks among ``rowids``
        that have either: the float32 rows of their turns back to back, and their lines'
        search tokens (convmem.ingest.line_tokens); None for what a chunk lacks. With
        ``model_id``, turn vectors of another model count as lacking (a store being
        reindexed holds both)."""
        if not rowids:
            return {}
        rows = self._db().execute(
            f"SELECT rowid, turn_vectors, turn_tokens, model_id FROM chunks {self.NOT_INDEXED} "
            "WHERE tenant=? AND deleted=0 AND (turn_vectors IS NOT NULL OR turn_tokens IS NOT "
            f"NULL) AND rowid IN ({','.join('?' * len(rowids))})",
            [tenant, *rowids],
        )
        return {
            row[0]: (
                None
                if row[1] is None or (model_id is not None and row[3] != model_id)
                else bytes(row[1]),
                None if row[2] is None else str(row[2]),
            )
            for row in rows
        }

    def holds_live_chunks(self, tenant: str, count: int) -> bool:
        """Whether ``tenant`` has at least ``count`` live chunks (reads at most that many)."""
        row = (
            self._db()
            .execute(
                "SELECT count(*) FROM (SELECT 1 FROM chunks WHERE tenant=? AND deleted=0 LIMIT ?)",
                (tenant, count),
            )
            .fetchone()
        )
        return int(row[0]) >= count

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
