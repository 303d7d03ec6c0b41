"""Write-time quality of Stage 2 marking (seed 002).

1. LoCoMo dev split: the rule marker against the `observation` labels (turns an annotator
   LLM cited as worth remembering). Keep recall of cited turns, the share of all turns
   dropped, and keep recall of the turns QA questions cite as evidence, for a sweep of
   `keep_threshold` (the default is marked).
2. A small Chinese agent-style set written for this repository (bench/data/marking_zh.jsonl),
   labelled by the seed's policy: accuracy, keep recall, drop share.
3. Chinese daily-life chat (bench/data/marking_zh_chat.jsonl, 501 turns, hand-labelled with
   category and TTL class): keep precision and recall, category accuracy and TTL agreement
   (over turns both labelled and marked keep), reported per split: ``dev`` (tuned on in
   round 1), ``dev2`` (held out in round 1, tuned on in round 2) and ``heldout`` (written
   before round 2, never tuned on).
4. With --retrieval: LoCoMo evidence recall through the whole write path with marking on
   (rules) and off (keep-all), side by side in one run.

    python bench/marking.py --out bench/results/marking.json
    python bench/marking.py --retrieval --out bench/results/marking-retrieval.json

Marks are computed exactly as the index worker computes them: the marker's base marks,
then ``derive`` (pins, confirmed decisions) over each conversation.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from convmem.governance import GovernancePolicy, MarkTurn, RuleMarker, TurnMark, derive
from convmem.governance.policy import DAY
from convmem.ingest.formats import locomo_conversation
from reports import save

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "eval" / "data"
THRESHOLDS = (0.3, 0.45, 0.55, 0.7, 0.85, 1.0, 1.2, 1.5)


def _dia(value: str) -> str | None:
    match = re.fullmatch(r"D:?(\d+):0*(\d+)", value.strip())
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else None


def effective_marks(turns: list[dict[str, Any]], policy: GovernancePolicy) -> dict[int, TurnMark]:
    """turn_id -> effective mark, as the worker would mark one conversation."""
    marker = RuleMarker()
    mark_turns = [
        MarkTurn(
            seq=int(t["turn_id"]) if isinstance(t["turn_id"], int) else index,
            turn_id=t["turn_id"],
            role=t.get("role", "user"),
            text=t["text"],
            timestamp=datetime.fromisoformat(t["timestamp"]).timestamp(),
            name=t.get("name"),
        )
        for index, t in enumerate(turns)
    ]
    base = {
        turn.seq: mark
        for turn, mark in zip(mark_turns, marker.mark(mark_turns, (), policy), strict=True)
    }
    derived = derive(
        "bench", mark_turns, base, policy, new_from=0, accepted_at={t.seq: 0.0 for t in mark_turns}
    )
    return {turn.seq: derived.effective[turn.seq] for turn in mark_turns}


def effective_keep(turns: list[dict[str, Any]], policy: GovernancePolicy) -> dict[int, bool]:
    """turn_id -> kept, as the worker would mark one conversation."""
    return {seq: mark.keep for seq, mark in effective_marks(turns, policy).items()}


def run_locomo_labels() -> dict[str, Any]:
    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))
    conversations = []
    for sample in samples:
        cited: set[str] = set()
        for per_session in sample["observation"].values():
            for facts in per_session.values():
                for fact in facts:
                    ids = fact[1] if isinstance(fact[1], list) else [fact[1]]
                    cited.update(d for d in (_dia(str(i)) for i in ids) if d)
        evidence: set[str] = set()
        for qa in sample["qa"]:
            for item in qa.get("evidence", []):
                evidence.update(d for d in (_dia(p) for p in re.split(r"[;,\s]+", item)) if d)
        _, turns = locomo_conversation(sample)
        conversations.append((turns, cited, evidence))
    sweep = []
    began = time.perf_counter()
    for threshold in THRESHOLDS:
        policy = GovernancePolicy(keep_threshold=threshold)
        total = kept = cited_total = cited_kept = ev_total = ev_kept = 0
        for turns, cited, evidence in conversations:
            keep = effective_keep(turns, policy)
            for turn in turns:
                dia = turn["meta"]["dia_id"]
                k = keep[turn["turn_id"]]
                total += 1
                kept += k
                if dia in cited:
                    cited_total += 1
                    cited_kept += k
                if dia in evidence:
                    ev_total += 1
                    ev_kept += k
        sweep.append(
            {
                "keep_threshold": threshold,
                "default": threshold == GovernancePolicy().keep_threshold,
                "cited_keep_recall": round(cited_kept / cited_total, 4),
                "qa_evidence_keep_recall": round(ev_kept / ev_total, 4),
                "dropped_share": round(1 - kept / total, 4),
            }
        )
    elapsed = time.perf_counter() - began
    turns_total = sum(len(t) for t, _, _ in conversations)
    return {
        "turns": turns_total,
        "cited_turns": sum(len(c) for _, c, _ in conversations),
        "never_cited_share": round(1 - sum(len(c) for _, c, _ in conversations) / turns_total, 4),
        "marking_turns_per_second": round(turns_total * len(THRESHOLDS) / elapsed, 1),
        "sweep": sweep,
    }


def run_chinese_set() -> dict[str, Any]:
    rows = [
        json.loads(line)
        for line in (HERE / "data" / "marking_zh.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_conversation.setdefault(row["conversation_id"], []).append(row)
    policy = GovernancePolicy()
    correct = keep_labels = keep_hits = dropped = 0
    mistakes = []
    for conversation_id, turns in by_conversation.items():
        keep = effective_keep(turns, policy)
        for turn in turns:
            got = keep[turn["turn_id"]]
            want = turn["label"] == "keep"
            correct += got == want
            keep_labels += want
            keep_hits += got and want
            dropped += not got
            if got != want:
                mistakes.append(
                    f"{conversation_id}#{turn['turn_id']} {turn['role']}: {turn['text']} "
                    f"(label {turn['label']})"
                )
    return {
        "turns": len(rows),
        "accuracy": round(correct / len(rows), 4),
        "keep_recall": round(keep_hits / keep_labels, 4),
        "dropped_share": round(dropped / len(rows), 4),
        "label_dropped_share": round(1 - keep_labels / len(rows), 4),
        "mistakes": mistakes,
    }


def ttl_class(mark: TurnMark) -> str:
    """The label's TTL class of a kept mark: ``long`` (ttl 0) or whole days ("180d")."""
    return "long" if mark.ttl_seconds == 0 else f"{round(mark.ttl_seconds / DAY)}d"


