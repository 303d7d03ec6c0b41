"""/metrics counts the index work of a separate ``convmem worker`` process (issue 18)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient

from convmem import HashingEmbedder
from convmem.governance import KeepAllMarker
from convmem.server import ServerSettings, create_app
from helpers import make_turns


def _value(metrics: str, name: str) -> float:
    (value,) = [float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name)]
    return value


def test_metrics_count_jobs_done_by_a_worker_process(tmp_path: Path) -> None:
    store = str(tmp_path / "m.db")
    settings = ServerSettings(
        store=store,
        auth=False,
        workers=0,  # this process indexes nothing: the worker process below does
        embedder_instance=HashingEmbedder(),
        marker_instance=KeepAllMarker(),
    )
    command = [sys.executable, "-m", "convmem.cli.main", "--store", store]
    command += ["--embedder", "hashing", "--marker", "keep-all", "worker"]
    with TestClient(create_app(settings)) as client:
        for name in ("a", "b", "c"):
            response = client.post(
                f"/v1/conversations/{name}/turns",
                json={"turns": make_turns(["我下个月去东京。"] * 4)},
            )
            assert response.status_code == 202
        metrics = client.get("/metrics").text
        assert _value(metrics, 'convmem_index_jobs{status="pending"}') == 3
        assert _value(metrics, "convmem_index_jobs_completed_total") == 0
        worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while _value(client.get("/metrics").text, "convmem_index_jobs_completed_total") < 3:
                assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
                assert time.monotonic() < deadline, "the worker process indexed nothing"
                time.sleep(0.1)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            if worker.stderr:
                worker.stderr.close()
        metrics = client.get("/metrics").text
        assert _value(metrics, "convmem_backlog_jobs") == 0
        assert _value(metrics, 'convmem_index_jobs{status="done"}') == 3
        # the in-process counter is this process's own work, which was none
        assert _value(metrics, "convmem_chunks_ingested_total") == 0
        assert client.post("/v1/search", json={"query_text": "东京"}).json()["hits"]
