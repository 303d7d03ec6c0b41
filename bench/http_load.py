"""Load test of the HTTP service on loopback: many concurrent clients writing and searching.

Starts `convmem serve` as its own process (API keys on, a worker thread inside), then runs
`--clients` client threads for `--seconds`: each writes turns to its own conversation in
batches and searches its tenant, in the ratio `--search-share`. Reports throughput,
p50/p99 per operation and errors. Bounded in count and time.

    python bench/http_load.py --clients 16 --seconds 30 --out bench/results/http-load.json

`--soak` holds the data set still so that memory can be judged: a warm-up writes
`--warmup-turns` turns to each client's conversation and waits for the index, then for
`--seconds` each client searches or replaces (writes a batch and deletes its oldest live
batch, so the live turns stay constant). The report gives server RSS at 1, 2, 5 and 10
minutes. `--server-env NAME=VALUE` runs a variant of the server side by side (e.g.
`MALLOC_ARENA_MAX=2`); every variant runs at the same time, under the same load.

    python bench/http_load.py --soak --clients 8 --seconds 600 --workers thread \
        --server-env "" MALLOC_ARENA_MAX=2 --out bench/results/http-soak.json
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

from reports import save

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
    parser.add_argument("--soak", action="store_true", help="constant data set, RSS over time")
    parser.add_argument("--warmup-turns", type=int, default=200, help="per client, with --soak")
    parser.add_argument(
        "--idle-seconds", type=float, default=45, help="with --soak: RSS this long after the load"
    )
    parser.add_argument(
        "--server-env",
        nargs="+",
        default=[""],
        help="with --soak: server variants run side by side, each NAME=VALUE[,NAME=VALUE] "
        "('' is the plain server)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.soak:
        reports: dict[str, Any] = {}

        def variant(worker: str, spec: str) -> None:
            extra = dict(item.split("=", 1) for item in spec.split(",") if item)
            reports[f"{worker} {spec or 'default'}"] = soak(args, worker, extra)

        runs = [
            threading.Thread(target=variant, args=(worker, spec))
            for worker in args.workers
            for spec in args.server_env
        ]
        for thread in runs:
            thread.start()
        for thread in runs:
            thread.join()
    else:
        reports = {worker: run(args, worker) for worker in args.workers}
    print(json.dumps(reports, indent=2))
    save(reports, args.out, ascii_only=True)
    return 0


class Service:
    """`convmem serve` (and `convmem worker` for the process variant) on a fresh store."""

    def __init__(self, args: argparse.Namespace, worker: str, extra_env: dict[str, str]) -> None:
        folder = tempfile.mkdtemp(prefix="convmem-load-")
        store = str(Path(folder) / "load.db")
        self.admin = "load-admin-" + os.urandom(8).hex()
        port = _free_port()
        env = dict(os.environ, CONVMEM_ADMIN_KEY=self.admin, **extra_env)
        command = [sys.executable, "-m", "convmem.cli.main", "--store", store]
        command += ["--embedder", "hashing"]
        threads = "1" if worker == "thread" else "0"
        self.server = subprocess.Popen(
            [*command, "serve", "--port", str(port), "--threads", threads],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.helper = None
        if worker == "process":
            self.helper = subprocess.Popen(
                [*command, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        self.base = f"http://127.0.0.1:{port}"
        self.keys: list[str] = []
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit("server did not start")
            time.sleep(0.1)
        for index in range(args.tenants):
            response = httpx.post(
                f"{self.base}/v1/admin/keys",
                json={"tenant": f"tenant-{index}"},
                headers={"Authorization": f"Bearer {self.admin}"},
            )
            self.keys.append(response.json()["key"])

    def rss_mb(self) -> float:
        import psutil

        return float(psutil.Process(self.server.pid).memory_info().rss / 2**20)

    def threads(self) -> int:
        """The server's threads (each that touched the store holds a SQLite connection)."""
        import psutil

        return int(psutil.Process(self.server.pid).num_threads())

    def drain(self) -> float:
        """Wait until the index backlog is empty; the seconds it took."""
        began = time.perf_counter()
        # /healthz shows no counts; the backlog across tenants is the admin's status route
        url, headers = f"{self.base}/v1/admin/status", {"Authorization": f"Bearer {self.admin}"}
        while httpx.get(url, headers=headers, timeout=30).json()["backlog"]:
            time.sleep(0.1)
        return time.perf_counter() - began

    def stop(self) -> None:
        for process in (self.server, self.helper):
            if process is not None:
                process.terminate()
                process.wait(timeout=60)


def _turns(first: int, count: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "turn_id": seq,
            "role": "user" if seq % 2 == 0 else "assistant",
            "text": rng.choice(TEXTS),
            "timestamp": "2026-03-01T10:00:00+08:00",
        }
        for seq in range(first, first + count)
    ]


def _summary(latencies: dict[str, list[float]], wall: float) -> dict[str, Any]:
    return {
        kind: {
            "requests": len(values),
            "per_second": round(len(values) / wall, 1),
            "p50_ms": _quantile(values, 0.5),
            "p99_ms": _quantile(values, 0.99),
            "mean_ms": round(statistics.fmean(values) * 1000, 2) if values else None,
        }
        for kind, values in latencies.items()
    }


