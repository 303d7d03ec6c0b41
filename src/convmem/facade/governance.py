"""Governance on the facade (seed 002): marks with reasons, pins, notes and the
confirmation loop, retention policy, expiry."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from convmem.errors import InvalidInputError
from convmem.facade.base import FacadeBase
from convmem.governance import (
    EVIDENCE_LEVELS,
    GovernancePolicy,
    Note,
    PinIntent,
    StoredMark,
    StoredPin,
    TurnMark,
)
from convmem.ids import check_conversation_id, check_limit, check_note_id
from convmem.worker import iso

__all__ = ["GovernanceMethods"]


class GovernanceMethods(FacadeBase):
    def marks(self, conversation_id: str) -> list[StoredMark]:
        """Every live turn's marks with reasons, in turn order (``convmem marks CONV``)."""
        conversation_id = check_conversation_id(conversation_id)
        out = []
        for (
            seq,
            turn_id,
            role,
            marker,
            effective,
            base,
            expires,
            expired,
            decision,
        ) in self._engine.store.mark_rows(self._tenant, conversation_id):
            base_mark = TurnMark.model_validate_json(base)
            out.append(
                StoredMark(
                    turn_id=base_mark.turn_id if base_mark.turn_id is not None else turn_id,
                    seq=seq,
                    role=role,
                    marker=marker,
                    mark=TurnMark.model_validate_json(effective) if effective else base_mark,
                    base=base_mark,
                    expires_at=iso(expires),
                    expired=bool(expired),
                    decision=decision,
                )
            )
        return out

    def pins(self, conversation_id: str) -> list[StoredPin]:
        """The conversation's pins (explicit save requests), oldest first."""
        conversation_id = check_conversation_id(conversation_id)
        return [
            StoredPin.model_validate(
                {**PinIntent.model_validate_json(intent).model_dump(), "status": status}
            )
            for intent, status, _ in self._engine.store.pin_rows(self._tenant, conversation_id)
        ]

    def notes(
        self, conversation_id: str | None = None, status: str | None = None, *, limit: int = 1000
    ) -> list[Note]:
        """Live notes (never deleted or expired ones).

        Args:
            status: ``pending``, ``confirmed`` or ``rejected``; None: pending and
                confirmed (rejected notes are kept for audit and listed only on request).
        """
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
        if status not in (None, "pending", "confirmed", "rejected"):
            raise InvalidInputError(
                f"status must be 'pending', 'confirmed' or 'rejected', got {status!r}",
                field="status",
            )
        return self._engine.store.notes(
            self._tenant, conversation_id=conversation_id, status=status, limit=check_limit(limit)
        )

    def note(self, note_id: str) -> Note:
        """One live note. Raises NotFoundError when deleted, expired or unknown."""
        return self._engine.store.note(self._tenant, check_note_id(note_id))

    def update_note(
        self, note_id: str, confirm: bool = True, *, evidence_level: str | None = None
    ) -> Note:
        """Close the confirmation loop (seed 002 §5.1): confirm or reject a note.

        Confirming clears ``requires_confirmation`` (optionally raising the evidence
        level, typically to ``S3_user_confirmed``); rejecting keeps the note for audit but
        it is never retrieved again, and the turns it came from leave the long-term index
        (a rejected pin un-pins its targets). Chunks are re-cut by the index worker.

        Raises:
            NotFoundError: no live note with this id in this tenant.
            InvalidInputError: ``confirm`` is not a boolean or ``evidence_level`` unknown.
        """
        note_id = check_note_id(note_id)
        if not isinstance(confirm, bool):
            raise InvalidInputError(
                f"confirm must be true or false, got {confirm!r}", field="confirm"
            )
        if evidence_level is not None and evidence_level not in EVIDENCE_LEVELS:
            raise InvalidInputError(
                f"evidence_level must be one of {', '.join(EVIDENCE_LEVELS)}",
                field="evidence_level",
            )
        note, _ = self._engine.store.decide_note(
            self._tenant,
            note_id,
            status="confirmed" if confirm else "rejected",
            evidence_level=evidence_level,
        )
        self._engine.pool.wake()
        return note

    def policy(self) -> GovernancePolicy:
        """The retention policy in force for this tenant (defaults, product, tenant)."""
        return self._engine.indexer.policy(self._tenant)

    def set_policy(self, overrides: Mapping[str, Any] | None) -> GovernancePolicy:
        """Store this tenant's policy overrides (None clears them); applies to turns marked
        from now on. Raises InvalidInputError naming the bad key."""
        if overrides is not None:
            self._engine.indexer.product_policy.merged(overrides, source="policy")
        self._engine.store.set_policy(self._tenant, overrides)
        return self.policy()

    def sweep_expired(self, now: float | None = None) -> dict[str, int]:
        """Mark expired turn labels and notes now (workers also do it every
        ``sweep_seconds``); their chunks are re-cut without them. ``now``: seconds since
        the epoch to sweep as of (default: the clock's)."""
        if now is not None and (
            isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now)
        ):
            raise InvalidInputError(
                f"now must be seconds since the epoch (a finite number) or None, got {now!r}",
                field="now",
            )
        result = self._engine.store.sweep_expired(self._engine.clock.now() if now is None else now)
        self._engine.pool.wake()
        return result