def _chat_split(rows: list[dict[str, Any]], policy: GovernancePolicy) -> dict[str, Any]:
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_conversation.setdefault(row["conversation_id"], []).append(row)
    want_keep = got_keep = both = category_ok = ttl_ok = 0
    mistakes = []
    for conversation_id, turns in by_conversation.items():
        marks = effective_marks(turns, policy)
        for turn in turns:
            mark = marks[turn["turn_id"]]
            want = turn["label"] == "keep"
            want_keep += want
            got_keep += mark.keep
            where = f"{conversation_id}#{turn['turn_id']} {turn['role']}: {turn['text']}"
            if mark.keep != want:
                mistakes.append(f"{where} (label {turn['label']}; got: {mark.reason})")
            if not (mark.keep and want):
                continue
            both += 1
            category_ok += mark.category == turn["category"]
            ttl_ok += ttl_class(mark) == turn["ttl"]
            if mark.category != turn["category"] or ttl_class(mark) != turn["ttl"]:
                mistakes.append(
                    f"{where} (label {turn['category']}/{turn['ttl']}; "
                    f"got {mark.category}/{ttl_class(mark)}: {mark.reason})"
                )
    return {
        "turns": len(rows),
        "conversations": len(by_conversation),
        "label_keep": want_keep,
        "keep_precision": round(both / got_keep, 4) if got_keep else None,
        "keep_recall": round(both / want_keep, 4),
        "category_accuracy": round(category_ok / both, 4) if both else None,
        "ttl_agreement": round(ttl_ok / both, 4) if both else None,
        "dropped_share": round(1 - got_keep / len(rows), 4),
        "label_dropped_share": round(1 - want_keep / len(rows), 4),
        "mistakes": mistakes,
    }


def run_chat_set() -> dict[str, Any]:
    """bench/data/marking_zh_chat.jsonl: Chinese daily-life chat, labelled keep/drop with
    category and TTL class; figures per split (``heldout`` was never tuned on)."""
    rows = [
        json.loads(line)
        for line in (HERE / "data" / "marking_zh_chat.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip()
    ]
    policy = GovernancePolicy()
    splits = dict.fromkeys(row["split"] for row in rows)
    return {
        split: _chat_split([row for row in rows if row["split"] == split], policy)
        for split in splits
    }


def run_retrieval(embedder: str, thresholds: list[float]) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from retrieval import run_locomo

    out = {}
    runs: list[tuple[str, str, dict[str, Any] | None]] = [("keep-all", "keep-all", None)]
    runs += [(f"rules@{t:g}", "rules", {"keep_threshold": t}) for t in thresholds]
    with tempfile.TemporaryDirectory() as folder:
        for name, marker, policy in runs:
            report = run_locomo(
                embedder, ["hybrid", "lexical"], Path(folder), marker=marker, policy=policy
            )
            out[name] = {
                "chunks": report["chunks"],
                "ingest_turns_per_second": report["ingest_turns_per_second"],
                **{
                    mode: {k: v for k, v in values.items() if k.startswith(("R@", "turns@"))}
                    for mode, values in report["modes"].items()
                },
            }
            print(json.dumps({name: out[name]}), flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--retrieval", action="store_true", help="also LoCoMo recall on/off")
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=[GovernancePolicy().keep_threshold],
        help="keep_threshold values for the retrieval runs with marking on",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"evaluation data not found at {DATA}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"locomo_observation": run_locomo_labels()}
    print(json.dumps(report, indent=2), flush=True)
    report["chinese_set"] = run_chinese_set()
    print(json.dumps({"chinese_set": report["chinese_set"]}, ensure_ascii=False, indent=2))
    report["chat_set"] = run_chat_set()
    print(json.dumps({"chat_set": report["chat_set"]}, ensure_ascii=False, indent=2))
    if args.retrieval:
        report["retrieval"] = run_retrieval(args.embedder, args.thresholds)
    save(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
