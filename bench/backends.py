"""SQLite and PostgreSQL side by side: ingest with N workers, search at scale, HNSW recall.

    python bench/backends.py ingest --postgres URL --turns 20000 --workers 1 2
    python bench/backends.py search --postgres URL --chunks 1000000

``ingest`` queues real dialogue turns, then starts N ``convmem worker --once`` processes
and times them until the backlog is drained (turns indexed per second, end to end).
``search`` bulk-loads the same synthetic chunks (real dialogue text, clustered unit
vectors; see speed.py) into each backend, then times filtered (one conversation) and
tenant-wide hybrid searches with precomputed query vectors, and measures recall@10 of the
approximate vector index against exact search. Backends run one after the other in one
run, on the same machine, with the same probes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from convmem import HashingEmbedder, Memory
from convmem.store import parse_filters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reports import save
from speed import build_store, corpus_turns, index_top_ten, pct


def pg_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def vacuum(base: str, schema: str) -> None:
    """What autovacuum does after a bulk load: statistics, and the visibility map (GIN
    counts skip heap pages that are all visible)."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'VACUUM (ANALYZE) "{schema}".chunks')


def urls(args: argparse.Namespace, folder: str, tag: str) -> list[tuple[str, str]]:
    out = []
    if "sqlite" in args.backends:
        out.append(("sqlite", f"sqlite:///{args.sqlite_path or f'{folder}/{tag}.db'}"))
    for backend in ("postgres", "citus"):
        base = getattr(args, backend)
        if base and backend in args.backends:
            schema = args.schema or f"bench_{tag}_{uuid.uuid4().hex[:6]}"
            out.append((backend, pg_url(base, schema)))
    return out


def cleanup(args: argparse.Namespace, backend: str, url: str) -> None:
    if backend != "sqlite" and not args.keep and not args.schema:
        drop_schema(getattr(args, backend), url.rsplit("schema=", 1)[1])


