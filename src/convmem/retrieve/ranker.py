"""A learned ranker of candidate lines: the probability that a line is the evidence.

The turn step of a search (:func:`~convmem.retrieve.evidence.turn_hits`) scores each
candidate line by hand-set parts: its chunk's fused score, its own BM25 and cosine, the
named speaker, the calibrated relevance. A ranker weighs those and a few more features of
the line (:class:`~convmem.retrieve.evidence.LineFeatures`: the cosine of the lines next
to it, whether it asks, its length, whether it opens its chunk, whether it was said on the
date the question names) by how well they put
evidence lines above the other candidates of the same question. It is a linear model
fitted pairwise (each evidence line against each other candidate of its question; logistic
loss), then mapped to a probability by a one-feature logistic fit (Platt scaling), so that
it can be added to the hand score in [0, 1] (``RANKER_WEIGHT`` in
:mod:`convmem.retrieve.evidence`).

Rankers are per model, like calibrations: the features include raw cosines, whose scale is
the model's. ``bench/fit_ranker.py`` fits one on LoCoMo dev and the facts set's dev split
and reports it leave-one-conversation-out. A model may also have a ranker per language,
like its calibrations (``("usem3", "zh")``: Chinese questions of Chinese memory, fitted
with ``--language zh``); every other question reads the model's. A model without its own
ranker (the hashing embedder: a fitted one did not beat its hand score) keeps the hand
score alone. Dialogue windows keep it too (the ranker was fitted on one-line questions),
and so does a search without a vector side (lexical mode, or a query the embedder failed
on): the features were fitted with cosines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from convmem.retrieve.evidence import FEATURES, LineFeatures

__all__ = ["RANKERS", "Ranker", "ranker_for"]


@dataclass(frozen=True)
class Ranker:
    """``probability = sigmoid(bias + sum(weight * feature))`` over the features in
    :data:`~convmem.retrieve.evidence.FEATURES` order."""

    name: str
    bias: float
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(
                f"ranker {self.name!r} has {len(self.weights)} weights for "
                f"{len(FEATURES)} features ({', '.join(FEATURES)})"
            )

    def __call__(self, lines: Sequence[LineFeatures]) -> np.ndarray:
        """Each line's probability of being evidence."""
        if not lines:
            return np.zeros(0)
        x = np.asarray([line.vector() for line in lines], dtype=np.float64)
        z = np.clip(self.bias + x @ np.asarray(self.weights), -30.0, 30.0)
        return np.asarray(1.0 / (1.0 + np.exp(-z)))


# Fitted by bench/fit_ranker.py on LoCoMo dev and the facts set's dev split (turn hits).
# usem3, LoCoMo dev leave-one-conversation-out R@5 / R@10: .702 / .774 -> .727 / .803
# (refitted in stop 27 with the calibration that counts the question's best cosine).
# Weights in FEATURES order: fused, lexical, similarity, coverage, context, said, previous,
# following, asks, length, first, dated, answers, changes (the last two 0: fitted before
# they existed; they read Chinese questions only). Refit after refitting the model's
# calibration (the fused feature holds the calibrated relevance).
RANKERS: dict[tuple[str, ...], Ranker] = {
    ("usem3",): Ranker(
        "usem3",
        -6.1512,
        (
            2.194,
            0.3317,
            6.2849,
            0.1849,
            2.4262,
            1.2587,
            2.4624,
            0.9312,
            -1.1119,
            0.3926,
            -0.1996,
            2.696,
            0.0,
            0.0,
        ),
    ),
    # Chinese questions of Chinese memory (the searcher's rankers["zh"]; stop 32): fitted by
    # bench/fit_ranker.py --language zh on the facts set's dev split and the first file of
    # each hand-written chat set. R@5 / R@10 against the model's ranker above, on what it
    # never saw: held-out facts .938 / .981 -> .969 / .981, hand-written chats' second file
    # .759 / .870 -> .796 / .889, entity chats' second file .905 / .954 -> .935 / .979. It
    # weighs the line's own cosine more (11.7 against 6.3) and its neighbours less: a
    # Chinese chat says one thing a line, among unrelated lines; and a line that holds the
    # kind of value asked for (answers, 2.4) or says the asked value changed (changes, 2.6).
    # English questions, and Chinese ones of English memory, keep the model's.
    ("usem3", "zh"): Ranker(
        "usem3/zh",
        -13.3524,
        (
            2.7129,
            0.4045,
            11.7095,
            -1.0261,
            2.1046,
            1.5073,
            0.6008,
            -0.0436,
            -2.5441,
            2.3333,
            -0.4522,
            0.0,
            2.4198,
            2.6117,
        ),
    ),
}


def ranker_for(model_id: str, language: str | None = None) -> Ranker | None:
    """The ranker of an embedder (by its model id), or None: the hand score alone. With
    ``language``, that language's own ranker when the model has one (``("usem3", "zh")``),
    else the model's."""
    own = RANKERS.get((model_id, language)) if language else None
    return own or RANKERS.get((model_id,))
