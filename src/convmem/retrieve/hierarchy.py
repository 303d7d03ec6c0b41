"""One memory service, three tiers, chosen by hints (seed 004, ARCHITECTURE.md).

- ``STM``: the newest turns of a conversation, from the event log.
- ``MTM``: dialogue chunks, hybrid lexical + vector search.
- ``LTM``: notes and persona (preferences, rules, profile facts, pinned notes).

Strategies: ``semantic_search`` (default: MTM + LTM), ``deep_search`` (all tiers, a
larger candidate pool), ``temporal_search`` (STM and MTM in a recent time window),
``persona_search`` (LTM persona first, then MTM). ``params``: ``top_k``,
``time_range`` (``"recent"``: the 7 days before the conversation's newest turn, ``"24h"``,
``"7d"``, ``"30d"`` or ``[start, end]``), ``include_persona``, ``candidates_multiplier``.
Every tier reads only the caller's tenant and never returns deleted, expired or rejected
memory.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from convmem.errors import InvalidInputError
from convmem.models import Hit
from convmem.retrieve.routing import STRATEGIES
from convmem.text import tokenize

if TYPE_CHECKING:
    from convmem.service import Memory

__all__ = ["HierarchicalMemoryService", "RetrievalResult"]

PERSONA_CATEGORIES = {"preference", "rule"}
PERSONA_SUBTYPES = {"profile", "constraint", "user_pinned_note"}
TIER_WEIGHTS: dict[str, dict[str, float]] = {
    "semantic_search": {"MTM": 1.0, "LTM": 0.8},
    "deep_search": {"MTM": 1.0, "LTM": 0.9, "STM": 0.7},
    "temporal_search": {"STM": 1.2, "MTM": 1.0},
    "persona_search": {"LTM": 1.5, "MTM": 0.8},
}
WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


@dataclass
class RetrievalResult:
    hits: list[Hit] = field(default_factory=list)
    hints: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"hits": [hit.model_dump(mode="json") for hit in self.hits], "hints": self.hints}


def _strategies(hints: Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    if hints is None:
        return ["semantic_search"], {}
    if not isinstance(hints, Mapping):
        raise InvalidInputError("hints must be an object", field="hints")
    strategies = hints.get("strategies") or ["semantic_search"]
    if not isinstance(strategies, list) or not all(s in STRATEGIES for s in strategies):
        raise InvalidInputError(
            f"hints.strategies must be a list of {', '.join(STRATEGIES)}", field="hints.strategies"
        )
    params = hints.get("params") or {}
    if not isinstance(params, Mapping):
        raise InvalidInputError("hints.params must be an object", field="hints.params")
    return list(strategies), dict(params)


class HierarchicalMemoryService:
    """Retrieval over the tiers of one :class:`~convmem.Memory` (bound to its tenant)."""

    def __init__(self, memory: Memory, *, stm_turns: int = 8) -> None:
        self.memory = memory
        self.stm_turns = stm_turns

    def retrieve(
        self,
        query: str,
        vector: Sequence[float] | None = None,
        hints: Mapping[str, Any] | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 6,
    ) -> RetrievalResult:
        strategies, params = _strategies(hints)
        top_k = int(params.get("top_k", top_k))
        if not 1 <= top_k <= 1000:
            raise InvalidInputError("top_k must be in 1..1000", field="hints.params.top_k")
        tiers: set[str] = set()
        weights: dict[str, float] = {}
        for strategy in strategies:
            for tier, weight in TIER_WEIGHTS[strategy].items():
                tiers.add(tier)
                weights[tier] = max(weights.get(tier, 0.0), weight)
        if params.get("include_persona"):
            tiers.add("LTM")
            weights.setdefault("LTM", 0.8)
        multiplier = int(
            params.get("candidates_multiplier", 3 if "deep_search" in strategies else 1)
        )
        filters = dict(filters or {})
        conversation = filters.get("conversation_id")
        conversation_id = conversation if isinstance(conversation, str) else None
        if params.get("time_range") is not None:
            window = self._window(params["time_range"], conversation_id)
            if window is not None:
                filters["timestamp_range"] = window
        scored: list[tuple[float, int, Hit]] = []
        order = {"STM": 0, "MTM": 1, "LTM": 2}
        if "MTM" in tiers:
            for hit in self.memory.search(
                query,
                top_k=min(1000, top_k * multiplier),
                filters=filters or None,
                query_vector=vector,
            ):
                scored.append((hit.score * weights["MTM"], order["MTM"], hit))
        if "STM" in tiers and conversation_id is not None:
            for hit in self._stm(query, conversation_id, temporal="temporal_search" in strategies):
                scored.append((hit.score * weights["STM"], order["STM"], hit))
        if "LTM" in tiers:
            persona_first = "persona_search" in strategies or bool(params.get("include_persona"))
            for hit in self._ltm(query, top_k * multiplier, persona_first, conversation_id):
                scored.append((hit.score * weights["LTM"], order["LTM"], hit))
        scored.sort(key=lambda item: (-item[0], item[1], item[2].chunk_id))
        hits = [hit for _, _, hit in scored[:top_k]]
        applied = {
            "strategies": strategies,
            "params": params,
            "tiers": sorted(tiers, key=order.__getitem__),
            "route_strategy": (hints or {}).get("route_strategy"),
        }
        return RetrievalResult(hits=hits, hints=applied)

    # -- tiers --------------------------------------------------------------------------

    def _window(self, time_range: Any, conversation_id: str | None) -> list[str | None] | None:
        if isinstance(time_range, list | tuple) and len(time_range) == 2:
            return [time_range[0], time_range[1]]
        if time_range == "recent":
            span = timedelta(days=7)
        elif time_range in WINDOWS:
            span = WINDOWS[time_range]
        else:
            raise InvalidInputError(
                "time_range must be 'recent', '24h', '7d', '30d' or [start, end]",
                field="hints.params.time_range",
            )
        newest = datetime.now(UTC)
        if conversation_id is not None:
            turns = self.memory.recent_turns(conversation_id, limit=1)
            if turns:
                newest = turns[-1].timestamp
        return [(newest - span).isoformat(), None]

    def _stm(self, query: str, conversation_id: str, *, temporal: bool) -> list[Hit]:
        turns = self.memory.recent_turns(conversation_id, limit=self.stm_turns)
        words = set(tokenize(query))
        hits = []
        for age, turn in enumerate(reversed(turns)):
            overlap = len(words & set(tokenize(turn.text))) / (len(words) or 1)
            if not temporal and overlap == 0:
                continue
            recency = 1.0 / (1 + age)
            score = 0.5 * recency + 0.5 * overlap if temporal else overlap
            hits.append(
                Hit(
                    chunk_id=f"turn:{conversation_id}:{turn.seq}",
                    score=round(score, 6),
                    text=f"{turn.name or turn.role}: {turn.text}",
                    metadata={
                        "conversation_id": conversation_id,
                        "turn_range": [turn.seq, turn.seq],
                        "timestamp": turn.timestamp.isoformat(),
                        "role": turn.role,
                    },
                    tier="STM",
                )
            )
        return hits

    def _ltm(
        self, query: str, limit: int, persona_first: bool, conversation_id: str | None
    ) -> list[Hit]:
        notes = self.memory.notes(limit=5000)
        if not notes:
            return []
        documents = [tokenize(note.text) for note in notes]
        words = [w for w in dict.fromkeys(tokenize(query))]
        frequency: Counter[str] = Counter()
        for document in documents:
            frequency.update(set(document))
        count = len(notes)
        average = sum(len(d) for d in documents) / count or 1.0
        raw: list[tuple[float, Any]] = []
        for note, document in zip(notes, documents, strict=True):
            terms = Counter(document)
            score = 0.0
            for word in words:
                tf = terms.get(word, 0)
                if tf:
                    idf = math.log(1 + (count - frequency[word] + 0.5) / (frequency[word] + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(document) / average))
            persona = note.category in PERSONA_CATEGORIES or note.subtype in PERSONA_SUBTYPES
            if persona_first and persona:
                score += 0.5 + note.importance  # persona notes surface even without overlap
            if score > 0:
                raw.append((score, note))
        if not raw:
            return []
        best = max(score for score, _ in raw)
        raw.sort(key=lambda item: (-item[0], item[1].note_id))
        return [
            Hit(
                chunk_id=note.note_id,
                score=round(score / best, 6),
                text=note.text,
                metadata={
                    "conversation_id": note.conversation_id,
                    "category": note.category,
                    "subtype": note.subtype,
                    "evidence_level": note.evidence_level,
                    "status": note.status,
                    "source_turn_ids": note.source_turn_ids,
                    "importance": note.importance,
                },
                tier="LTM",
                pending=note.status == "pending",
            )
            for score, note in raw[:limit]
        ]
