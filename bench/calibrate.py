"""Fit and check the calibrated relevance (convmem.retrieve.calibration) of one embedder.

Answerable questions (LoCoMo dev, the Chinese facts set) give positives: the evidence hit's
features (coverage of the question's weight, vector similarity). Unrelated questions give
negatives: every hit of a question asked of a conversation that never talks about it
(another conversation's questions, general knowledge). A logistic model is fitted on the
``dev`` questions; the threshold table is reported on dev and on the held-out facts split:
the share of unrelated questions that return nothing, and the share of answerable questions
whose evidence (found in the top 10 without a threshold) the threshold cuts.

    python bench/calibrate.py --embedder hashing --out bench/results/calibrate-hashing.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from convmem import Memory
from convmem.embed import resolve_embedder
from convmem.ingest import ChunkingPolicy
from convmem.ingest.formats import locomo_conversation
from convmem.retrieve.calibration import DEFAULT_MIN_SCORE, Calibration, calibration_for, relevance
from facts_zh import DATA_FILE, unrelated
from retrieval import DATA, evidence_ids

GENERAL_EN = [
    "What is the capital of Peru?",
    "How many moons does Jupiter have?",
    "How do I reset my router?",
    "Who wrote War and Peace?",
    "What is the boiling point of water at altitude?",
    "How do I convert a string to an integer in Java?",
    "What is the tallest building in the world?",
    "How long should I boil an egg?",
    "When was the Eiffel Tower built?",
    "What causes the northern lights?",
]
# {"split", "set", "answerable", "evidence": [pos],
#  "features": [(coverage, context, similarity, absent, unknown_name, best_similarity)...]}
Case = dict[str, Any]
Features = tuple[float, float, float | None, float, float, float | None]


def _features(hits: list[Any]) -> list[Features]:
    out = []
    for hit in hits:
        evidence = hit.metadata.get("evidence") or {}
        out.append(
            (
                float(evidence.get("coverage", 0.0)),
                float(evidence.get("context", 0.0)),
                evidence.get("similarity"),
                float(evidence.get("absent", 0.0)),
                float(evidence.get("unknown_name", 0.0)),
                evidence.get("best_similarity"),
            )
        )
    return out


def _positions(hits: list[Any], evidence: set[int]) -> list[int]:
    return [i for i, hit in enumerate(hits) if set(hit.metadata.get("turn_seqs") or []) & evidence]


def facts_cases(memory: Memory, granularity: str) -> list[Case]:
    chats = [json.loads(line) for line in DATA_FILE.read_text(encoding="utf-8").splitlines()]
    for chat in chats:
        memory.add_turns(chat["conversation_id"], chat["turns"])
    memory.flush(timeout=600)
    cases: list[Case] = []
    for chat in chats:
        scope = {"conversation_id": chat["conversation_id"]}
        for question in chat["questions"]:
            hits = memory.search(
                question["question"], 10, scope, granularity=granularity, min_score=0
            )
            cases.append(
                {
                    "split": chat["split"],
                    "set": "facts_zh",
                    "answerable": True,
                    "features": _features(hits),
                    "evidence": _positions(hits, set(question["evidence"])),
                }
            )
        for text in unrelated(chat, chats):
            hits = memory.search(text, 5, scope, granularity=granularity, min_score=0)
            cases.append(
                {
                    "split": chat["split"],
                    "set": "facts_zh",
                    "answerable": False,
                    "features": _features(hits),
                    "evidence": [],
                }
            )
    return cases


def locomo_cases(memory: Memory, granularity: str) -> list[Case]:
    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))
    mapping: dict[str, dict[str, int]] = {}
    for sample in samples:
        conversation_id, turns = locomo_conversation(sample)
        mapping[conversation_id] = {t["meta"]["dia_id"]: t["turn_id"] for t in turns}
        memory.add_turns(conversation_id, turns)
    memory.flush(timeout=3600)
    cases: list[Case] = []
    for index, sample in enumerate(samples):
        conversation_id = str(sample["sample_id"])
        scope = {"conversation_id": conversation_id}
        for qa in sample["qa"]:
            evidence = {
                mapping[conversation_id][d]
                for d in evidence_ids(qa.get("evidence", []))
                if d in mapping[conversation_id]
            }
            if not evidence or str(qa["category"]) == "5":
                continue
            hits = memory.search(qa["question"], 10, scope, granularity=granularity, min_score=0)
            cases.append(
                {
                    "split": "dev",
                    "set": "locomo",
                    "answerable": True,
                    "features": _features(hits),
                    "evidence": _positions(hits, evidence),
                }
            )
        other = samples[(index + 1) % len(samples)]
        foreign = [qa["question"] for qa in other["qa"] if str(qa["category"]) != "5"][::7][:20]
        for text in foreign + GENERAL_EN:
            hits = memory.search(text, 5, scope, granularity=granularity, min_score=0)
            cases.append(
                {
                    "split": "dev",
                    "set": "locomo",
                    "answerable": False,
                    "features": _features(hits),
                    "evidence": [],
                }
            )
    return cases


def fit(
    cases: list[Case], lexical: bool, scoped: bool = True, best: bool = True
) -> tuple[float, ...]:
    """Logistic regression (Newton steps, a small ridge) of evidence hits against unrelated
    hits; without ``scoped`` the question features that need the scope's term counts
    (absent, unknown_name) are left out, as a tenant-wide search has none; without ``best``
    the question's best cosine is (its weight comes out 0: the fit before that feature).
    The weights, in order: bias, coverage, context[, similarity, best_similarity], absent,
    unknown_name."""
    rows: list[list[float]] = []
    labels: list[float] = []
    for case in cases:
        if case["split"] != "dev":
            continue
        picks = case["evidence"][:1] if case["answerable"] else range(len(case["features"]))
        for i in picks:
            coverage, context, similarity, absent, unknown, top = case["features"][i]
            top = top if best else 0.0
            row = [1.0, coverage, context]
            if not lexical:
                row += [similarity or 0.0, similarity or 0.0 if top is None else top]
            rows.append([*row, absent, unknown] if scoped else row)
            labels.append(1.0 if case["answerable"] else 0.0)
    x = np.asarray(rows)
    y = np.asarray(labels)
    beta = logistic(x, y, balanced(y), ridge=1e-4, steps=50)
    return tuple(round(float(b), 3) for b in beta)


def balanced(y: np.ndarray) -> np.ndarray:
    """Sample weights under which each class (1 and 0 in ``y``) weighs half."""
    return np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))


def logistic(
    x: np.ndarray, y: np.ndarray, weight: np.ndarray, *, ridge: float, steps: int
) -> np.ndarray:
    """Weighted logistic regression of ``y`` on ``x`` by Newton steps, with a ridge."""
    beta = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ beta))
        gradient = x.T @ (weight * (p - y)) + ridge * beta
        hessian = (x * (weight * p * (1 - p))[:, None]).T @ x + ridge * np.eye(x.shape[1])
        beta -= np.linalg.solve(hessian, gradient)
    return beta


def _worst_lost(cases: list[Case], calibration: Calibration) -> float:
    rows = table(
        [case for case in cases if case["split"] == "dev"], calibration, [DEFAULT_MIN_SCORE]
    )
    return max(row[str(DEFAULT_MIN_SCORE)]["answerable_evidence_lost"] for row in rows.values())


def anchored(cases: list[Case], calibration: Calibration, lost: float) -> Calibration:
    """The fitted model with its biases moved so that the documented default ``min_score``
    cuts at most ``lost`` of the answerable questions' evidence in every dev set: the
    default means the same trade-off for every embedder."""
    low, high = -10.0, 10.0
    for _ in range(30):
        shift = (low + high) / 2
        moved = dataclasses.replace(
            calibration,
            bias=calibration.bias + shift,
            lexical=(calibration.lexical[0] + shift, *calibration.lexical[1:]),
        )
        if _worst_lost(cases, moved) <= lost:
            high = shift
        else:
            low = shift
    # rounded up: rounding to the nearest could move a case at the boundary back under it
    return dataclasses.replace(
        calibration,
        bias=_round_up(calibration.bias + high),
        lexical=(_round_up(calibration.lexical[0] + high), *calibration.lexical[1:]),
    )


def _round_up(value: float) -> float:
    return math.ceil(value * 1000) / 1000


def table(cases: list[Case], calibration: Calibration, thresholds: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    groups = sorted({(case["set"], case["split"]) for case in cases})
    for group in groups:
        chosen = [case for case in cases if (case["set"], case["split"]) == group]
        rows = {}
        for threshold in thresholds:
            nothing, unrelated_count, lost, found = 0, 0, 0, 0
            for case in chosen:
                values = [relevance(calibration, *features) for features in case["features"]]
                suffix = [max(values[i:]) for i in range(len(values))]
                if not case["answerable"]:
                    unrelated_count += 1
                    nothing += all(value < threshold for value in suffix)
                elif case["evidence"]:
                    found += 1
                    lost += suffix[case["evidence"][0]] < threshold
            rows[str(threshold)] = {
                "unrelated_returning_nothing": round(nothing / max(unrelated_count, 1), 3),
                "answerable_evidence_lost": round(lost / max(found, 1), 3),
            }
        out["/".join(group)] = rows
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--granularity", default="turn", choices=["turn", "chunk"])
    parser.add_argument("--thresholds", nargs="+", type=float, default=[0.1, 0.2, 0.3, 0.4, 0.5])
    parser.add_argument(
        "--lost",
        type=float,
        default=0.05,
        help="share of answerable evidence the default min_score may cut on each dev set",
    )
    parser.add_argument(
        "--unscoped",
        action="store_true",
        help="fit without the question features: the calibration of tenant-wide searches",
    )
    parser.add_argument(
        "--no-best",
        action="store_true",
        help="fit without the question's best cosine (best_similarity), for a side-by-side",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    embedder = resolve_embedder(args.embedder)
    with tempfile.TemporaryDirectory() as folder:
        with Memory.open(str(Path(folder) / "facts.db"), embedder=embedder, workers=1) as memory:
            cases = facts_cases(memory, args.granularity)
        with Memory.open(
            str(Path(folder) / "locomo.db"),
            embedder=embedder,
            workers=1,
            chunking=ChunkingPolicy(max_turns=4, version=4),
        ) as memory:
            cases += locomo_cases(memory, args.granularity)
        model_id = memory.embedding.model_id
    scoped = not args.unscoped
    if not scoped:  # a tenant-wide search knows neither question feature
        for case in cases:
            case["features"] = [
                (*features[:3], 0.0, 0.0, features[5]) for features in case["features"]
            ]
    current = calibration_for(model_id, args.granularity, scoped=scoped)
    vector = fit(cases, lexical=False, scoped=scoped, best=not args.no_best)
    lexical = fit(cases, lexical=True, scoped=scoped)
    fitted = Calibration(
        model_id,
        *vector[:4],  # type: ignore[arg-type]
        lexical,
        absent_weight=vector[5] if scoped else 0.0,
        unknown_name_weight=vector[6] if scoped else 0.0,
        best_weight=vector[4],
    )
    fitted = anchored(cases, fitted, args.lost)
    report = {
        "embedder": model_id,
        "granularity": args.granularity,
        "scoped": scoped,
        "fitted": fitted.__dict__,
        "current": current.__dict__,
        "current_table": table(cases, current, args.thresholds),
        "fitted_table": table(cases, fitted, args.thresholds),
    }
    print(json.dumps(report, ensure_ascii=False, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    return 0 if math.isfinite(sum(vector)) else 1


if __name__ == "__main__":
    sys.exit(main())
