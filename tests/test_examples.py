"""The scripts in examples/ run as documented and do what they say."""

from __future__ import annotations

import runpy
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def _load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLES / name), run_name=f"example_{name}")


def test_agent_chat_recalls_what_the_user_said_earlier(tmp_path: Path) -> None:
    example = _load("agent_chat.py")
    from convmem import HashingEmbedder, Memory

    with Memory.open(str(tmp_path / "a.db"), embedder=HashingEmbedder(), workers=0) as memory:
        replies = example["chat"](memory, "c", example["SCRIPT"])
        assert "2025-02-18" in replies[-1], replies[-1]
        assert memory.stats()["turns"] == 2 * len(example["SCRIPT"])


def test_agent_chat_runs_as_a_script() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_chat.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "8 turns remembered" in result.stdout


def test_story_scene_uses_only_what_came_before(tmp_path: Path) -> None:
    example = _load("story_scene.py")
    output = tmp_path / "scene.json"
    context = example["build"](str(tmp_path / "s.db"), str(output))
    assert output.is_file() and context.entity_states
    assert all((state.chapter_index, state.scene_index) < (3, 1) for state in context.entity_states)
    assert all((hit.chapter_index, hit.scene_index) < (3, 1) for hit in context.relevant_memories)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_http_client_writes_searches_and_deletes(tmp_path: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "convmem", "serve", "--no-auth", "--port", str(port)]
    command += ["--store", str(tmp_path / "h.db"), "--embedder", "hashing"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            example = _load("http_client.py")
            hits = example["run"](f"http://127.0.0.1:{port}")
            assert hits and "2025-02-18" in str(hits[0]["text"])
        finally:
            server.terminate()
            server.wait(timeout=30)
