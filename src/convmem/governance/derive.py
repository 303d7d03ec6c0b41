"""From base marks to effective marks, pins and notes: pure functions the worker replays.

A turn's *base* mark comes from the marker and never changes. Its *effective* mark adds
what later turns and the user decided about it:

- an explicit save request (seed 002 §4.3) pins its target turns (``PinIntent``);
- a user decision ("就这么定了", "let's go with that") confirms the assistant turn it
  answers, which is kept as a decision with S3 evidence;
- the user confirming or rejecting a derived note, and expiry.

Because later turns can change earlier marks, the worker re-plans chunks from the
earliest turn whose effective mark changed, the same way it handles a late turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convmem.governance.marker import ROLE_EVIDENCE, MarkTurn
from convmem.governance.policy import GovernancePolicy
from convmem.governance.rules import CONFIRMS, SaveIntent, save_intent
from convmem.governance.schema import EVIDENCE_ORDER, PinIntent, TurnMark

__all__ = ["Decision", "Derived", "NoteDraft", "PinRecord", "derive", "note_id", "pin_id"]

NOTE_CATEGORIES = {"preference", "rule", "task"}


def _digest(*parts: object) -> str:
    raw = json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def pin_id(conversation_id: str, trigger_seq: int) -> str:
    return "pin_" + _digest(conversation_id, "pin", trigger_seq)


def note_id(conversation_id: str, kind: str, key: object) -> str:
    return "note_" + _digest(conversation_id, kind, key)


@dataclass(frozen=True)
class Decision:
    """The user's verdict on a turn's note or a pin: ``confirmed`` or ``rejected``."""

    status: str
    evidence_level: str | None = None


@dataclass(frozen=True)
class PinRecord:
    intent: PinIntent
    trigger_seq: int
    target_seqs: tuple[int, ...]
    status: str  # pending | confirmed | rejected


@dataclass(frozen=True)
class NoteDraft:
    note_id: str
    kind: str  # turn | user_pinned_note
    category: str
    subtype: str | None
    evidence_level: str
    importance: float
    ttl_seconds: int
    forget_policy: str
    expires_at: float | None
    text: str
    source_seqs: tuple[int, ...]
    source_turn_ids: tuple[int | str, ...]
    requires_confirmation: bool
    status: str
    origin_seq: int  # the turn that produced it: its source turn, or the pin's trigger
    pin_id: str | None = None


@dataclass
class Derived:
    effective: dict[int, TurnMark] = field(default_factory=dict)
    expires_at: dict[int, float | None] = field(default_factory=dict)
    pins: list[PinRecord] = field(default_factory=list)
    notes: list[NoteDraft] = field(default_factory=list)
    # Seqs whose effective mark an overlay from a turn at or after ``new_from`` changed.
    overlay_targets: set[int] = field(default_factory=set)


def _is_question(text: str) -> bool:
    return text.rstrip().endswith(("?", "？", "吗", "呢", "吗？", "呢？"))


def kept_text(turn: MarkTurn, mark: TurnMark) -> str:
    return turn.text[mark.span.start : mark.span.end] if mark.span else turn.text


def _pin_for(
    conversation_id: str,
    position: int,
    turns: Sequence[MarkTurn],
    intents: Sequence[SaveIntent | None],
    policy: GovernancePolicy,
    pin_status: Mapping[str, Decision],
) -> PinRecord | None:
    trigger = turns[position]
    intent = intents[position]
    if intent is None:
        return None
    k = policy.pin_window
    ambiguous = False
    if intent.self_contained:
        targets = [trigger]
    else:
        prior: list[MarkTurn] = []
        for before in range(position - 1, -1, -1):
            turn = turns[before]
            if intents[before] is not None:
                break  # the previous save request owns what came before it
            prior.append(turn)
            if len(prior) >= 2 * k:
                break
        prior.reverse()
        targets = prior[-k:]
        if not any(turn.role in ("assistant", "tool") for turn in targets):
            ambiguous = True
            ai = [i for i, turn in enumerate(prior) if turn.role in ("assistant", "tool")]
            if ai:
                targets = prior[ai[-1] :]
        if not targets:
            targets = [trigger]
        elif trigger.timestamp - targets[-1].timestamp > policy.pin_max_gap_seconds:
            ambiguous = True
    pid = pin_id(conversation_id, trigger.seq)
    rule = policy.rule("pinned")
    decision = pin_status.get(pid)
    status = decision.status if decision else ("pending" if ambiguous else "confirmed")
    pin = PinIntent(
        pin_id=pid,
        trigger_turn_id=trigger.turn_id,
        target_turn_ids=[turn.turn_id for turn in targets],
        importance_boost=policy.pin_importance,
        ttl_seconds=rule.ttl_seconds,
        requires_confirmation=ambiguous,
    )
    return PinRecord(pin, trigger.seq, tuple(turn.seq for turn in targets), status)


def _pinned(mark: TurnMark, turn: MarkTurn, pin: PinRecord, policy: GovernancePolicy) -> TurnMark:
    rule = policy.rule("pinned")
    keep_labels = mark.keep and mark.category is not None
    pending = pin.status == "pending"
    ttl = rule.ttl_seconds
    if keep_labels and mark.ttl_seconds and ttl:
        ttl = max(ttl, mark.ttl_seconds)
    elif keep_labels and not mark.ttl_seconds:
        ttl = 0
    return mark.model_copy(
        update={
            "keep": True,
            "user_triggered_save": True,
            "category": mark.category if keep_labels else "note",
            "subtype": mark.subtype if keep_labels else "user_pinned_note",
            "evidence_level": mark.evidence_level if keep_labels else ROLE_EVIDENCE[turn.role],
            "importance": max(mark.importance, pin.intent.importance_boost),
            "ttl_seconds": ttl,
            "forget_policy": rule.forget_policy if ttl == 0 else "temporary",
            "requires_confirmation": mark.requires_confirmation or pending,
            "reason": f"{mark.reason}; pinned by turn {pin.intent.trigger_turn_id}"
            + (" (target ambiguous: confirm)" if pending else ""),
        }
    )


def derive(
    conversation_id: str,
    turns: Sequence[MarkTurn],
    base: Mapping[int, TurnMark],
    policy: GovernancePolicy,
    *,
    new_from: int,
    accepted_at: Mapping[int, float],
    pin_status: Mapping[str, Decision] | None = None,
    decisions: Mapping[int, Decision] | None = None,
    expired: frozenset[int] | set[int] = frozenset(),
) -> Derived:
    """Effective marks for ``turns`` (live, in order, each with a base mark).

    Pins and notes are produced for triggers and turns at or after ``new_from`` (the
    earlier turns are context). ``accepted_at`` (epoch seconds) is when each turn was
    stored: TTLs count from it, so an imported old transcript does not expire on arrival.
    """
    pin_status = pin_status or {}
    decisions = decisions or {}
    out = Derived()
    effective = {turn.seq: base[turn.seq] for turn in turns}
    _adopt_assistant_turns(turns, base, effective, out, new_from)
    _apply_pins(conversation_id, turns, effective, out, policy, pin_status, new_from)
    _apply_decisions(effective, decisions)
    for seq in expired:
        if seq in effective and effective[seq].keep:
            mark = effective[seq]
            effective[seq] = mark.model_copy(
                update={"keep": False, "reason": f"{mark.reason}; expired"}
            )
    out.effective = effective
    for seq, mark in effective.items():
        start = accepted_at.get(seq, 0.0)
        out.expires_at[seq] = start + mark.ttl_seconds if mark.keep and mark.ttl_seconds else None
    out.notes = _notes(conversation_id, turns, out, policy, new_from, decisions)
    return out


def _adopt_assistant_turns(
    turns: Sequence[MarkTurn],
    base: Mapping[int, TurnMark],
    effective: dict[int, TurnMark],
    out: Derived,
    new_from: int,
) -> None:
    """An assistant turn the user's next turn settles is kept: a proposal the user's
    decision confirms, or a question the user's kept answer replies to ("Is your passport
    still valid?" -> "It expires in May")."""
    for position in range(1, len(turns)):
        turn, previous = turns[position], turns[position - 1]
        if turn.role != "user" or previous.role != "assistant" or effective[previous.seq].keep:
            continue
        mark, answer = base[turn.seq], effective[turn.seq]
        if mark.subtype == "decision" and CONFIRMS.search(turn.text):
            update: dict[str, Any] = {
                "subtype": "decision",
                "evidence_level": "S3_user_confirmed",
                "importance": max(effective[previous.seq].importance, mark.importance),
                "reason": f"assistant proposal the user confirmed in turn {turn.turn_id}",
            }
            source = mark
        elif answer.keep and _is_question(previous.text):
            update = {
                "subtype": None,  # context only: no note of its own
                "evidence_level": "S1_ai_inference",
                "importance": min(answer.importance, 0.3),
                "reason": f"question answered by turn {turn.turn_id}: kept as its context",
            }
            source = answer
        else:
            continue
        effective[previous.seq] = effective[previous.seq].model_copy(
            update={
                **update,
                "keep": True,
                "category": "fact",
                "ttl_seconds": source.ttl_seconds,
                "forget_policy": source.forget_policy,
            }
        )
        if turn.seq >= new_from:
            out.overlay_targets.add(previous.seq)


