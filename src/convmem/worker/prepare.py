"""One conversation's index pass, computed before anything is written: marks, pins,
notes and re-planned chunks.

Planning starts at the frontier (the last final chunk); it moves back when a late turn, a
delete, a user verdict or an overlay from a new turn (a pin, a confirmed decision) changes
the effective mark of a turn already planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from convmem.errors import MarkingError
from convmem.governance import (
    Derived,
    GovernancePolicy,
    Marker,
    MarkTurn,
    NoteDraft,
    PinRecord,
    TurnMark,
    derive,
    parse_marks,
)
from convmem.ingest import ChunkingPolicy, ChunkTurn, plan_chunks, render_chunk
from convmem.models import ChunkRecord
from convmem.store import ClaimedJob, IndexedChunk, MarkRow, MarkWrite, SQLStore, StoredTurn
from convmem.text import clean_text

__all__ = ["Prepared", "iso", "prepare"]

# A change to an earlier turn moves the frontier back at most this many times per pass.
MAX_REWINDS = 16


@dataclass
class Prepared:
    """One conversation's pass, ready to embed and write."""

    tenant: str
    conversation_id: str
    jobs: list[ClaimedJob]
    revision: int
    supersede_after: int
    records: list[ChunkRecord]
    frontier: tuple[int, int] | None
    indexed_seq: int | None
    marks_from: int | None = None
    marks: list[MarkWrite] = field(default_factory=list)
    pins: list[PinRecord] = field(default_factory=list)
    notes: list[NoteDraft] = field(default_factory=list)
    chunks: list[IndexedChunk] = field(default_factory=list)


@dataclass
class _Window:
    """The turns a pass reads and what was derived from them."""

    frontier: tuple[int, int] | None
    start: int
    window: list[StoredTurn]
    base: dict[int, TurnMark]
    marker_of: dict[int, str]
    derived: Derived


def prepare(
    store: SQLStore,
    marker: Marker,
    policy: GovernancePolicy,
    chunking: ChunkingPolicy,
    jobs: list[ClaimedJob],
) -> Prepared:
    """Mark new turns, derive effective marks, pins and notes, and re-plan the chunks of
    the conversation the jobs belong to."""
    tenant, conversation_id = jobs[0].tenant, jobs[0].conversation_id
    state = store.conversation_state(tenant, conversation_id)
    frontier = state.frontier
    if state.rewind_to is not None and frontier is not None:
        frontier = _earlier(
            frontier, _safe_frontier(store, tenant, conversation_id, state.rewind_to)
        )
    read = _settle(store, marker, policy, tenant, conversation_id, frontier)
    effective = read.derived.effective
    after = read.frontier[1] if read.frontier is not None else -1
    kept = [t for t in read.window if t.seq > after and effective[t.seq].keep]
    carry: list[StoredTurn] = []
    if read.frontier is not None and chunking.overlap_turns:
        low, high = read.frontier
        carry = [t for t in read.window if low <= t.seq <= high and effective[t.seq].keep]
        carry = carry[-chunking.overlap_turns :]
    plans = plan_chunks(
        [_chunk_turn(t, effective[t.seq]) for t in kept],
        [_chunk_turn(t, effective[t.seq]) for t in carry],
        chunking,
    )
    records = [
        _govern(
            render_chunk(conversation_id, plan, chunking, tenant=tenant),
            [t.seq for t in plan.turns],
            read.derived,
        )
        for plan in plans
    ]
    new_frontier = read.frontier
    for plan in plans:
        if plan.final:
            new_frontier = (plan.start, plan.end)
    return Prepared(
        tenant=tenant,
        conversation_id=conversation_id,
        jobs=jobs,
        revision=state.revision,
        supersede_after=after,
        records=records,
        frontier=new_frontier,
        indexed_seq=read.window[-1].seq if read.window else state.indexed_seq,
        marks_from=read.start,
        marks=_mark_writes(read),
        pins=read.derived.pins,
        notes=read.derived.notes,
    )


def _settle(
    store: SQLStore,
    marker: Marker,
    policy: GovernancePolicy,
    tenant: str,
    conversation_id: str,
    frontier: tuple[int, int] | None,
) -> _Window:
    """Read and derive from the frontier, moving it back until no turn already planned
    changes its effective mark (a pin, a verdict, an expiry)."""
    pin_status = store.pin_decisions(tenant, conversation_id)
    for _ in range(MAX_REWINDS):
        start = frontier[0] if frontier is not None else 0
        context = store.load_turns(
            tenant, conversation_id, before=start, limit=2 * policy.pin_window, newest_first=True
        )
        window = store.load_turns(tenant, conversation_id, after=start - 1)
        turns = [*reversed(context), *window]
        stored = store.load_marks(tenant, conversation_id, turns[0].seq if turns else start)
        base, marker_of = _base_marks(marker, turns, stored, policy)
        derived = derive(
            conversation_id,
            [_mark_turn(turn) for turn in turns],
            base,
            policy,
            new_from=start,
            accepted_at={turn.seq: turn.accepted_at for turn in turns},
            pin_status=pin_status,
            decisions={seq: row.decision for seq, row in stored.items() if row.decision},
            expired={seq for seq, row in stored.items() if row.expired},
        )
        read = _Window(frontier, start, window, base, marker_of, derived)
        # A turn already planned whose effective mark changed: its unit, and so the last
        # chunk closed before it, may change. Turns before ``start`` are context; only
        # overlay targets among them are derived from a complete window.
        changed = [
            seq
            for seq, mark in derived.effective.items()
            if (seq >= start or seq in derived.overlay_targets)
            and seq in stored
            and stored[seq].effective is not None
            and stored[seq].effective != mark
        ]
        if not changed or frontier is None:
            return read
        safe = _safe_frontier(store, tenant, conversation_id, min(changed))
        if safe is not None and safe[1] >= frontier[1]:
            return read
        frontier = safe
    return read


