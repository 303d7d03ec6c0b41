"""What a search asks for, and the one protocol every caller searches through.

The facade, the hierarchical service and story memory all build a :class:`SearchRequest`
and hand it to a :class:`Searcher`; none of them knows how candidates are found or fused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from convmem.errors import InvalidInputError
from convmem.models import Hit, check_query_text

__all__ = ["GRANULARITIES", "MAX_CANDIDATES", "MODES", "SearchRequest", "Searcher"]

MODES = ("hybrid", "vector", "lexical")
GRANULARITIES = ("turn", "chunk")
#: The most candidates a search takes from each side (the hints' largest pool, 10 * 1000).
MAX_CANDIDATES = 10_000


@dataclass(frozen=True)
class SearchRequest:
    """One search in one tenant.

    Attributes:
        query_vector: a precomputed, normalised query vector (skips embedding the query).
        mode: ``"hybrid"`` (default), ``"vector"`` or ``"lexical"``.
        candidates: candidates taken from each side before fusion, 1..10,000 (default
            ``max(50, 5 * top_k)``).
        granularity: ``"chunk"`` (default): whole chunks; ``"turn"``: a dialogue hit names
            its evidence turn in ``turn_range`` and carries its chunk as ``context``
            (small-to-big, :mod:`convmem.retrieve.evidence`).
        min_score: None (default): hits keep their fused ranking score; a number: each
            hit's score is its calibrated relevance (:mod:`convmem.retrieve.calibration`)
            and hits below the number are dropped (0 keeps every hit).
        decompose: search each part of a question that asks several things ("A？还有B",
            :func:`~convmem.text.split_questions`) on its own and interleave their hits
            (default False here; ``Memory.search`` asks for it). Not with ``query_vector``,
            which is the whole question's.
    """

    tenant: str
    query_text: str
    top_k: int = 6
    filters: Mapping[str, Any] | None = None
    query_vector: Sequence[float] | None = None
    mode: str = "hybrid"
    candidates: int | None = None
    granularity: str = "chunk"
    min_score: float | None = None
    decompose: bool = False

    def __post_init__(self) -> None:
        check_query_text(self.query_text)
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
            raise InvalidInputError(
                f"top_k must be an integer in 1..1000, got {top_k!r}", field="top_k"
            )
        if self.granularity not in GRANULARITIES:
            raise InvalidInputError(
                f"granularity must be 'turn' or 'chunk', got {self.granularity!r}",
                field="granularity",
            )
        score = self.min_score
        if score is not None and (
            isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1
        ):
            raise InvalidInputError(
                f"min_score must be a number in 0..1, got {score!r}; 0 keeps every hit",
                field="min_score",
            )
        if self.mode not in MODES:
            raise InvalidInputError(
                f"mode must be 'hybrid', 'vector' or 'lexical', got {self.mode!r}", field="mode"
            )
        pool = self.candidates
        if pool is not None and (
            isinstance(pool, bool) or not isinstance(pool, int) or not 1 <= pool <= MAX_CANDIDATES
        ):
            raise InvalidInputError(
                f"candidates must be an integer in 1..{MAX_CANDIDATES} or None (the default, "
                f"max(50, 5 * top_k)), got {pool!r}",
                field="candidates",
            )
        if not isinstance(self.decompose, bool):
            raise InvalidInputError(
                f"decompose must be true or false, got {self.decompose!r}", field="decompose"
            )


class Searcher(Protocol):
    """Anything that answers a :class:`SearchRequest` with hits, best first."""

    def search(self, request: SearchRequest) -> list[Hit]: ...