def bench_ingest(args: argparse.Namespace) -> list[dict[str, Any]]:
    lines = corpus_turns()
    rng = random.Random(1)
    per_conversation = 200
    conversations = []
    for _ in range(max(1, args.turns // per_conversation)):
        offset = rng.randrange(len(lines) - per_conversation)
        conversations.append(
            [
                {
                    "turn_id": i,
                    "role": "user" if i % 2 == 0 else "assistant",
                    "text": lines[offset + i][1],
                    "timestamp": "2026-02-02T10:00:00+08:00",
                }
                for i in range(per_conversation)
            ]
        )
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for workers in args.workers:
            for backend, url in urls(args, folder, f"ingest{workers}"):
                with Memory.open(url, embedder=HashingEmbedder(), workers=0) as memory:
                    for index, turns in enumerate(conversations):
                        for start in range(0, per_conversation, 20):
                            memory.add_turns(f"conv{index}", turns[start : start + 20])
                command = [
                    sys.executable,
                    "-m",
                    "convmem.cli.main",
                    "--store",
                    url,
                    "--embedder",
                    "hashing",
                    "worker",
                    "--once",
                ]
                began = time.perf_counter()
                procs = [
                    subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
                    for _ in range(workers)
                ]
                for proc in procs:
                    proc.communicate(timeout=7200)
                elapsed = time.perf_counter() - began
                with Memory.open(url, embedder=HashingEmbedder(), workers=0) as memory:
                    stats = memory.stats()
                    backlog = memory.store.backlog()
                turns = sum(len(c) for c in conversations)
                results.append(
                    {
                        "backend": backend,
                        "workers": workers,
                        "turns": turns,
                        "seconds": round(elapsed, 1),
                        "turns_per_s": round(turns / elapsed, 1),
                        "chunks": stats["chunks"],
                        "backlog_after": backlog,
                    }
                )
                print(json.dumps(results[-1]), flush=True)
                cleanup(args, backend, url)
    return results


def probes_of(memory: Memory, chunks: int, count: int, dimension: int, seed: int = 3) -> list[Any]:
    rng = random.Random(seed)
    out = []
    store = memory.store
    for rowid in (rng.randrange(1, chunks + 1) for _ in range(count)):
        row = store.chunk_fingerprints(
            "default", [f"chk_{rowid - 1:012d}"]
        )  # (sha, model, vector bytes)
        (_, _, blob, _) = next(iter(row.values()))
        vector = np.frombuffer(blob, dtype=np.float32).copy()
        noise = np.random.default_rng(rowid).standard_normal(dimension).astype(np.float32)
        vector += 0.3 * noise / dimension**0.5
        vector /= np.linalg.norm(vector)
        text, meta = (
            store._db()
            .execute(
                "SELECT text, conversation_id FROM chunks WHERE tenant='default' AND chunk_id=?",
                (f"chk_{rowid - 1:012d}",),
            )
            .fetchone()
        )
        out.append((" ".join(text.split()[:6]) or "hello", vector, meta))
    return out


def copy_chunks(source: str, target: str, dimension: int) -> None:
    """Copy a loaded PostgreSQL schema's chunks into ``target`` with COPY (binary).

    Loading 1 M chunks through the store statement by statement costs about four times
    longer through a Citus coordinator than on a plain server; the search figures need the
    same rows, not a second slow load. Only ``chunks`` and the embedding model are copied.
    """
    import psycopg

    embedder = HashingEmbedder(dimension)
    with Memory.open(target, embedder=embedder, workers=0) as memory:
        memory.store.set_embedding_model(embedder.model_id, dimension)
        memory.store.drop_vector_index()  # type: ignore[attr-defined]
    columns = ", ".join(COPIED_COLUMNS)
    src_base, src_schema = source.split("?schema=")
    dst_base, dst_schema = target.split("?schema=")
    with psycopg.connect(src_base) as src, psycopg.connect(dst_base) as dst:
        with (
            src.cursor().copy(
                f'COPY (SELECT {columns} FROM "{src_schema}".chunks) TO STDOUT (FORMAT BINARY)'
            ) as out,
            dst.cursor().copy(
                f'COPY "{dst_schema}".chunks ({columns}) FROM STDIN (FORMAT BINARY)'
            ) as into,
        ):
            for block in out:
                into.write(block)
        dst.commit()


#: Every column of ``chunks`` but its identity key, which COPY writes as given.
COPIED_COLUMNS = (
    "rowid",
    "tenant",
    "chunk_id",
    "conversation_id",
    "start_seq",
    "end_seq",
    "chunk_version",
    "text",
    "text_sha256",
    "metadata",
    "participants",
    "speakers",
    "intent_tag",
    "ts_start",
    "ts_end",
    "deleted",
    "provisional",
    "origin",
    "importance",
    "category",
    "expires_at",
    "pinned",
    "requires_confirmation",
    "vector",
    "model_id",
    "updated_at",
    "change_seq",
    "tsv",
    "ntokens",
    "turn_vectors",
)


def copy_source(args: argparse.Namespace, folder: str) -> str | None:
    """The kept PostgreSQL schema (``--schema``) the Citus backend copies, if it is loaded."""
    if not (args.postgres and args.schema):
        return None
    source = pg_url(args.postgres, args.schema)
    return source if loaded(source, args.dimension) >= args.chunks else None


def loaded(url: str, dimension: int) -> int:
    with Memory.open(url, embedder=HashingEmbedder(dimension), workers=0) as memory:
        return int(memory.stats()["chunks"])


def rebuild_index(args: argparse.Namespace, backend: str, url: str) -> float:
    """Drop and build a server store's HNSW index, then VACUUM (ANALYZE); its build seconds."""
    with Memory.open(url, embedder=HashingEmbedder(args.dimension), workers=0) as m:
        m.store.drop_vector_index()  # type: ignore[attr-defined]
        began = time.perf_counter()
        m.store.build_vector_index(  # type: ignore[attr-defined]
            memory=args.index_memory, m=args.hnsw_m, ef_construction=args.ef_construction
        )
        seconds = time.perf_counter() - began
    vacuum(getattr(args, backend), url.rsplit("schema=", 1)[1])
    return seconds


def bench_search(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(dir=args.scratch) as folder:
        for backend, url in urls(args, folder, "search"):
            began = time.perf_counter()
            index_seconds = None
            how = "kept"
            if backend != "sqlite" and loaded(url, args.dimension) >= args.chunks:
                load_seconds = 0.0  # a kept schema from an earlier run (--schema)
                if args.reindex:
                    index_seconds = rebuild_index(args, backend, url)
            elif backend != "sqlite":
                source = copy_source(args, folder)
                how = "copy" if backend == "citus" and source else "store"
                if how == "copy":
                    copy_chunks(source, url, args.dimension)  # type: ignore[arg-type]
                else:
                    with Memory.open(url, embedder=HashingEmbedder(args.dimension), workers=0) as m:
                        m.store.drop_vector_index()  # type: ignore[attr-defined]
                    build_store(url, args.chunks, args.dimension, args.per_conversation)
                load_seconds = time.perf_counter() - began
                index_seconds = rebuild_index(args, backend, url)
            elif args.sqlite_path and loaded(url, args.dimension) >= args.chunks:
                load_seconds = 0.0  # a kept file from an earlier run (--sqlite-path)
            else:
                build_store(
                    url.removeprefix("sqlite:///"),
                    args.chunks,
                    args.dimension,
                    args.per_conversation,
                )
                load_seconds = time.perf_counter() - began
                how = "store"
                with Memory.open(url, embedder=HashingEmbedder(args.dimension), workers=0) as m:
                    m.store._after_purge()  # merge the bulk load's FTS5 segments, as purge does
            print(f"{backend}: loaded {args.chunks} chunks in {load_seconds:.0f}s", flush=True)
            with Memory.open(
                url, embedder=HashingEmbedder(args.dimension), workers=0, ann_min_rows=0
            ) as memory:
                began = time.perf_counter()
                memory.search(
                    "warm up",
                    top_k=1,
                    query_vector=np.ones(args.dimension, np.float32) / args.dimension**0.5,
                )
                if backend == "sqlite":
                    index_seconds = time.perf_counter() - began  # HNSW sidecar built on first use
                memory.search(
                    "预热 分词", top_k=1, mode="lexical", filters={"conversation_id": "conv0"}
                )
                probes = probes_of(memory, args.chunks, args.queries, args.dimension)
                # Untimed passes with other probes than the timed ones: they warm the
                # page caches and the term counts, not the exact paths measured below.
                warm = probes_of(memory, args.chunks, args.queries, args.dimension, seed=4)
                for _ in range(args.warm_passes):
                    for query, vector, conversation in warm:
                        memory.search(
                            query,
                            top_k=10,
                            query_vector=vector,
                            filters={"conversation_id": conversation},
                        )
                        memory.search(query, top_k=10, query_vector=vector)
                filtered, tenant_wide = [], []
                for query, vector, conversation in probes:
                    t0 = time.perf_counter()
                    memory.search(
                        query,
                        top_k=10,
                        query_vector=vector,
                        filters={"conversation_id": conversation},
                    )
                    filtered.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    memory.search(query, top_k=10, query_vector=vector)
                    tenant_wide.append(time.perf_counter() - t0)
                recall, exact_times = [], []
                spec = parse_filters(None, tenant="default")
                for _, vector, _ in probes[: args.recall_probes]:
                    approx = index_top_ten(memory, vector)
                    t0 = time.perf_counter()
                    if backend != "sqlite":
                        exact = memory.store.scan_vectors("default", spec, vector, 10, exact=True)  # type: ignore[call-arg]
                    else:
                        exact = memory.store.scan_vectors("default", spec, vector, 10)
                    exact_times.append(time.perf_counter() - t0)
                    rows = memory.store.load_rows("default", [rowid for rowid, _ in exact])
                    recall.append(len(approx & {rows[r][0] for r, _ in exact}) / 10)
                size = memory.store._size_bytes()
            results.append(
                {
                    "backend": backend,
                    "chunks": args.chunks,
                    "dimension": args.dimension,
                    "bulk_load_seconds": round(load_seconds, 1),
                    "loaded_by": how,
                    "vector_index_seconds": round(index_seconds or 0.0, 1),
                    "filtered_ms_p50": round(pct(filtered, 0.5) * 1000, 2),
                    "filtered_ms_p99": round(pct(filtered, 0.99) * 1000, 2),
                    "tenant_wide_ms_p50": round(pct(tenant_wide, 0.5) * 1000, 2),
                    "tenant_wide_ms_p99": round(pct(tenant_wide, 0.99) * 1000, 2),
                    "hnsw_recall_at_10": round(statistics.mean(recall), 4) if recall else None,
                    "recall_probes": len(recall),
                    "exact_ms_p50": round(pct(exact_times, 0.5) * 1000, 1) if exact_times else None,
                    "store_mb": round(size / 2**20, 1),
                }
            )
            print(json.dumps(results[-1]), flush=True)
            cleanup(args, backend, url)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["ingest", "search"])
    parser.add_argument("--postgres", help="postgresql:// URL of a server with pgvector")
    parser.add_argument(
        "--citus", help="postgresql:// URL of a Citus coordinator (workers with pgvector)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL schemas")
    parser.add_argument("--sqlite-path", help="SQLite file to use and keep; a loaded one is reused")
    parser.add_argument(
        "--schema", help="PostgreSQL schema to use and keep; a loaded one is reused as it is"
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["sqlite", "postgres", "citus"],
        choices=["sqlite", "postgres", "citus"],
    )
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chunks", type=int, default=100000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--per-conversation", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--recall-probes", type=int, default=30)
    parser.add_argument(
        "--warm-passes",
        type=int,
        default=1,
        help="untimed passes over the probes first (0: measure a cold cache)",
    )
    parser.add_argument("--index-memory", default="2GB", help="maintenance_work_mem for HNSW")
    parser.add_argument("--hnsw-m", type=int, default=16, help="HNSW links per node")
    parser.add_argument("--ef-construction", type=int, default=128, help="HNSW build breadth")
    parser.add_argument(
        "--reindex", action="store_true", help="rebuild the HNSW index of a kept schema"
    )
    parser.add_argument("--scratch", help="folder for the SQLite files (default: temp)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = bench_ingest(args) if args.what == "ingest" else bench_search(args)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
