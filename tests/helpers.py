"""Shared helpers for the test suite."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from convmem import EmbedderError, HashingEmbedder, Memory
from convmem.embed.base import Vectors
from convmem.store.records import matrix_bytes, matrix_rows

BASE_TIME = datetime(2026, 2, 2, 10, 0, tzinfo=UTC)


def rendered_chunks(chats: Sequence[Sequence[tuple[str, str]]]) -> list[tuple[str, list[Any]]]:
    """Each chat of ``(role, text)`` turns rendered as one chunk by the default policy:
    ``(text, turn_offsets)``, as the worker embeds it."""
    from convmem.ingest import ChunkingPolicy, ChunkTurn, plan_chunks, render_chunk

    policy = ChunkingPolicy()
    out = []
    for chat in chats:
        turns = [
            ChunkTurn(seq, role, text, BASE_TIME + timedelta(minutes=seq))
            for seq, (role, text) in enumerate(chat)
        ]
        (plan,) = plan_chunks(turns, [], policy)
        record = render_chunk("c", plan, policy)
        out.append((record.text, list(record.metadata.turn_offsets)))
    return out


def make_turns(
    texts: list[str], *, start: int = 0, roles: list[str] | None = None
) -> list[dict[str, Any]]:
    """Turns alternating user/assistant (or the given roles), a minute apart."""
    out = []
    for offset, text in enumerate(texts):
        seq = start + offset
        role = roles[offset] if roles else ("user" if seq % 2 == 0 else "assistant")
        out.append(
            {
                "turn_id": seq,
                "role": role,
                "text": text,
                "timestamp": (BASE_TIME + timedelta(minutes=seq)).isoformat(),
            }
        )
    return out


def chat_of(
    memory: Memory, facts: Sequence[str], noise: str, *, count: int = 8, user_only: bool = False
) -> dict[str, str]:
    """A conversation "c" of ``facts`` then ``count`` noise lines (``noise`` formatted with
    n), indexed; its scope filter. ``user_only``: every turn the user's."""
    texts = [*facts, *(noise.format(n=n) for n in range(count))]
    roles = ["user"] * len(texts) if user_only else None
    memory.add_turns("c", make_turns(texts, roles=roles))
    memory.flush()
    return {"conversation_id": "c"}


def live_chunks(
    memory: Memory, conversation_id: str | None = None
) -> dict[str, tuple[str, tuple[int, int]]]:
    """chunk_id -> (text, turn_range) for every live chunk, read straight from the store file."""
    conn = memory.store._db()
    sql = "SELECT chunk_id, text, start_seq, end_seq FROM chunks WHERE deleted=0 AND tenant=?"
    params: list[Any] = [memory.tenant]
    if conversation_id is not None:
        sql += " AND conversation_id=?"
        params.append(conversation_id)
    return {row[0]: (row[1], (row[2], row[3])) for row in conn.execute(sql, params)}


class OutageEmbedder:
    """A real hashing embedder behind a switch that makes it fail, like a model server going down."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.down = False
        self.failures = 0

    @property
    def model_id(self) -> str:
        return "outage-test-64"

    @property
    def dimension(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.down:
            self.failures += 1
            raise EmbedderError("model server unavailable")
        return self.inner.embed(texts)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def served(*options: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A real ``convmem serve`` subprocess on a free loopback port; yields its base URL."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    port = free_port()
    command = [sys.executable, "-m", "convmem", "serve", "--port", str(port), *options]
    environment = {**os.environ, **(env or {})}
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=environment) as server:
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "convmem serve did not answer /healthz"
                try:
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def strip_clause_vectors(memory: Memory) -> None:
    """Keep one stored turn vector per line in every chunk of an embedded store, as a store
    indexed before clause vectors has (the worker stores the line rows first)."""
    dimension = memory.embedding.dimension
    with memory.store._write() as conn:
        rows = conn.execute("SELECT rowid, turn_vectors, metadata FROM chunks").fetchall()
        for rowid, blob, metadata in rows:
            if blob is not None:
                lines = len(json.loads(metadata)["turn_seqs"])
                rows = matrix_rows(bytes(blob), dimension)[:lines]
                conn.execute(
                    "UPDATE chunks SET turn_vectors=? WHERE rowid=?", (matrix_bytes(rows), rowid)
                )


def spy(monkeypatch: Any, module: Any, name: str) -> list[str]:
    """Replace ``module.name`` (a one-argument text function) by one that records each text
    it is given and then calls the real one; returns the record."""
    seen: list[str] = []
    real = getattr(module, name)

    def recorded(text: str) -> Any:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(module, name, recorded)
    return seen


class LiveServer:
    """uvicorn serving an app on 127.0.0.1 in a thread."""

    def __init__(self, app: Any) -> None:
        import threading
        import time

        import uvicorn

        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
