"""The event log: turns written durably with their index job, conversation state, reads."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from convmem.errors import TurnConflictError
from convmem.models import Turn
from convmem.store.contract import Backend
from convmem.store.records import ConversationState, StoredTurn, text_digest

__all__ = ["TurnTables"]

logger = logging.getLogger(__name__)


class TurnTables(Backend):
    """The event log: turns stored with their index job, read back in order."""

    def add_turns(
        self, tenant: str, conversation_id: str, turns: Sequence[Turn], *, accepted_at: datetime
    ) -> tuple[list[int | str], list[int | str], int | None]:
        """Store new turns and one index job atomically.

        Returns ``(accepted, duplicates, job_id)``. Re-sent identical turns are duplicates;
        a stored turn id with other text raises ``TurnConflictError`` and stores nothing.
        """
        now = self.now()
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
            accepted, duplicates, rows = self._new_rows(
                tenant, conversation_id, turns, stored, accepted_at, now
            )
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

    @staticmethod
    def _new_rows(
        tenant: str,
        conversation_id: str,
        turns: Sequence[Turn],
        stored: dict[int, Any],
        accepted_at: datetime,
        now: float,
    ) -> tuple[list[int | str], list[int | str], list[tuple[Any, ...]]]:
        """Rows for the turns not stored yet; identical re-sends are duplicates, a stored
        id with other text (or a deleted, retired id) is a conflict."""
        accepted: list[int | str] = []
        duplicates: list[int | str] = []
        rows: list[tuple[Any, ...]] = []
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
                        "are immutable: send the new text under a new turn id (delete this "
                        "turn if its text must go; its id stays retired)",
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
        return accepted, duplicates, rows

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
