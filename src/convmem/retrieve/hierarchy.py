"""One memory service, three tiers, chosen by hints (seed 004, ARCHITECTURE.md).

- ``STM``: the newest turns of a conversation, from the event log.
- ``MTM``: dialogue chunks, hybrid lexical + vector search.
- ``LTM``: notes and persona (preferences, rules, profile facts, pinned notes).

Strategies: ``semantic_search`` (default: MTM + LTM), ``deep_search`` (all tiers, a
larger candidate pool), ``temporal_search`` (STM and MTM in a recent time window),
``persona_search`` (LTM persona first, then MTM). ``params``: ``top_k``,
``time_range`` (``"recent"``: the 7 days before the conversation's newest turn, ``"24h"``,
``"7d"``, ``"30d"`` or ``[start, end]``), ``include_persona``, ``candidates_multiplier``.
Every tier reads only the caller's tenant, never returns deleted, expired or rejected
memory, and meets the caller's ``filters``: a turn by its own mark, a note by its own
labels; a field a tier cannot tell of its hit (a note's turns or time) excludes the hit,
as a filter only ever narrows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from convmem.errors import InvalidInputError
from convmem.governance import Note, TurnMark
from convmem.ids import MAX_LIMIT, check_flag
from convmem.models import Hit, check_query_text
from convmem.retrieve.calibration import DEFAULT_MIN_SCORE
from convmem.retrieve.fusion import evidence_key, interleave
from convmem.retrieve.request import Searcher, SearchRequest
from convmem.retrieve.routing import PARAM_RANGES, STRATEGIES, TIME_WINDOWS, check_params
from convmem.retrieve.unknowns import specific_terms
from convmem.store.filters import FilterSpec, matches, parse_filters
from convmem.text import bm25, split_questions, tokenize

__all__ = [
    "HierarchicalMemoryService",
    "RetrievalResult",
    "TierSource",
    "VisibleTurn",
    "merge_results",
]

PERSONA_CATEGORIES = {"preference", "rule"}
PERSONA_SUBTYPES = {"profile", "constraint", "user_pinned_note"}
TIER_WEIGHTS: dict[str, dict[str, float]] = {
    "semantic_search": {"MTM": 1.0, "LTM": 0.8},
    "deep_search": {"MTM": 1.0, "LTM": 0.9, "STM": 0.7},
    "temporal_search": {"STM": 1.2, "MTM": 1.0},
    "persona_search": {"LTM": 1.5, "MTM": 0.8},
}
TIER_ORDER = {"STM": 0, "MTM": 1, "LTM": 2}
#: How many notes the LTM tier reads: every live note of the scope (the most one listing
#: returns). A cap of 5,000 read them in conversation-id order, so past it the notes of a
#: conversation whose id sorts late (or a long conversation's newest) were never found.
NOTES_READ = MAX_LIMIT


class VisibleTurn(Protocol):
    """A turn as the short-term tier reads it."""

    @property
    def seq(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def text(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...
    @property
    def mark(self) -> TurnMark | None:
        """Its effective mark; None while the worker has not marked it."""
        ...


class TierSource(Protocol):
    """What the tiers read besides chunks, bound to one tenant, with every read path's
    visibility rules already applied (never deleted, expired or rejected memory)."""

    def recent_turns(
        self, conversation_id: str, limit: int = 20, *, kept_only: bool = False
    ) -> Sequence[VisibleTurn]: ...

    def notes(
        self, conversation_id: str | None = None, status: str | None = None, *, limit: int = 1000
    ) -> list[Note]: ...


@dataclass
class RetrievalResult:
    hits: list[Hit] = field(default_factory=list)
    hints: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"hits": [hit.model_dump(mode="json") for hit in self.hits], "hints": self.hints}


def merge_results(
    queries: Sequence[str], results: Sequence[RetrievalResult], top_k: int
) -> RetrievalResult:
    """One result for several parts of one question, each already retrieved: their hits
    interleaved (:func:`~convmem.retrieve.fusion.interleave`), the first part's hints with
    ``sub_queries``: how many hits each part found."""
    hits = interleave(
        [(query, result.hits) for query, result in zip(queries, results, strict=True)], top_k
    )
    hints = dict(results[0].hints) if results else {}
    hints["sub_queries"] = [
        {"query": query, "hits": len(result.hits)}
        for query, result in zip(queries, results, strict=True)
    ]
    return RetrievalResult(hits=hits, hints=hints)


def _int_param(params: Mapping[str, Any], name: str, default: int) -> int:
    """A whole-number param (:data:`~convmem.retrieve.routing.PARAM_RANGES`), else
    ``default``, which is checked the same way (the caller's own ``top_k``)."""
    low, high = PARAM_RANGES[name]
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInputError(
            f"hints.params.{name} must be an integer in {low}..{high}, got {value!r}",
            field=f"hints.params.{name}",
        )
    return value


def _strategies(hints: Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    if hints is None:
        return ["semantic_search"], {}
    if not isinstance(hints, Mapping):
        raise InvalidInputError("hints must be an object", field="hints")
    strategies = hints.get("strategies") or ["semantic_search"]
    if not isinstance(strategies, list) or not all(
        isinstance(s, str) and s in STRATEGIES for s in strategies
    ):
        raise InvalidInputError(
            f"hints.strategies must be a list of {', '.join(STRATEGIES)}", field="hints.strategies"
        )
    params = hints.get("params") or {}
    if not isinstance(params, Mapping):
        raise InvalidInputError("hints.params must be an object", field="hints.params")
    check_params(params, "hints.params")  # the checks a router makes of its own hints
    return list(strategies), dict(params)


def _tiers(strategies: Sequence[str], params: Mapping[str, Any]) -> dict[str, float]:
    """The tiers the strategies read, each with the largest weight any of them gives it."""
    weights: dict[str, float] = {}
    for strategy in strategies:
        for tier, weight in TIER_WEIGHTS[strategy].items():
            weights[tier] = max(weights.get(tier, 0.0), weight)
    if params.get("include_persona", False):
        weights.setdefault("LTM", 0.8)
    return weights


class HierarchicalMemoryService:
    """Retrieval over the tiers of one tenant: chunks through a :class:`Searcher`, recent
    turns and notes through a :class:`TierSource`."""

    def __init__(
        self, searcher: Searcher, source: TierSource, tenant: str, *, stm_turns: int = 8
    ) -> None:
        self.searcher = searcher
        self.source = source
        self.tenant = tenant
        self.stm_turns = stm_turns

    def retrieve(
        self,
        query: str,
        vector: Sequence[float] | None = None,
        hints: Mapping[str, Any] | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 6,
        *,
        mode: str = "hybrid",
        granularity: str = "turn",
        min_score: float | None = DEFAULT_MIN_SCORE,
        decompose: bool = True,
    ) -> RetrievalResult:
        """The hits of the tiers the hints ask for, best first.

        ``mode``, ``granularity`` and ``min_score`` are the dialogue tier's (MTM), as in
        ``Memory.search``: by default each hit is one evidence turn with its chunk as
        context, and hits under the calibrated ``min_score`` are dropped, so a question
        with nothing relevant gets no dialogue hits on this path either. With
        ``decompose``, a question that asks several things is retrieved part by part, every
        tier, and the parts merged (:func:`merge_results`).
        """
        check_query_text(query)
        check_flag(decompose, "decompose")
        strategies, params = _strategies(hints)
        top_k = _int_param(params, "top_k", top_k)
        parts = split_questions(query) if decompose and vector is None else [query]
        if len(parts) > 1:
            results = [
                self.retrieve(
                    part,
                    None,
                    hints,
                    filters,
                    top_k,
                    mode=mode,
                    granularity=granularity,
                    min_score=min_score,
                    decompose=False,
                )
                for part in parts
            ]
            return merge_results(parts, results, top_k)
        weights = _tiers(strategies, params)
        multiplier = _int_param(
            params, "candidates_multiplier", 3 if "deep_search" in strategies else 1
        )
        spec = parse_filters(filters, tenant=self.tenant)
        filters = dict(filters or {})
        conversation = filters.get("conversation_id")
        conversation_id = conversation if isinstance(conversation, str) else None
        disjoint = False  # the hint's window and the caller's time filter do not meet
        if params.get("time_range") is not None:
            window = self._window(params["time_range"], conversation_id)
            if window is not None:
                narrowed = _within(spec, window, self.tenant)
                disjoint = narrowed is None
                filters["timestamp_range"] = narrowed or window
        scored: list[tuple[float, int, Hit]] = []
        if "MTM" in weights and not disjoint:
            request = SearchRequest(
                tenant=self.tenant,
                query_text=query,
                top_k=min(1000, top_k * multiplier),
                filters=filters or None,
                query_vector=vector,
                mode=mode,
                granularity=granularity,
                min_score=min_score,
            )
            scored += [
                (hit.score * weights["MTM"], 1, hit) for hit in self.searcher.search(request)
            ]
        if "STM" in weights and conversation_id is not None:
            temporal = "temporal_search" in strategies
            stm = self._stm(
                query, conversation_id, spec, temporal=temporal, min_score=min_score or 0.0
            )
            scored += [(hit.score * weights["STM"], 0, hit) for hit in stm]
        if "LTM" in weights:
            persona_first = "persona_search" in strategies or bool(params.get("include_persona"))
            ltm = self._ltm(
                query, top_k * multiplier, persona_first, conversation_id, spec, min_score or 0.0
            )
            scored += [(hit.score * weights["LTM"], 2, hit) for hit in ltm]
        scored.sort(key=lambda item: (-item[0], item[1], item[2].chunk_id))
        applied = {
            "strategies": strategies,
            "params": params,
            "tiers": sorted(weights, key=TIER_ORDER.__getitem__),
            "route_strategy": (hints or {}).get("route_strategy"),
        }
        hits: list[Hit] = []
        taken: set[tuple[Any, ...]] = set()
        for _, _, hit in scored:  # a turn both tiers found is one piece of evidence
            if len(hits) == top_k:
                break
            if evidence_key(hit) not in taken:
                taken.add(evidence_key(hit))
                hits.append(hit)
        return RetrievalResult(hits=hits, hints=applied)

    # -- tiers --------------------------------------------------------------------------

    def _window(self, time_range: Any, conversation_id: str | None) -> list[str | None] | None:
        """A ``time_range`` (already checked by :func:`check_params`) as ``[start, end]``."""
        if isinstance(time_range, list | tuple):
            return [time_range[0], time_range[1]]
        span = TIME_WINDOWS[time_range]
        newest = datetime.now(UTC)
        if conversation_id is not None:
            turns = self.source.recent_turns(conversation_id, limit=1)
            if turns:
                newest = turns[-1].timestamp
        if newest - datetime.min.replace(tzinfo=newest.tzinfo) <= span:
            return None  # the window reaches back before year 1: no lower bound
        return [(newest - span).isoformat(), None]

    def _stm(
        self,
        query: str,
        conversation_id: str,
        spec: FilterSpec,
        *,
        temporal: bool,
        min_score: float,
    ) -> list[Hit]:
        """The newest turns that meet the filter: for ``temporal_search`` all of them, by
        recency and word overlap; otherwise those holding the question's words, scored
        like notes (:func:`_held`) and dropped under ``min_score``. A turn carries its own
        mark's labels, and is pending when it awaits confirmation."""
        turns = self.source.recent_turns(conversation_id, limit=self.stm_turns, kept_only=True)
        words = set(tokenize(query))
        specific = specific_terms(query)
        hits = []
        for age, turn in enumerate(reversed(turns)):
            metadata = _turn_metadata(conversation_id, turn)
            if not _meets(metadata, spec):
                continue
            tokens = set(tokenize(turn.text))
            overlap = len(words & tokens) / (len(words) or 1)
            if temporal:
                score = 0.5 / (1 + age) + 0.5 * overlap
            else:
                score = _held(specific, tokens) * (0.5 + 0.5 * overlap) if specific else overlap
                if overlap == 0 or score < min_score:
                    continue
            hits.append(
                Hit(
                    chunk_id=f"turn:{conversation_id}:{turn.seq}",
                    score=round(score, 6),
                    text=f"{turn.name or turn.role}: {turn.text}",
                    metadata=metadata,
                    tier="STM",
                    pending=bool(turn.mark and turn.mark.requires_confirmation),
                )
            )
        return hits

    def _ltm(
        self,
        query: str,
        limit: int,
        persona_first: bool,
        conversation_id: str | None,
        spec: FilterSpec,
        min_score: float,
    ) -> list[Hit]:
        """Notes scored by the share of the question's specific words
        (:func:`specific_terms`) each holds, times 0.5-1 by its BM25 against the best note's;
        under ``min_score`` dropped, so a question about something no note holds gets no
        note. Persona notes asked for (``persona_search``) count as holding every word."""
        # one conversation's notes when the search is scoped to one; each note once
        notes = list(
            {
                note.note_id: note
                for note in self.source.notes(conversation_id, limit=NOTES_READ)
                if _meets(_note_metadata(note), spec)
            }.values()
        )
        if not notes:
            return []
        weights = dict.fromkeys(tokenize(query), 1.0)
        documents = [tokenize(note.text) for note in notes]
        scores = bm25.rank(weights, documents)
        specific = specific_terms(query)
        raw: list[tuple[float, float, Note]] = []
        for note, score, tokens in zip(notes, scores, documents, strict=True):
            persona = note.category in PERSONA_CATEGORIES or note.subtype in PERSONA_SUBTYPES
            share = _held(specific, set(tokens)) if specific else 1.0
            floor = 0.0
            if persona_first and persona:
                score += 0.5 + note.importance  # persona notes surface even without overlap
                floor = 1.0  # and the caller asked for them: no relevance floor
            if score > 0:
                raw.append((score, max(share, floor), note))
        if not raw:
            return []
        best = max(score for score, _, _ in raw)
        scored = [(share * (0.5 + 0.5 * score / best), note) for score, share, note in raw]
        scored = [(score, note) for score, note in scored if score >= min_score]
        scored.sort(key=lambda item: (-item[0], item[1].note_id))
        return [_note_hit(note, score) for score, note in scored[:limit]]


def _within(spec: FilterSpec, window: list[str | None], tenant: str) -> list[str | None] | None:
    """A hint's time window narrowed to the caller's ``timestamp_range`` filter (a hint
    never widens a filter); None when the two do not meet."""
    ((low, high),) = (
        c.value for c in parse_filters({"timestamp_range": window}, tenant=tenant).conditions
    )
    for condition in spec.conditions:
        if condition.field == "timestamp_range":
            start, end = condition.value
            low = start if low is None else low if start is None else max(low, start)
            high = end if high is None else high if end is None else min(high, end)
    if low is not None and high is not None and low > high:
        return None
    return [
        None if bound is None else datetime.fromtimestamp(bound, UTC).isoformat()
        for bound in (low, high)
    ]


def _meets(metadata: Mapping[str, Any], spec: FilterSpec) -> bool:
    """Whether a tier's hit meets the caller's filter; a field it cannot tell fails."""
    return all(c.field in metadata for c in spec.conditions) and matches(metadata, spec)


def _turn_metadata(conversation_id: str, turn: VisibleTurn) -> dict[str, Any]:
    """A recent turn as a filter reads it: its place, time and speaker, and its own
    mark's labels once the worker has marked it."""
    when = turn.timestamp.isoformat()
    metadata: dict[str, Any] = {
        "conversation_id": conversation_id,
        "turn_range": [turn.seq, turn.seq],
        "timestamp": when,
        "timestamp_range": [when, when],
        "role": turn.role,
        "speakers": [turn.role],
    }
    mark = turn.mark
    if mark is not None:
        metadata.update(
            category=mark.category,
            importance=mark.importance,
            pinned=mark.user_triggered_save,
            requires_confirmation=mark.requires_confirmation,
        )
    return metadata


def _note_metadata(note: Note) -> dict[str, Any]:
    """A note as a filter reads it: its own labels (it names turns by id, not by place,
    and holds no time of theirs)."""
    return {
        "conversation_id": note.conversation_id,
        "category": note.category,
        "importance": note.importance,
        "pinned": note.kind == "user_pinned_note",
        "requires_confirmation": note.status == "pending",
    }


def _held(specific: Sequence[str], tokens: set[str]) -> float:
    """The share of the question's specific words a text holds: 0 for a text that shares
    only common words (我, 对, 什么) with a question about something else."""
    return sum(term in tokens for term in specific) / len(specific)


def _note_hit(note: Note, score: float) -> Hit:
    return Hit(
        chunk_id=note.note_id,
        score=round(score, 6),
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
