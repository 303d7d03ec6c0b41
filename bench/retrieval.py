"""Retrieval quality on LoCoMo (dev split) and MADial-Bench (zh, en).

Metric (../shared/eval/README.md), the exact turn budget: take hits in rank order, each
hit's turns in its own order (a turn-level hit names one turn), and count turns until
exactly k are counted, cutting the last hit; recall is the share of a question's evidence
turns among those k. Questions without evidence are skipped.

    python bench/retrieval.py --embedder hashing --out bench/results/retrieval-hashing.json
    python bench/retrieval.py --embedder all-MiniLM-L6-v2 --modes hybrid vector

LoCoMo goes through the whole write path (turns -> index worker -> chunks); MADial memories
are single records in their user's archive (one conversation per user), because each
memory stands alone.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from convmem import Memory
from convmem.embed import resolve_embedder
from convmem.governance import KeepAllMarker, RuleMarker
from convmem.ingest import ChunkingPolicy
from convmem.ingest.formats import locomo_conversation
from convmem.retrieve import PreRetrieval
from reports import save
from tenants import home

DATA = Path(__file__).resolve().parents[2] / "shared" / "eval" / "data"
BUDGETS = (5, 10, 25)
VECTOR_WEIGHT: float | None = None
FUSION = "rrf"
MAX_TURNS = 4
GRANULARITY = "turn"


def evidence_ids(raw: list[str]) -> set[str]:
    """Normalise LoCoMo evidence strings: 'D8:6; D9:17', 'D:11:26', 'D30:05'."""
    out: set[str] = set()
    for item in raw:
        for part in re.split(r"[;,\s]+", item):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if match:
                out.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


def recall_at(
    hits_turns: Sequence[Sequence[Hashable]], evidence: set[Any], k: int
) -> tuple[float, int]:
    """Exact turn budget (../shared/eval/README.md): hits in rank order, each hit's turns in
    its own order, counted until exactly k turns; the last hit is cut, never let overshoot.
    A turn already counted (overlapping chunks) is not counted twice."""
    counted: list[Hashable] = []
    for turns in hits_turns:
        for turn in turns:
            if len(counted) == k:
                break
            if turn not in counted:
                counted.append(turn)
    return len(evidence & set(counted)) / len(evidence), len(counted)


def run_locomo(
    embedder_spec: str,
    modes: list[str],
    workdir: Path,
    *,
    marker: str = "rules",
    policy: dict[str, Any] | None = None,
    tenant_wide: bool = False,
) -> dict[str, Any]:
    """LoCoMo dev, each question asked of its conversation: with a filter, or
    (``tenant_wide``) with the conversation in a tenant of its own and no filter."""
    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))
    embedder = resolve_embedder(embedder_spec)
    results: dict[str, Any] = {}
    with Memory.open(
        str(workdir / f"locomo-{marker}-{len(json.dumps(policy))}.db"),
        embedder=embedder,
        workers=1,
        vector_weight=VECTOR_WEIGHT,
        fusion=FUSION,
        marker=KeepAllMarker() if marker == "keep-all" else RuleMarker(),
        policy=policy,
        chunking=ChunkingPolicy(max_turns=MAX_TURNS, version=MAX_TURNS),
    ) as shared:
        began = time.perf_counter()
        turn_count = 0
        dia_to_seq: dict[str, dict[str, int]] = {}
        homes: dict[str, Memory] = {}
        for sample in samples:
            conversation_id, turns = locomo_conversation(sample)
            dia_to_seq[conversation_id] = {t["meta"]["dia_id"]: t["turn_id"] for t in turns}
            homes[conversation_id] = home(shared, conversation_id, tenant_wide)
            for start in range(0, len(turns), 200):
                homes[conversation_id].add_turns(conversation_id, turns[start : start + 200])
            turn_count += len(turns)
        places = list(dict.fromkeys(homes.values()))  # the one memory, or each tenant's
        for place in places:
            place.flush(timeout=3600)
        ingest_seconds = time.perf_counter() - began
        chunk_count = sum(place.stats()["chunks"] for place in places)
        for mode in modes:
            per_budget: dict[int, list[float]] = {k: [] for k in BUDGETS}
            per_category: dict[str, dict[int, list[float]]] = defaultdict(
                lambda: {k: [] for k in BUDGETS}
            )
            returned: dict[int, list[int]] = {k: [] for k in BUDGETS}
            latencies: list[float] = []
            for sample in samples:
                conversation_id = str(sample["sample_id"])
                mapping = dia_to_seq[conversation_id]
                for qa in sample["qa"]:
                    evidence = {
                        mapping[d] for d in evidence_ids(qa.get("evidence", [])) if d in mapping
                    }
                    if not evidence:
                        continue
                    # the search embeds the question itself (as a caller's search does: the
                    # latency includes the query embedding, and the vector is of what the
                    # searcher embeds, see Searcher._vector_text)
                    started = time.perf_counter()
                    hits = homes[conversation_id].search(
                        qa["question"],
                        top_k=30,
                        filters=None if tenant_wide else {"conversation_id": conversation_id},
                        mode=mode,
                        granularity=GRANULARITY,
                        min_score=0,
                    )
                    latencies.append(time.perf_counter() - started)
                    # the turns a chunk holds: its kept turns, not every turn of its range
                    hit_turns = [
                        h.metadata.get("turn_seqs")
                        or list(range(h.metadata["turn_range"][0], h.metadata["turn_range"][1] + 1))
                        for h in hits
                    ]
                    for k in BUDGETS:
                        value, count = recall_at(hit_turns, evidence, k)
                        per_budget[k].append(value)
                        per_category[str(qa["category"])][k].append(value)
                        returned[k].append(count)
            results[mode] = {
                "questions": len(per_budget[5]),
                **{f"R@{k}": round(statistics.mean(v), 4) for k, v in per_budget.items()},
                **{f"turns@{k}": round(statistics.mean(v), 1) for k, v in returned.items()},
                "per_category": {
                    category: {f"R@{k}": round(statistics.mean(v), 4) for k, v in values.items()}
                    | {"n": len(values[5])}
                    for category, values in sorted(per_category.items())
                },
                "search_ms_p50": round(statistics.median(latencies) * 1000, 3),
                "search_ms_p99": round(sorted(latencies)[int(len(latencies) * 0.99)] * 1000, 3),
            }
    return {
        "turns": turn_count,
        "chunks": chunk_count,
        "ingest_seconds": round(ingest_seconds, 2),
        "ingest_turns_per_second": round(turn_count / ingest_seconds, 1),
        "modes": results,
    }


def _madial(language: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    folder = DATA / "madial_bench" / language
    memories: dict[str, dict[str, Any]] = {}
    for line in (
        (folder / f"MADial-Bench-{language}-memory.json").read_text(encoding="utf-8").splitlines()
    ):
        if line.strip():
            memories.update(json.loads(line))
    if language == "en":  # the English file lacks user ids; ids match the Chinese file
        zh = _madial("zh")[0]
        for key, value in memories.items():
            value["user-id"] = zh[key]["user-id"]
    dialogues = [
        json.loads(line)
        for line in (folder / f"MADial-Bench-{language}-dialogue.json")
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip()
    ]
    return memories, dialogues


def _dialogue_turns(dialogue: dict[str, Any]) -> list[dict[str, str]]:
    """The turns before the test turn, as ``{"role", "text"}`` (speaker tags taken off)."""
    test_turn = dialogue["test-turn"][0]
    turns = []
    for line in dialogue["dialogue"][1:test_turn]:
        speaker = re.match(r"^<([^>]+)>:", line.strip())
        text = re.sub(r"^<[^>]+>:\s*", "", line.strip()).strip().strip('"').strip("“”")
        if text:
            role = "assistant" if speaker and speaker.group(1) == "Assistant" else "user"
            turns.append({"role": role, "text": text})
    return turns


def run_madial(
    language: str, embedder_spec: str, modes: list[str], workdir: Path, query_views: list[str]
) -> dict[str, Any]:
    memories, dialogues = _madial(language)
    embedder = resolve_embedder(embedder_spec)
    results: dict[str, Any] = {}
    with Memory.open(
        str(workdir / f"madial-{language}.db"),
        embedder=embedder,
        workers=0,
        vector_weight=VECTOR_WEIGHT,
        fusion=FUSION,
    ) as memory:
        records = [
            {
                "chunk_id": f"mem_{key}",
                "text": f"{value['time']} {value['scene']} {value['emotion']}\n{value['event']}",
                "metadata": {
                    "conversation_id": f"user{value['user-id']}",
                    "turn_range": [int(key), int(key)],
                },
            }
            for key, value in memories.items()
        ]
        result = memory.upsert_chunks(records)
        assert not result.errors, result.errors[:3]
        # query processing: the vector of the whole window, or the dialogue view (one vector
        # per line pooled towards the newest, assistant lines at half weight)
        views = {
            view: PreRetrieval(
                {"action": "multi_embed", "embedder": memory.embedding, "views": [view]}
            )
            for view in query_views
        }
        runs = [
            (mode, view) for mode in modes for view in (query_views if mode != "lexical" else [""])
        ]
        for mode, view in runs:
            recalls: dict[int, list[float]] = {k: [] for k in (1, 5, 10)}
            latencies: list[float] = []
            for dialogue in dialogues:
                relevant = {int(x) for x in dialogue["relevant-id"]}
                if not relevant:
                    continue
                turns = _dialogue_turns(dialogue)
                query = "\n".join(turn["text"] for turn in turns)
                query_vector = (
                    None
                    if mode == "lexical"
                    else views[view].execute({"question": query, "dialogue": turns})[
                        "query_embedding"
                    ]
                )
                started = time.perf_counter()
                hits = memory.search(
                    query,
                    top_k=10,
                    filters={"conversation_id": f"user{dialogue['user-id']}"},
                    query_vector=query_vector,
                    mode=mode,
                    granularity=GRANULARITY,
                    min_score=0,
                )
                latencies.append(time.perf_counter() - started)
                ranked = [[h.metadata["turn_range"][0]] for h in hits]  # one memory each
                for k in recalls:
                    recalls[k].append(recall_at(ranked, relevant, k)[0])
            results[f"{mode}/{view}" if view else mode] = {
                "dialogues": len(recalls[5]),
                **{f"R@{k}": round(statistics.mean(v), 4) for k, v in recalls.items()},
                "search_ms_p50": round(statistics.median(latencies) * 1000, 3),
            }
    return {"memories": len(memories), "modes": results}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--modes", nargs="+", default=["hybrid", "vector", "lexical"])
    parser.add_argument("--only", choices=["locomo", "madial-zh", "madial-en"], nargs="*")
    parser.add_argument(
        "--query-views",
        nargs="+",
        choices=["full", "dialogue"],
        default=["full", "dialogue"],
        help="MADial query vectors: the whole window, or the pooled dialogue view",
    )
    parser.add_argument("--vector-weight", type=float, default=None)
    parser.add_argument("--fusion", choices=["rrf", "convex"], default="rrf")
    parser.add_argument("--max-turns", type=int, default=4, help="turns per LoCoMo chunk")
    parser.add_argument(
        "--granularity",
        choices=["chunk", "turn"],
        default="turn",
        help="hits: evidence turns with their chunk as context (default), or whole chunks",
    )
    parser.add_argument(
        "--marker",
        choices=["rules", "keep-all"],
        default="rules",
        help="Stage 2 marker for LoCoMo ingest (keep-all: marking off)",
    )
    parser.add_argument(
        "--tenant-wide",
        action="store_true",
        help="LoCoMo: each conversation in a tenant of its own, asked without a filter",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    global VECTOR_WEIGHT, MAX_TURNS, FUSION, GRANULARITY
    VECTOR_WEIGHT = args.vector_weight
    FUSION = args.fusion
    MAX_TURNS = args.max_turns
    GRANULARITY = args.granularity
    if not DATA.is_dir():
        print(f"evaluation data not found at {DATA}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "embedder": args.embedder,
        "marker": args.marker,
        "fusion": args.fusion,
        "vector_weight": args.vector_weight,
        "tenant_wide": args.tenant_wide,
    }
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        wanted = args.only or ["locomo", "madial-zh", "madial-en"]
        if "madial-zh" in wanted:
            report["madial_zh"] = run_madial(
                "zh", args.embedder, args.modes, workdir, args.query_views
            )
            print(json.dumps({"madial_zh": report["madial_zh"]}, ensure_ascii=False), flush=True)
        if "madial-en" in wanted:
            report["madial_en"] = run_madial(
                "en", args.embedder, args.modes, workdir, args.query_views
            )
            print(json.dumps({"madial_en": report["madial_en"]}, ensure_ascii=False), flush=True)
        if "locomo" in wanted:
            report["locomo"] = run_locomo(
                args.embedder, args.modes, workdir, marker=args.marker, tenant_wide=args.tenant_wide
            )
            print(json.dumps({"locomo": report["locomo"]}, ensure_ascii=False), flush=True)
    save(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
