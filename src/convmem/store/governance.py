"""Governance tables of the store: marks, pins, notes, tenant policies.

Marks keep the marker's *base* label of each turn (never rewritten) and the *effective*
label after pins, user decisions and expiry. Pins and notes are derived from marks by the
index worker and written in the same transaction as the chunks; the user's verdicts
(confirm/reject) are kept across re-derivation. Deleting turns deletes the marks, pins
and notes that came from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from convmem.errors import InvalidInputError, NotFoundError
from convmem.governance import Decision, Note, NoteDraft, PinRecord, TurnMark
from convmem.store.contract import Backend
from convmem.store.dbapi import Connection
from convmem.store.records import MarkRow, MarkWrite

__all__ = ["GovernanceTables", "MarkRow", "MarkWrite"]

GOVERNANCE_SCHEMA = """
CREATE TABLE IF NOT EXISTS marks (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    marker TEXT NOT NULL,
    base TEXT NOT NULL,
    effective TEXT,
    keep INTEGER NOT NULL DEFAULT 0,
    expires_at REAL,
    expired INTEGER NOT NULL DEFAULT 0,
    decision TEXT,
    decision_evidence TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, conversation_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS marks_expiry ON marks (expires_at) WHERE expires_at IS NOT NULL AND expired = 0;
CREATE TABLE IF NOT EXISTS pins (
    tenant TEXT NOT NULL,
    pin_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    trigger_seq INTEGER NOT NULL,
    target_seqs TEXT NOT NULL,
    intent TEXT NOT NULL,
    status TEXT NOT NULL,
    decided INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, pin_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pins_conversation ON pins (tenant, conversation_id, trigger_seq);
CREATE TABLE IF NOT EXISTS notes (
    tenant TEXT NOT NULL,
    note_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    category TEXT NOT NULL,
    subtype TEXT,
    evidence_level TEXT NOT NULL,
    importance REAL NOT NULL,
    ttl_seconds INTEGER NOT NULL,
    forget_policy TEXT NOT NULL,
    expires_at REAL,
    text TEXT,
    source_seqs TEXT NOT NULL,
    source_turn_ids TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    origin_seq INTEGER NOT NULL,
    requires_confirmation INTEGER NOT NULL,
    status TEXT NOT NULL,
    decided INTEGER NOT NULL DEFAULT 0,
    pin_id TEXT,
    deleted INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, note_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS notes_conversation ON notes (tenant, conversation_id, origin_seq);
CREATE INDEX IF NOT EXISTS notes_status ON notes (tenant, status, deleted);
CREATE TABLE IF NOT EXISTS policies (
    tenant TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    updated_at REAL NOT NULL
)
"""

NOTE_COLUMNS = (
    "note_id, conversation_id, kind, category, subtype, evidence_level, importance, "
    "ttl_seconds, forget_policy, expires_at, text, source_seqs, source_turn_ids, "
    "requires_confirmation, status, pin_id, created_at, updated_at"
)


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else None


def _note(row: Sequence[Any]) -> Note:
    """A ``notes`` row (``NOTE_COLUMNS`` order) as the public ``Note``."""
    names = [name.strip() for name in NOTE_COLUMNS.split(",")]
    data = dict(zip(names, row, strict=True))
    data["source_turn_ids"] = json.loads(data["source_turn_ids"])
    data["requires_confirmation"] = bool(data["requires_confirmation"])
    data["text"] = data["text"] or ""
    del data["source_seqs"]
    for name in ("expires_at", "created_at", "updated_at"):
        data[name] = _iso(data[name])
    return Note.model_validate(data)


class GovernanceTables(Backend):
    """Mixin for :class:`~convmem.store.base.SQLStore` (uses its connection helpers)."""

    # -- reads used by the worker ---------------------------------------------------------

    def load_marks(self, tenant: str, conversation_id: str, from_seq: int) -> dict[int, MarkRow]:
        rows = self._db().execute(
            "SELECT seq, marker, base, effective, expired, decision, decision_evidence, "
            "expires_at FROM marks WHERE tenant=? AND conversation_id=? AND seq >= ?",
            (tenant, conversation_id, from_seq),
        )
        out: dict[int, MarkRow] = {}
        for row in rows:
            out[row[0]] = MarkRow(
                marker=row[1],
                base=TurnMark.model_validate_json(row[2]),
                effective=TurnMark.model_validate_json(row[3]) if row[3] else None,
                expired=bool(row[4]),
                decision=Decision(row[5], row[6]) if row[5] else None,
                expires_at=row[7],
            )
        return out

    def pin_decisions(self, tenant: str, conversation_id: str) -> dict[str, Decision]:
        rows = self._db().execute(
            "SELECT pin_id, status FROM pins WHERE tenant=? AND conversation_id=? AND decided=1",
            (tenant, conversation_id),
        )
        return {row[0]: Decision(row[1]) for row in rows}

    # -- writes inside the worker's transaction -------------------------------------------

    def _write_governance(
        self,
        conn: Connection,
        tenant: str,
        conversation_id: str,
        *,
        from_seq: int,
        marks: Sequence[MarkWrite],
        pins: Sequence[PinRecord],
        notes: Sequence[NoteDraft],
        now: float,
    ) -> None:
        conn.executemany(
            "INSERT INTO marks (tenant, conversation_id, seq, turn_id, marker, base, effective, "
            "keep, expires_at, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (tenant, conversation_id, seq) DO UPDATE SET "
            "effective=excluded.effective, keep=excluded.keep, expires_at=excluded.expires_at, "
            "updated_at=excluded.updated_at",
            [
                (
                    tenant,
                    conversation_id,
                    mark.seq,
                    str(mark.turn_id),
                    mark.marker,
                    mark.base.model_dump_json(),
                    mark.effective.model_dump_json(),
                    1 if mark.effective.keep else 0,
                    mark.expires_at,
                    now,
                    now,
                )
                for mark in marks
            ],
        )
        self._write_pins(conn, tenant, conversation_id, from_seq, pins, now)
        self._write_notes(conn, tenant, conversation_id, from_seq, notes, now)

    def _write_pins(
        self,
        conn: Connection,
        tenant: str,
        conversation_id: str,
        from_seq: int,
        pins: Sequence[PinRecord],
        now: float,
    ) -> None:
        """The pass's pins from ``from_seq`` on; a user's verdict on a pin survives."""
        new_pins = {pin.intent.pin_id for pin in pins}
        for (old,) in conn.execute(
            "SELECT pin_id FROM pins WHERE tenant=? AND conversation_id=? AND trigger_seq >= ?",
            (tenant, conversation_id, from_seq),
        ).fetchall():
            if old not in new_pins:
                conn.execute("DELETE FROM pins WHERE tenant=? AND pin_id=?", (tenant, old))
        for pin in pins:
            conn.execute(
                "INSERT INTO pins (tenant, pin_id, conversation_id, trigger_seq, target_seqs, "
                "intent, status, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (tenant, pin_id) DO UPDATE SET target_seqs=excluded.target_seqs, "
                "intent=excluded.intent, updated_at=excluded.updated_at, "
                "status=CASE WHEN pins.decided=1 THEN pins.status ELSE excluded.status END",
                (
                    tenant,
                    pin.intent.pin_id,
                    conversation_id,
                    pin.trigger_seq,
                    json.dumps(list(pin.target_seqs)),
                    pin.intent.model_dump_json(),
                    pin.status,
                    now,
                    now,
                ),
            )

    def _write_notes(
        self,
        conn: Connection,
        tenant: str,
        conversation_id: str,
        from_seq: int,
        notes: Sequence[NoteDraft],
        now: float,
    ) -> None:
        """The pass's notes from ``from_seq`` on; a user's verdict on a note survives."""
        new_notes = {note.note_id for note in notes}
        for (old,) in conn.execute(
            "SELECT note_id FROM notes WHERE tenant=? AND conversation_id=? AND origin_seq >= ? "
            "AND deleted=0 AND NOT (decided=1 AND status='rejected')",
            (tenant, conversation_id, from_seq),
        ).fetchall():
            if old not in new_notes:
                conn.execute("DELETE FROM notes WHERE tenant=? AND note_id=?", (tenant, old))
        for note in notes:
            conn.execute(
                "INSERT INTO notes (tenant, note_id, conversation_id, kind, category, subtype, "
                "evidence_level, importance, ttl_seconds, forget_policy, expires_at, text, "
                "source_seqs, source_turn_ids, first_seq, last_seq, origin_seq, "
                "requires_confirmation, status, pin_id, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (tenant, note_id) DO UPDATE SET category=excluded.category, "
                "subtype=excluded.subtype, importance=excluded.importance, "
                "ttl_seconds=excluded.ttl_seconds, forget_policy=excluded.forget_policy, "
                "expires_at=excluded.expires_at, text=excluded.text, "
                "source_seqs=excluded.source_seqs, source_turn_ids=excluded.source_turn_ids, "
                "first_seq=excluded.first_seq, last_seq=excluded.last_seq, "
                "origin_seq=excluded.origin_seq, updated_at=excluded.updated_at, deleted=0, "
                "evidence_level=CASE WHEN notes.decided=1 THEN notes.evidence_level "
                "ELSE excluded.evidence_level END, "
                "requires_confirmation=CASE WHEN notes.decided=1 THEN notes.requires_confirmation "
                "ELSE excluded.requires_confirmation END, "
                "status=CASE WHEN notes.decided=1 THEN notes.status ELSE excluded.status END",
                (
                    tenant,
                    note.note_id,
                    conversation_id,
                    note.kind,
                    note.category,
                    note.subtype,
                    note.evidence_level,
                    note.importance,
                    note.ttl_seconds,
                    note.forget_policy,
                    note.expires_at,
                    note.text,
                    json.dumps(list(note.source_seqs)),
                    json.dumps(list(note.source_turn_ids), ensure_ascii=False),
                    min(note.source_seqs),
                    max(note.source_seqs),
                    note.origin_seq,
                    1 if note.requires_confirmation else 0,
                    note.status,
                    note.pin_id,
                    now,
                    now,
                ),
            )

    def _cascade_delete(
        self, conn: Connection, tenant: str, conversation_id: str, start: int, end: int
    ) -> int:
        """Delete marks, pins and notes derived from turns in ``[start, end]``.

        A pin whose save request is deleted goes, and so does one whose every target is.
        A pin that loses only some targets keeps its row, narrowed to the survivors, so
        the user's verdict on it survives; its note is hidden (its text still says the
        deleted turns) until the worker rewrites it from the turns that are left.

        Returns the smallest turn whose effective mark may change (a touched pin's
        targets), so the caller re-plans from there.
        """
        rewind = start
        conn.execute(
            "DELETE FROM marks WHERE tenant=? AND conversation_id=? AND seq BETWEEN ? AND ?",
            (tenant, conversation_id, start, end),
        )
        touched_pins: list[str] = []
        for pid, trigger, targets in conn.execute(
            "SELECT pin_id, trigger_seq, target_seqs FROM pins WHERE tenant=? AND "
            "conversation_id=?",
            (tenant, conversation_id),
        ).fetchall():
            seqs: list[int] = json.loads(targets)
            survivors = [seq for seq in seqs if not start <= seq <= end]
            if not start <= trigger <= end and len(survivors) == len(seqs):
                continue
            touched_pins.append(pid)
            rewind = min(rewind, *seqs)
            if start <= trigger <= end or not survivors:
                conn.execute("DELETE FROM pins WHERE tenant=? AND pin_id=?", (tenant, pid))
            else:
                conn.execute(
                    "UPDATE pins SET target_seqs=? WHERE tenant=? AND pin_id=?",
                    (json.dumps(survivors), tenant, pid),
                )
        now = self.now()
        for nid, sources, pid in conn.execute(
            "SELECT note_id, source_seqs, pin_id FROM notes WHERE tenant=? AND conversation_id=? "
            "AND deleted=0 AND ((first_seq <= ? AND last_seq >= ?) OR pin_id IS NOT NULL)",
            (tenant, conversation_id, end, start),
        ).fetchall():
            if (pid is not None and pid in touched_pins) or any(
                start <= seq <= end for seq in json.loads(sources)
            ):
                conn.execute(
                    "UPDATE notes SET deleted=1, updated_at=? WHERE tenant=? AND note_id=?",
                    (now, tenant, nid),
                )
        return rewind

    # -- notes API ------------------------------------------------------------------------

    def notes(
        self,
        tenant: str,
        *,
        conversation_id: str | None = None,
        status: str | None = None,
        limit: int = 1000,
        now: float | None = None,
    ) -> list[Note]:
        """Live notes (not deleted, not expired); ``status`` None: pending and confirmed."""
        now = self.now() if now is None else now
        sql = (
            f"SELECT {NOTE_COLUMNS} FROM notes WHERE tenant=? AND deleted=0 AND expired=0 AND "
            "(expires_at IS NULL OR expires_at > ?)"
        )
        params: list[Any] = [tenant, now]
        if conversation_id is not None:
            sql += " AND conversation_id=?"
            params.append(conversation_id)
        if status is None:
            sql += " AND status IN ('pending', 'confirmed')"
        else:
            sql += " AND status=?"
            params.append(status)
        order = self.CODE_POINTS
        sql += f" ORDER BY conversation_id{order}, first_seq, note_id{order} LIMIT ?"
        params.append(limit)
        return [_note(row) for row in self._db().execute(sql, params)]

    def note(self, tenant: str, note_id: str, *, now: float | None = None) -> Note:
        now = self.now() if now is None else now
        row = (
            self._db()
            .execute(
                f"SELECT {NOTE_COLUMNS} FROM notes WHERE tenant=? AND note_id=? AND deleted=0 "
                "AND expired=0 AND (expires_at IS NULL OR expires_at > ?)",
                (tenant, note_id, now),
            )
            .fetchone()
        )
        if row is None:
            raise NotFoundError(f"note {note_id} not found (deleted, expired or never written)")
        return _note(row)

    def decide_note(
        self, tenant: str, note_id: str, *, status: str, evidence_level: str | None
    ) -> tuple[Note, int | None]:
        """Record the user's verdict on a note and queue its conversation to re-plan.

        Returns the updated note and the job id.
        """
        now = self.now()
        with self._write() as conn:
            note = self.note(tenant, note_id, now=now)
            self._lock_conversation(conn, tenant, note.conversation_id)
            sources: list[int] = json.loads(
                conn.execute(
                    "SELECT source_seqs FROM notes WHERE tenant=? AND note_id=?", (tenant, note_id)
                ).fetchone()[0]
            )
            conn.execute(
                "UPDATE notes SET status=?, decided=1, updated_at=?, "
                "requires_confirmation=CASE WHEN ?='confirmed' THEN 0 ELSE requires_confirmation END, "
                "evidence_level=coalesce(?, evidence_level) WHERE tenant=? AND note_id=?",
                (status, now, status, evidence_level, tenant, note_id),
            )
            if note.pin_id is not None:
                conn.execute(
                    "UPDATE pins SET status=?, decided=1, updated_at=? WHERE tenant=? AND pin_id=?",
                    (status, now, tenant, note.pin_id),
                )
            else:
                conn.executemany(
                    "UPDATE marks SET decision=?, decision_evidence=?, updated_at=? WHERE "
                    "tenant=? AND conversation_id=? AND seq=?",
                    [
                        (status, evidence_level, now, tenant, note.conversation_id, seq)
                        for seq in sources
                    ],
                )
            job_id = self._rewind(conn, tenant, note.conversation_id, min(sources), now)
        return self.note(tenant, note_id), job_id

    def _rewind(
        self, conn: Connection, tenant: str, conversation_id: str, seq: int, now: float
    ) -> int | None:
        """Queue a conversation to re-plan its chunks from ``seq``."""
        self._lock_conversation(conn, tenant, conversation_id)
        state = conn.execute(
            "SELECT rewind_to, last_seq FROM conversations WHERE tenant=? AND conversation_id=?",
            (tenant, conversation_id),
        ).fetchone()
        if state is None:
            return None
        rewind = seq if state[0] is None else min(state[0], seq)
        conn.execute(
            "UPDATE conversations SET rewind_to=?, revision=revision+1 WHERE tenant=? AND "
            "conversation_id=?",
            (rewind, tenant, conversation_id),
        )
        row = conn.execute(
            "INSERT INTO jobs (tenant, conversation_id, min_seq, max_seq, status, "
            "next_retry_at, created_at, updated_at) VALUES (?,?,?,?,'pending',?,?,?) "
            "RETURNING job_id",
            (tenant, conversation_id, seq, max(seq, state[1] or seq), now, now, now),
        ).fetchone()
        return int(row[0])

    # -- marks and pins API ---------------------------------------------------------------

    def mark_rows(self, tenant: str, conversation_id: str) -> Iterator[tuple[Any, ...]]:
        """``(seq, turn_id, role, marker, effective, base, expires_at, expired, decision)``."""
        yield from self._db().execute(
            "SELECT m.seq, m.turn_id, t.role, m.marker, m.effective, m.base, m.expires_at, "
            "m.expired, m.decision FROM marks m JOIN turns t ON t.tenant=m.tenant AND "
            "t.conversation_id=m.conversation_id AND t.seq=m.seq WHERE m.tenant=? AND "
            "m.conversation_id=? AND t.deleted=0 ORDER BY m.seq",
            (tenant, conversation_id),
        )

    def pin_rows(self, tenant: str, conversation_id: str) -> list[tuple[str, str, str]]:
        """``(intent_json, status, target_seqs_json)`` of live pins, by trigger."""
        return (
            self._db()
            .execute(
                "SELECT intent, status, target_seqs FROM pins WHERE tenant=? AND conversation_id=? "
                "ORDER BY trigger_seq",
                (tenant, conversation_id),
            )
            .fetchall()
        )

    # -- expiry and policy ----------------------------------------------------------------

    def sweep_expired(self, now: float | None = None) -> dict[str, int]:
        """Mark expired turn labels and notes; queue their conversations to re-plan."""
        now = self.now() if now is None else now
        expired = 0
        with self._write() as conn:
            due = conn.execute(
                "SELECT tenant, conversation_id, min(seq) FROM marks WHERE "
                "expires_at IS NOT NULL AND expires_at <= ? AND expired=0 GROUP BY tenant, "
                "conversation_id ORDER BY tenant, conversation_id",
                (now,),
            ).fetchall()
            for tenant, conversation_id, first in due:
                # the conversation's lock before its marks' rows, as an index pass takes
                # them (the other order deadlocked with a pass on PostgreSQL)
                self._lock_conversation(conn, tenant, conversation_id)
                expired += conn.execute(
                    "UPDATE marks SET expired=1, updated_at=? WHERE tenant=? AND "
                    "conversation_id=? AND expires_at IS NOT NULL AND expires_at <= ? AND "
                    "expired=0",
                    (now, tenant, conversation_id, now),
                ).rowcount
                self._rewind(conn, tenant, conversation_id, first, now)
            notes = conn.execute(
                "UPDATE notes SET expired=1, updated_at=? WHERE expires_at IS NOT NULL AND "
                "expires_at <= ? AND expired=0 AND deleted=0",
                (now, now),
            ).rowcount
        return {"turn_marks": expired, "notes": notes}

    def get_policy(self, tenant: str) -> dict[str, Any] | None:
        row = self._db().execute("SELECT policy FROM policies WHERE tenant=?", (tenant,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_policy(self, tenant: str, policy: Mapping[str, Any] | None) -> None:
        with self._write() as conn:
            if policy is None:
                conn.execute("DELETE FROM policies WHERE tenant=?", (tenant,))
                return
            if not isinstance(policy, Mapping):
                raise InvalidInputError("policy must be a JSON object", field="policy")
            conn.execute(
                "INSERT INTO policies (tenant, policy, updated_at) VALUES (?,?,?) ON CONFLICT "
                "(tenant) DO UPDATE SET policy=excluded.policy, updated_at=excluded.updated_at",
                (tenant, json.dumps(dict(policy), ensure_ascii=False), self.now()),
            )

    def _purge_notes(self, conn: Connection, tenant: str | None) -> int:
        scope, params = ("", []) if tenant is None else (" AND tenant=?", [tenant])
        return conn.execute(
            "DELETE FROM notes WHERE (deleted=1 OR expired=1 OR "
            "(expires_at IS NOT NULL AND expires_at <= ?))" + scope,
            [self.now(), *params],
        ).rowcount
