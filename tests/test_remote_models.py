"""A hosted embedding model by spec, the same everywhere: library, serve and worker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from convmem import EmbedderError, Memory
from convmem.embed import resolve_embedder
from convmem.remote import Retry, post_json
from helpers import make_turns, served
from openai_fake import Script, openai_server


def test_openai_specs_resolve_with_url_dimensions_and_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script()
    monkeypatch.setenv("CONVMEM_EMBEDDER_KEY", "sk-env")
    with openai_server(script) as url:
        embedder = resolve_embedder(f"openai:text-embedding-3-small?base_url={url}&dimensions=32")
        assert embedder.model_id == "openai:text-embedding-3-small"
        assert embedder.embed(["护照"]).shape == (1, 32)
    assert script.requests[-1]["dimensions"] == 32
    for bad in (
        "openai:",
        "openai:m?temperature=1",
        "openai:m?base_url=ftp://x",
        "openai:m?dimensions=a",
    ):
        with pytest.raises(EmbedderError, match="openai:"):
            resolve_embedder(bad)


@pytest.mark.slow
def test_serve_and_worker_index_through_a_hosted_embedding_model(tmp_path: Path) -> None:
    with openai_server(Script()) as url:
        spec = f"openai:remote-embed?base_url={url}"
        options = ("--no-auth", "--store", str(tmp_path / "s.db"), "--embedder", spec)
        with served(*options) as base:
            turns = make_turns(["我护照是2025年2月18日过期的。", "好的。"])
            assert (
                httpx.post(f"{base}/v1/conversations/c/turns", json={"turns": turns}).status_code
                == 202
            )
            deadline = time.monotonic() + 60
            while httpx.get(f"{base}/v1/conversations/c/status").json()["backlog"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            hits = httpx.post(f"{base}/v1/search", json={"query_text": "护照"}).json()["hits"]
            assert hits and "2025年2月18日" in hits[0]["text"]
        # a separate worker process indexes another store's backlog with the same spec
        store = str(tmp_path / "w.db")
        with Memory.open(store, embedder=resolve_embedder(spec), workers=0) as memory:
            memory.add_turns("c", make_turns(["我的车停在B区17号。", "记下了。"]))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "convmem",
                "worker",
                "--once",
                "--store",
                store,
                "--embedder",
                spec,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with Memory.open(store, embedder=resolve_embedder(spec), workers=0) as memory:
            stats = memory.stats()
            assert stats["backlog"] == 0 and stats["chunks"] >= 1
            assert stats["embedding_model"] == "openai:remote-embed"


@pytest.mark.parametrize(
    ("after", "honoured"),
    [
        ("²", False),  # str.isdigit() takes it, float() does not: a ValueError escaped
        ("1٣", False),
        ("soon", False),
        ("Wed, 21 Oct 2015 07:28:00 GMT", False),
        ("3", True),
        (" 2.5", True),
    ],
)
def test_a_retry_after_header_is_ascii_seconds_or_the_backoff_is_kept(
    after: str, honoured: bool
) -> None:
    header = [(b"Retry-After", after.encode("utf-8"))]  # as a server sends it: bytes
    answers = iter([httpx.Response(429, headers=header), httpx.Response(200)])
    transport = httpx.MockTransport(lambda request: next(answers))
    slept: list[float] = []
    with httpx.Client(transport=transport, base_url="http://model.test") as client:
        response = post_json(
            client,
            "/v1/embeddings",
            {"input": ["护照"]},
            retry=Retry(attempts=2, base_seconds=0.01, max_seconds=8.0),
            sleep=slept.append,
        )
    assert response.status_code == 200
    assert slept == [float(after)] if honoured else 0.005 <= slept[0] <= 0.01


def test_an_endpoint_whose_batches_disagree_on_the_dimension_is_an_embedder_error() -> None:
    from convmem.embed.hashing import HashingEmbedder
    from convmem.embed.openai import OpenAIEmbedder

    script = Script(embedder=HashingEmbedder(16))
    with openai_server(script) as url:
        embedder = OpenAIEmbedder(url, "m", batch_size=1, retry=Retry(attempts=1))
        assert embedder.embed(["甲"]).shape == (1, 16)
        script.embedder = HashingEmbedder(8)  # the model behind the endpoint changed
        with pytest.raises(EmbedderError, match="8-d vectors; this embedder is 16-d"):
            embedder.embed(["乙", "丙"])


def test_an_endpoint_error_that_echoes_the_request_never_shows_its_text() -> None:
    """FastAPI answers a refused body with 422 and pydantic's ``input``: the text sent. The
    error message goes to logs and to a job's error_message, which hold no memory text."""
    from convmem.chat import ChatClient, ChatError
    from convmem.embed.openai import OpenAIEmbedder

    secret = "我对青霉素过敏，电话13912345678"
    script = Script(refuse_with_echo=True)
    with openai_server(script) as url:
        embedder = OpenAIEmbedder(url, "m", dimension=16, retry=Retry(attempts=1))
        with pytest.raises(EmbedderError) as embed_error:
            embedder.embed([secret, "hello there, this is a second line"])
        chat = ChatClient(url, "m", retry=Retry(attempts=1))
        with pytest.raises(ChatError) as chat_error:
            chat.json("mark these turns", secret)
    for error in (embed_error.value, chat_error.value):
        message = str(error)
        assert "422" in message
        assert "青霉素" not in message and "1391234" not in message
        assert "body.input: String should have at most 8 characters" in message
