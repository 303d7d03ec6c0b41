"""The marker contract (seed 002 TurnMarkV1) and the marking-off marker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from convmem.governance.policy import GovernancePolicy
from convmem.governance.schema import TurnMark

__all__ = ["KeepAllMarker", "MarkTurn", "Marker", "MarkerBase"]

# The evidence level a turn's role gives a claim it makes.
ROLE_EVIDENCE = {
    "user": "S0_user_claim",
    "assistant": "S1_ai_inference",
    "tool": "S2_tool_grounded",
    "system": "S1_ai_inference",
}


@dataclass(frozen=True)
class MarkTurn:
    """A turn as markers see it."""

    seq: int
    turn_id: int | str
    role: str
    text: str
    timestamp: float
    name: str | None = None


@runtime_checkable
class Marker(Protocol):
    """Labels turns (seed 002 TurnMarkV1). ``context``: earlier turns, for reference only."""

    name: str

    def mark(
        self,
        turns: Sequence[MarkTurn],
        context: Sequence[MarkTurn] = (),
        policy: GovernancePolicy | None = None,
    ) -> list[TurnMark]: ...


class MarkerBase:
    """What every marker shares: defaults filled in, then :meth:`mark_turns`."""

    name = "marker"

    def mark(
        self,
        turns: Sequence[MarkTurn],
        context: Sequence[MarkTurn] = (),
        policy: GovernancePolicy | None = None,
    ) -> list[TurnMark]:
        if not turns:
            return []
        return self.mark_turns(list(turns), list(context), policy or GovernancePolicy())

    def mark_turns(
        self, turns: list[MarkTurn], context: list[MarkTurn], policy: GovernancePolicy
    ) -> list[TurnMark]:
        """One mark per turn, in order."""
        raise NotImplementedError


class KeepAllMarker(MarkerBase):
    """Keeps every turn as a user-claim fact: marking off (every turn is indexed)."""

    name = "keep-all"

    def mark_turns(
        self, turns: list[MarkTurn], context: list[MarkTurn], policy: GovernancePolicy
    ) -> list[TurnMark]:
        rule = policy.rule("fact(user claim)")
        return [
            TurnMark.model_validate(
                {
                    "turn_id": turn.turn_id,
                    "keep": True,
                    "category": "fact",
                    "evidence_level": ROLE_EVIDENCE[turn.role],
                    "importance": 0.3,
                    "ttl_seconds": rule.ttl_seconds,
                    "forget_policy": rule.forget_policy,
                    "reason": "marking off: every turn is kept",
                }
            )
            for turn in turns
        ]