def _apply_pins(
    conversation_id: str,
    turns: Sequence[MarkTurn],
    effective: dict[int, TurnMark],
    out: Derived,
    policy: GovernancePolicy,
    pin_status: Mapping[str, Decision],
    new_from: int,
) -> None:
    """Save requests ("记住这个") pin the turns before them, unless the user rejected the pin."""
    by_seq = {turn.seq: turn for turn in turns}
    intents = [save_intent(turn.text) if turn.role == "user" else None for turn in turns]
    for position, turn in enumerate(turns):
        pin = _pin_for(conversation_id, position, turns, intents, policy, pin_status)
        if pin is None:
            continue
        if turn.seq >= new_from:
            out.pins.append(pin)
            out.overlay_targets.update(pin.target_seqs)
        if pin.status == "rejected":
            continue
        for seq in pin.target_seqs:
            effective[seq] = _pinned(effective[seq], by_seq[seq], pin, policy)


def _apply_decisions(effective: dict[int, TurnMark], decisions: Mapping[int, Decision]) -> None:
    """The user's verdicts on notes: a rejected turn leaves the index, a confirmed one
    needs no more confirmation (and may rise in evidence level)."""
    for seq, decision in decisions.items():
        if seq not in effective:
            continue
        mark = effective[seq]
        if decision.status == "rejected":
            effective[seq] = mark.model_copy(
                update={"keep": False, "reason": f"{mark.reason}; rejected by the user"}
            )
        elif decision.status == "confirmed":
            update: dict[str, object] = {"requires_confirmation": False}
            if decision.evidence_level:
                update["evidence_level"] = decision.evidence_level
            effective[seq] = mark.model_copy(update=update)