def run(args: argparse.Namespace, worker: str) -> dict[str, Any]:
    service = Service(args, worker, {})
    base, keys = service.base, service.keys
    try:
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
                        body = {"turns": _turns(next_turn, args.batch, rng)}
                        next_turn += args.batch
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
            while time.monotonic() < stop_at:
                rss.append((time.monotonic() - (stop_at - args.seconds), service.rss_mb()))
                time.sleep(min(10.0, args.seconds / 20))

        began = time.perf_counter()
        clients = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        clients.append(threading.Thread(target=sample_rss))
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        wall = time.perf_counter() - began
        drain = service.drain()
        report = {
            "clients": args.clients,
            "seconds": round(wall, 1),
            "turns_per_write": args.batch,
            "backlog_drain_seconds": round(drain, 1),
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
            **_summary(latencies, wall),
        }
        report["turns_per_second"] = round(report["write"]["per_second"] * args.batch, 1)
    finally:
        service.stop()
    return report


def _warm_up(args: argparse.Namespace, service: Service) -> float:
    """Write ``--warmup-turns`` to each client's conversation and wait for the index."""
    began = time.perf_counter()
    for number in range(args.clients):
        headers = {"Authorization": f"Bearer {service.keys[number % len(service.keys)]}"}
        rng = random.Random(number)
        with httpx.Client(base_url=service.base, headers=headers, timeout=60) as http:
            for first in range(0, args.warmup_turns, 50):
                count = min(50, args.warmup_turns - first)
                body = {"turns": _turns(first, count, rng)}
                http.post(f"/v1/conversations/load-{number}/turns", json=body)
    service.drain()
    return time.perf_counter() - began


def soak(args: argparse.Namespace, worker: str, extra_env: dict[str, str]) -> dict[str, Any]:
    """Warm up to a fixed data set, then load that keeps it fixed; RSS over time."""
    service = Service(args, worker, extra_env)
    try:
        warmup = _warm_up(args, service)
        latencies: dict[str, list[float]] = {"replace": [], "search": []}
        errors: dict[str, int] = {}
        lock = threading.Lock()
        began = time.monotonic()
        stop_at = began + args.seconds

        def client(number: int) -> None:
            rng = random.Random(1000 + number)
            headers = {"Authorization": f"Bearer {service.keys[number % len(service.keys)]}"}
            oldest, next_turn = 0, args.warmup_turns
            conversation = f"load-{number}"
            with httpx.Client(base_url=service.base, headers=headers, timeout=60) as http:
                while time.monotonic() < stop_at:
                    started = time.perf_counter()
                    try:
                        if rng.random() < args.search_share:
                            kind = "search"
                            query = {"query_text": rng.choice(QUERIES), "top_k": 5}
                            if rng.random() < 0.5:
                                query["filters"] = {"conversation_id": conversation}
                            status = http.post("/v1/search", json=query).status_code
                        else:
                            kind = "replace"
                            body = {"turns": _turns(next_turn, args.batch, rng)}
                            path = f"/v1/conversations/{conversation}/turns"
                            status = http.post(path, json=body).status_code
                            if status in (200, 202):
                                delete = {
                                    "conversation_id": conversation,
                                    "turn_range": [oldest, oldest + args.batch - 1],
                                }
                                status = http.post("/v1/delete", json=delete).status_code
                                next_turn += args.batch
                                oldest += args.batch
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                    elapsed = time.perf_counter() - started
                    with lock:
                        if status in (200, 202):
                            latencies[kind].append(elapsed)
                        else:
                            errors[f"{kind}:{status}"] = errors.get(f"{kind}:{status}", 0) + 1

        rss: list[tuple[float, float]] = [(0.0, service.rss_mb())]

        def sample_rss() -> None:
            while time.monotonic() < stop_at:
                time.sleep(min(10.0, args.seconds / 60))
                rss.append((time.monotonic() - began, service.rss_mb()))

        clients = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        clients.append(threading.Thread(target=sample_rss))
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        wall = time.monotonic() - began
        loaded = service.rss_mb()
        time.sleep(args.idle_seconds)  # is memory given back once the load stops?
        idle = service.rss_mb()

        memory = _rss_report(rss, wall)
        memory |= {"threads_at_end": service.threads(), "at_end_of_load": round(loaded, 1)}
        memory[f"after_{args.idle_seconds:g}_s_idle"] = round(idle, 1)
        return {
            "clients": args.clients,
            "warmup_turns": args.warmup_turns * args.clients,
            "warmup_seconds": round(warmup, 1),
            "seconds": round(wall, 1),
            "server_env": extra_env,
            "errors": errors,
            "server_rss_mb": memory,
            **_summary(latencies, wall),
        }
    finally:
        service.stop()


def _rss_report(rss: list[tuple[float, float]], wall: float) -> dict[str, Any]:
    """RSS after the warm-up, at 1, 2, 5 and 10 minutes (None past the run), the max."""

    def at(seconds: float) -> float | None:
        before = [value for t, value in rss if t <= seconds + 5]
        return round(before[-1], 1) if before and seconds <= wall + 5 else None

    return {
        "after_warmup": round(rss[0][1], 1),
        **{f"at_{m}_min": at(60 * m) for m in (1, 2, 5, 10)},
        "max": round(max(value for _, value in rss), 1),
        "samples": [[round(t), round(value, 1)] for t, value in rss],
    }


if __name__ == "__main__":
    sys.exit(main())
