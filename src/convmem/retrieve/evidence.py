"""Small-to-big: chunk hits become turn-level evidence hits that keep their chunk as context.

A dialogue chunk holds a few turns; spending a turn budget on a whole chunk spends it on
the fact's neighbours. Each candidate chunk is split into its turns (the worker records
where each turn's line sits in the text), every turn is scored by its chunk's fused score
plus a share of its own BM25 against the query (:mod:`convmem.text.bm25`, statistics from
the candidates), each turn is kept once (overlapping chunks hold some turns twice) and at
most ``per_chunk`` turns of one chunk come before every other chunk's best turns. Chunks
without turn positions (caller-made chunks, story chunks, archives of single memories)
stay whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from convmem.models import Hit
from convmem.text import bm25, tokenize

__all__ = ["PER_CHUNK", "TURN_WEIGHT", "turn_hits"]

# The weight of a turn's own lexical match against its chunk's fused score. On LoCoMo dev
# (hashing, exact turn budget) 0.02-0.15 all give R@5 .64 against whole chunks' .60.
TURN_WEIGHT = 0.1
# Turns of one chunk ranked before the best turns of the chunks after it.
PER_CHUNK = 3
QUERY_TERMS = 64
# A turn that asks rather than tells echoes the question's words without holding the answer;
# its own lexical match counts this much.
QUESTION_SHARE = 0.5
QUESTION_ENDS = ("?", "？", "吗", "呢", "吗？", "呢？")


@dataclass(frozen=True)
class _Unit:
    rank: int
    hit: Hit
    seq: int | None  # None: the whole chunk
    text: str


def _units(hits: Sequence[Hit]) -> list[_Unit]:
    units: list[_Unit] = []
    for rank, hit in enumerate(hits):
        seqs = hit.metadata.get("turn_seqs") or []
        offsets = hit.metadata.get("turn_offsets") or []
        if len(seqs) > 1 and len(offsets) == len(seqs):
            units.extend(
                _Unit(rank, hit, int(seq), hit.text[start:end])
                for seq, (start, end) in zip(seqs, offsets, strict=True)
            )
        else:
            units.append(_Unit(rank, hit, None, hit.text))
    return units


def _spoken(unit: _Unit) -> str:
    """What a turn says, without its speaker label (every line of a chunk has one, so the
    label would match any question that names the speaker)."""
    if unit.seq is None:
        return unit.text
    _, _, said = unit.text.partition(": ")
    return said or unit.text


def _asks(unit: _Unit) -> bool:
    return unit.seq is not None and _spoken(unit).rstrip().endswith(QUESTION_ENDS)


def _turn_hit(unit: _Unit, score: float) -> Hit:
    hit = unit.hit
    if unit.seq is None:
        return hit.model_copy(update={"score": round(score, 6)})
    metadata: dict[str, Any] = {
        key: value for key, value in hit.metadata.items() if key != "turn_offsets"
    }
    metadata.update(
        {
            "turn_range": [unit.seq, unit.seq],
            "turn_seqs": [unit.seq],
            "evidence_turns": [unit.seq],
            "chunk_turn_range": hit.metadata.get("turn_range"),
            "granularity": "turn",
        }
    )
    return hit.model_copy(
        update={
            "score": round(score, 6),
            "text": unit.text,
            "metadata": metadata,
            "context": hit.text,
        }
    )


def turn_hits(
    hits: Sequence[Hit],
    query: str,
    top_k: int,
    *,
    weight: float = TURN_WEIGHT,
    per_chunk: int = PER_CHUNK,
) -> list[Hit]:
    """Turn-level hits from chunk hits (best first): at most one hit per turn."""
    units = _units(hits)
    if not units:
        return []
    weights = bm25.query_weights(tokenize(query), QUERY_TERMS)
    lexical = bm25.rank(weights, [tokenize(_spoken(unit)) for unit in units])
    top = max(lexical) or 1.0
    best: dict[tuple[str, int | str], tuple[float, _Unit]] = {}
    for unit, match in zip(units, lexical, strict=True):
        if _asks(unit):
            match *= QUESTION_SHARE
        score = (unit.hit.score + weight * match / top) / (1.0 + weight)
        key = (
            (str(unit.hit.metadata.get("conversation_id")), unit.seq)
            if unit.seq is not None
            else ("", unit.hit.chunk_id)
        )
        if key not in best or score > best[key][0]:
            best[key] = (score, unit)
    ranked = sorted(best.values(), key=lambda item: (-item[0], item[1].rank))
    taken: dict[str, int] = {}
    first: list[Hit] = []
    later: list[Hit] = []
    for score, unit in ranked:
        count = taken.get(unit.hit.chunk_id, 0)
        taken[unit.hit.chunk_id] = count + 1
        (first if count < per_chunk else later).append(_turn_hit(unit, score))
    return (first + later)[:top_k]
