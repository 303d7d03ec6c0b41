"""Load test of the HTTP service on loopback: many concurrent clients writing and searching.

Starts `convmem serve` as its own process (API keys on, a worker thread inside), then runs
`--clients` client threads for `--seconds`: each writes turns to its own conversation in
batches and searches its tenant, in the ratio `--search-share`. Reports throughput,
p50/p99 per operation and errors. Bounded in count and time.

    python bench/http_load.py --clients 16 --seconds 30 --out bench/results/http-load.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

TEXTS = [
    "我下个月要去东京出差，大概待五天。",
    "好的，请问您的护照有效期还够吗？",
    "我护照是明年二月过期的，得赶紧去换。",
    "季度报告周五下午五点前要交给王经理。",
    "I prefer aisle seats on long flights.",
    "Remind me to call the dentist on Monday.",
    "我不吃香菜，坐飞机喜欢靠窗的座位。",
    "我们团队决定下季度主推新款智能手表。",
]
QUERIES = ["护照什么时候过期", "报告交给谁", "座位偏好", "dentist appointment", "出差几天"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--batch", type=int, default=4, help="turns per write")
    parser.add_argument("--search-share", type=float, default=0.5)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument(
        "--workers",
        nargs="+",
        choices=["thread", "process"],
        default=["thread", "process"],
        help="index worker inside the server (thread) or as `convmem worker` (process)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    reports = {worker: run(args, worker) for worker in args.workers}
    print(json.dumps(reports, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(reports, indent=2), encoding="utf-8")
    return 0


def run(args: argparse.Namespace, worker: str) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="convmem-load-")
    store = str(Path(folder) / "load.db")
    admin = "load-admin-" + os.urandom(8).hex()
    port = _free_port()
    env = dict(os.environ, CONVMEM_ADMIN_KEY=admin)
    command = [sys.executable, "-m", "convmem.cli.main", "--store", store]
    command += ["--embedder", "hashing"]
    threads = "1" if worker == "thread" else "0"
    server = subprocess.Popen(
        [*command, "serve", "--port", str(port), "--threads", threads],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    helper = None
    if worker == "process":
        helper = subprocess.Popen(
            [*command, "worker"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server did not start")
            time.sleep(0.1)
        keys = []
        for index in range(args.tenants):
            response = httpx.post(
                f"{base}/v1/admin/keys",
                json={"tenant": f"tenant-{index}"},
                headers={"Authorization": f"Bearer {admin}"},
            )
            keys.append(response.json()["key"])
        latencies: dict[str, list[float]] = {"write": [], "search": []}
        errors: dict[str, int] = {}
        lock = threading.Lock()
        stop_at = time.monotonic() + args.seconds

        def client(number: int) -> None:
            rng = random.Random(number)
            headers = {"Authorization": f"Bearer {keys[number % len(keys)]}"}
            next_turn = 0
            with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
                while time.monotonic() < stop_at:
                    if rng.random() < args.search_share:
                        kind = "search"
                        body: dict[str, Any] = {"query_text": rng.choice(QUERIES), "top_k": 5}
                        path = "/v1/search"
                    else:
                        kind = "write"
                        turns = [
                            {
                                "turn_id": next_turn + i,
                                "role": "user" if (next_turn + i) % 2 == 0 else "assistant",
                                "text": rng.choice(TEXTS),
                                "timestamp": "2026-03-01T10:00:00+08:00",
                            }
                            for i in range(args.batch)
                        ]
                        next_turn += args.batch
                        body = {"turns": turns}
                        path = f"/v1/conversations/load-{number}/turns"
                    began = time.perf_counter()
                    try:
                        response = http.post(path, json=body)
                        status = response.status_code
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                    elapsed = time.perf_counter() - began
                    with lock:
                        if status in (200, 202):
                            latencies[kind].append(elapsed)
                        else:
                            errors[f"{kind}:{status}"] = errors.get(f"{kind}:{status}", 0) + 1

        rss: list[tuple[float, float]] = []  # (seconds into the run, server RSS in MB)

        def sample_rss() -> None:
            import psutil

            process = psutil.Process(server.pid)
            while time.monotonic() < stop_at:
                rss.append(
                    (time.monotonic() - (stop_at - args.seconds), process.memory_info().rss / 2**20)
                )
                time.sleep(min(10.0, args.seconds / 20))

        began = time.perf_counter()
        clients = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        clients.append(threading.Thread(target=sample_rss))
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        wall = time.perf_counter() - began
        drain_began = time.perf_counter()
        # /healthz shows no counts; the backlog across tenants is the admin's status route
        status_url, admin_headers = f"{base}/v1/admin/status", {"Authorization": f"Bearer {admin}"}
        while httpx.get(status_url, headers=admin_headers).json()["backlog"]:
            time.sleep(0.1)
        report = {
            "clients": args.clients,
            "seconds": round(wall, 1),
            "turns_per_write": args.batch,
            "backlog_drain_seconds": round(time.perf_counter() - drain_began, 1),
            "errors": errors,
            # a flat line is the goal: memory given back between requests, not grown per thread
            "server_rss_mb": {
                "first_minute_max": round(max(v for t, v in rss if t < 60), 1) if rss else None,
                "last_minute_max": round(max(v for t, v in rss if t >= wall - 60), 1)
                if rss
                else None,
                "max": round(max(v for _, v in rss), 1) if rss else None,
                "samples": [[round(t), round(v, 1)] for t, v in rss],
            },
            **{
                kind: {
                    "requests": len(values),
                    "per_second": round(len(values) / wall, 1),
                    "p50_ms": _quantile(values, 0.5),
                    "p99_ms": _quantile(values, 0.99),
                    "mean_ms": round(statistics.fmean(values) * 1000, 2) if values else None,
                }
                for kind, values in latencies.items()
            },
        }
        report["turns_per_second"] = round(report["write"]["per_second"] * args.batch, 1)
    finally:
        for process in (server, helper):
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
    return report


if __name__ == "__main__":
    sys.exit(main())