def _mark_writes(read: _Window) -> list[MarkWrite]:
    derived = read.derived
    return [
        MarkWrite(
            seq=turn.seq,
            turn_id=turn.turn_id,
            marker=read.marker_of[turn.seq],
            base=read.base[turn.seq],
            effective=derived.effective[turn.seq],
            expires_at=derived.expires_at[turn.seq],
        )
        for turn in read.window
    ]


def _safe_frontier(
    store: SQLStore, tenant: str, conversation_id: str, seq: int
) -> tuple[int, int] | None:
    """The last final chunk whose plan a change at ``seq`` cannot alter.

    A chunk is final because of the unit that followed it; a change at ``seq`` may alter
    the unit after the last chunk ending before it, so planning restarts one chunk earlier.
    """
    before = store.last_final_chunk_before(tenant, conversation_id, seq)
    if before is None:
        return None
    return store.last_final_chunk_before(tenant, conversation_id, before[1])


def _base_marks(
    marker: Marker,
    turns: Sequence[StoredTurn],
    stored: Mapping[int, MarkRow],
    policy: GovernancePolicy,
) -> tuple[dict[int, TurnMark], dict[int, str]]:
    """Stored base marks, and new ones from the marker for turns without one."""
    base = {seq: row.base for seq, row in stored.items()}
    marker_of = {seq: row.marker for seq, row in stored.items()}
    todo = [turn for turn in turns if turn.seq not in base]
    if todo:
        first = todo[0].seq
        context = [_mark_turn(t) for t in turns if t.seq < first]
        raw = marker.mark([_mark_turn(t) for t in todo], context, policy)
        marks, errors = parse_marks(
            [{"turn_id": t.turn_id, "text": t.text} for t in todo], raw, require_all=True
        )
        if errors:
            shown = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
            raise MarkingError(
                f"marker {marker.name} returned invalid marks: {shown}",
                code="marker_invalid_marks",
                errors=[e.as_dict() for e in errors],
            )
        for turn, mark in zip(todo, marks, strict=True):
            base[turn.seq] = mark
            marker_of[turn.seq] = marker.name
    return base, marker_of


def _earlier(frontier: tuple[int, int], other: tuple[int, int] | None) -> tuple[int, int] | None:
    return other if other is None or other[1] < frontier[1] else frontier


def _mark_turn(turn: StoredTurn) -> MarkTurn:
    return MarkTurn(
        seq=turn.seq,
        turn_id=turn.turn_id,
        role=turn.role,
        text=turn.text,
        timestamp=turn.timestamp.timestamp(),
        name=turn.name,
    )


def _chunk_turn(turn: StoredTurn, mark: TurnMark | None = None) -> ChunkTurn:
    text = turn.text
    if mark is not None and mark.span is not None:
        text = text[mark.span.start : mark.span.end]
    return ChunkTurn(
        seq=turn.seq,
        role=turn.role,
        text=clean_text(text),
        timestamp=turn.timestamp,
        name=turn.name,
    )


def iso(epoch: float | None) -> str | None:
    """An epoch time as ISO 8601 in UTC (None stays None)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else None


def _govern(record: ChunkRecord, seqs: Sequence[int], derived: Derived) -> ChunkRecord:
    """Chunk governance metadata from its turns' effective marks.

    Importance and category of the most important turn, and each turn's own
    (``turn_categories``, ``turn_importance``, in ``turn_seqs`` order: a turn-level hit
    carries its turn's); pinned or pending when any turn is, and which turns are
    (``pinned_seqs``, ``pending_seqs``: a turn-level hit is pending only when its own turn
    is, not when a neighbour in its chunk awaits confirmation); the
    chunk expires with its first turn to expire (the sweep then re-cuts it without that
    turn), so expired text is never returned.
    """
    marks = [derived.effective[seq] for seq in seqs]
    top = max(marks, key=lambda mark: mark.importance)
    expiries = [e for e in (derived.expires_at[seq] for seq in seqs) if e is not None]
    update: dict[str, Any] = {
        "importance": top.importance,
        "category": top.category,
        "expires_at": iso(min(expiries)) if expiries else None,
        "pinned": any(mark.user_triggered_save for mark in marks),
        "requires_confirmation": any(mark.requires_confirmation for mark in marks),
        "pinned_seqs": [
            seq for seq, mark in zip(seqs, marks, strict=True) if mark.user_triggered_save
        ],
        "pending_seqs": [
            seq for seq, mark in zip(seqs, marks, strict=True) if mark.requires_confirmation
        ],
        # each turn's own, in turn_seqs order (a turn hit carries its turn's, not the top's)
        "turn_categories": [mark.category for mark in marks],
        "turn_importance": [mark.importance for mark in marks],
        "turn_seqs": list(seqs),
    }
    return record.model_copy(update={"metadata": record.metadata.model_copy(update=update)})