def _notes(
    conversation_id: str,
    turns: Sequence[MarkTurn],
    derived: Derived,
    policy: GovernancePolicy,
    new_from: int,
    decisions: Mapping[int, Decision],
) -> list[NoteDraft]:
    notes: list[NoteDraft] = []
    by_seq = {turn.seq: turn for turn in turns}
    for turn in turns:
        mark = derived.effective[turn.seq]
        if turn.seq < new_from or not mark.keep or mark.category is None:
            continue
        if mark.category not in NOTE_CATEGORIES and mark.subtype in (None, "user_pinned_note"):
            continue
        if mark.user_triggered_save:
            continue  # its pin's user_pinned_note covers it
        decision = decisions.get(turn.seq)
        status = (
            decision.status
            if decision
            else ("pending" if mark.requires_confirmation else "confirmed")
        )
        notes.append(
            NoteDraft(
                note_id=note_id(conversation_id, "turn", turn.seq),
                kind="turn",
                category=mark.category,
                subtype=mark.subtype,
                evidence_level=mark.evidence_level or ROLE_EVIDENCE[turn.role],
                importance=mark.importance,
                ttl_seconds=mark.ttl_seconds,
                forget_policy=mark.forget_policy or "temporary",
                expires_at=derived.expires_at[turn.seq],
                text=kept_text(turn, mark),
                source_seqs=(turn.seq,),
                source_turn_ids=(turn.turn_id,),
                requires_confirmation=mark.requires_confirmation,
                status=status,
                origin_seq=turn.seq,
            )
        )
    rule = policy.rule("pinned")
    for pin in derived.pins:
        targets = [by_seq[seq] for seq in pin.target_seqs]
        marks = [derived.effective[seq] for seq in pin.target_seqs]
        evidence = min(
            (
                mark.evidence_level or ROLE_EVIDENCE[turn.role]
                for mark, turn in zip(marks, targets, strict=True)
            ),
            key=lambda level: EVIDENCE_ORDER[level],
        )
        text = "\n".join(
            f"{turn.name or turn.role}: {kept_text(turn, mark) if mark.keep else turn.text}"
            for turn, mark in zip(targets, marks, strict=True)
        )
        expires = max(derived.expires_at.get(seq) or 0.0 for seq in pin.target_seqs) or None
        notes.append(
            NoteDraft(
                note_id=note_id(conversation_id, "pin", pin.intent.pin_id),
                kind="user_pinned_note",
                category="note",
                subtype="user_pinned_note",
                evidence_level=evidence,
                importance=pin.intent.importance_boost,
                ttl_seconds=rule.ttl_seconds,
                forget_policy=rule.forget_policy,
                expires_at=None if rule.ttl_seconds == 0 else expires,
                text=text,
                source_seqs=pin.target_seqs,
                source_turn_ids=tuple(pin.intent.target_turn_ids),
                requires_confirmation=pin.intent.requires_confirmation,
                status=pin.status,
                origin_seq=pin.trigger_seq,
                pin_id=pin.intent.pin_id,
            )
        )
    return notes
