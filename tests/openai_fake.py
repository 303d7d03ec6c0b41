"""A small OpenAI-compatible server on loopback for tests: it answers chat completions from
a script of real-world reply shapes and embeddings with deterministic hashing vectors."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from convmem import HashingEmbedder


@dataclass
class Script:
    """Replies in order: each is ``(status, content)``; the last one repeats."""

    replies: list[tuple[int, str]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    refuse_response_format: bool = False
    #: answer every request as FastAPI does a body it refuses: 422, each error echoing the
    #: input it refused (pydantic's ``input``)
    refuse_with_echo: bool = False
    embedder: HashingEmbedder = field(default_factory=lambda: HashingEmbedder(32))


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            if script.refuse_with_echo:
                echoed = body.get("input") or body.get("messages")
                detail = [
                    {
                        "type": "string_too_long",
                        "loc": ["body", "input"],
                        "msg": "String should have at most 8 characters",
                        "input": echoed,
                    }
                ]
                self._send(422, {"detail": detail})
            elif self.path.endswith("/embeddings"):
                vectors = script.embedder.embed(list(body["input"]))
                data = [
                    {"index": i, "embedding": [float(x) for x in row]}
                    for i, row in enumerate(vectors)
                ]
                self._send(200, {"data": data, "model": body["model"]})
            elif script.refuse_response_format and "response_format" in body:
                self._send(400, {"error": {"message": "response_format is not supported"}})
            else:
                index = min(len(script.requests) - 1, len(script.replies) - 1)
                status, content = script.replies[index] if script.replies else (200, "{}")
                if status != 200:
                    self._send(status, {"error": {"message": f"status {status}"}})
                else:
                    self._send(
                        200, {"choices": [{"message": {"role": "assistant", "content": content}}]}
                    )

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def openai_server(script: Script) -> Iterator[str]:
    """Serve ``script`` on a free loopback port; yields the base URL (``.../v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
