"""Talk to ``convmem serve`` over HTTP with httpx: write turns, wait, search, delete.

    convmem serve --port 8077 --no-auth &          # or with a key: convmem keys create --tenant acme
    python examples/http_client.py http://127.0.0.1:8077 [API_KEY]

Without a key the server must run with --no-auth (loopback only).
"""

from __future__ import annotations

import sys
import time

import httpx

TURNS = [
    {"turn_id": 18, "role": "user", "text": "我护照是 2025-02-18 过期。",
     "timestamp": "2026-02-02T10:15:30+08:00"},
    {"turn_id": 19, "role": "assistant", "text": "了解，您的护照将于2025年2月18日过期。",
     "timestamp": "2026-02-02T10:15:32+08:00"},
]  # fmt: skip


def wait_indexed(client: httpx.Client, conversation_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/v1/conversations/{conversation_id}/status").raise_for_status()
        if status.json().get("backlog", 0) == 0:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{conversation_id} was not indexed within {timeout:g}s")


def run(base_url: str, key: str | None = None) -> list[dict[str, object]]:
    """Write two turns, search them, delete one; returns the hits before the delete."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        written = client.post("/v1/conversations/conv_http/turns", json={"turns": TURNS})
        print("write:", written.status_code, written.json())
        written.raise_for_status()
        wait_indexed(client, "conv_http")
        found = client.post("/v1/search", json={"query_text": "护照哪天到期", "top_k": 3})
        hits: list[dict[str, object]] = found.raise_for_status().json()["hits"]
        for hit in hits:
            print(f"hit: score={hit['score']:.3f} {hit['text']!r}")
        deleted = client.post(
            "/v1/delete", json={"conversation_id": "conv_http", "turn_range": [18, 19]}
        )
        print("delete:", deleted.raise_for_status().json())
        return hits


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python examples/http_client.py BASE_URL [API_KEY]")
    run(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
