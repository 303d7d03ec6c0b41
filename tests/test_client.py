"""The typed HTTP client against a real ``convmem serve`` on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from convmem import (
    FilterError,
    HashingEmbedder,
    InvalidInputError,
    Memory,
    NotFoundError,
    TurnConflictError,
)
from convmem.client import AsyncClient, AuthenticationError, Client
from convmem.models import Hit
from helpers import make_turns, served

FACTS = ["我护照是2025年2月18日过期的。", "了解，我记下了。"]


@pytest.mark.slow
def test_the_client_mirrors_memory_over_http(tmp_path: Path) -> None:
    options = ("--no-auth", "--store", str(tmp_path / "c.db"), "--embedder", "hashing")
    with served(*options) as base_url, Client(base_url) as memory:
        receipt = memory.add_turns("trip", make_turns(FACTS))
        assert receipt.accepted_turn_ids == [0, 1]
        memory.flush("trip")
        hits = memory.search("护照哪天过期", top_k=3)
        assert hits and isinstance(hits[0], Hit) and "2025年2月18日" in hits[0].text
        # the library's own exceptions, from the one error body
        with pytest.raises(InvalidInputError) as caught:
            memory.search("护照", top_k=0)
        assert caught.value.field == "top_k"
        with pytest.raises(TurnConflictError):
            memory.add_turns("trip", make_turns(["换了别的话"]))
        with pytest.raises(NotFoundError):
            memory.update_note("note_missing", True)
        assert memory.delete("trip", turn_range=[0, 1])["turns_deleted"] == 2
        memory.flush("trip")
        assert memory.search("护照", top_k=3) == []


@pytest.mark.slow
def test_the_client_refuses_what_the_library_refuses_with_the_same_error(tmp_path: Path) -> None:
    """Found by running the client and the library side by side on random calls: a NaN
    (or infinity) failed inside the JSON encoder with a bare ValueError, and a bad filter
    came back as InvalidInputError where the library raises FilterError."""
    turn = make_turns(["你好"])[0]
    calls = [
        lambda m: m.search("护照", min_score=float("nan")),
        lambda m: m.search("护照", min_score=float("inf")),
        lambda m: m.search("护照", filters={"bogus": 1}),
        lambda m: m.search("护照", filters={"importance": {"$gte": "high"}}),
        lambda m: m.search("护照", filters=["conversation_id"]),
        lambda m: m.add_turns("c", [{**turn, "meta": {"x": float("nan")}}]),
    ]
    options = ("--no-auth", "--store", str(tmp_path / "c.db"), "--embedder", "hashing")
    with (
        served(*options) as base_url,
        Client(base_url) as remote,
        Memory.open(str(tmp_path / "l.db"), embedder=HashingEmbedder(), workers=0) as local,
    ):
        for call in calls:
            raised = []
            for memory in (local, remote):
                with pytest.raises(InvalidInputError) as caught:
                    call(memory)
                raised.append((type(caught.value), caught.value.field))
            (lib_class, lib_field), (http_class, http_field) = raised
            assert http_class is lib_class, raised
            assert http_field and lib_field and http_field.startswith(lib_field), raised
        # nothing was accepted on either side
        assert remote.notes("c") == [] and local.recent_turns("c") == []
        assert raised[0][0] is InvalidInputError
        with pytest.raises(FilterError):
            remote.search("护照", filters={"bogus": 1})


@pytest.mark.slow
def test_the_async_client_sends_its_key_and_maps_refusals(tmp_path: Path) -> None:
    store = str(tmp_path / "k.db")
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "convmem",
            "--store",
            store,
            "--embedder",
            "hashing",
            "keys",
            "create",
            "--tenant",
            "t1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    key = json.loads(created.stdout)["key"]

    async def run(base_url: str) -> list[Hit]:
        async with AsyncClient(base_url, api_key="cm_wrong") as stranger:
            with pytest.raises(AuthenticationError):
                await stranger.search("护照")
        async with AsyncClient(base_url, api_key=key) as memory:
            await memory.add_turns("trip", make_turns(FACTS))
            await memory.flush("trip")
            hits: list[Hit] = await memory.search("护照", top_k=2)
            return hits

    with served("--store", store, "--embedder", "hashing") as base_url:
        hits = asyncio.run(run(base_url))
    assert hits and hits[0].metadata["tenant"] == "t1"


@pytest.mark.slow
def test_conversation_ids_reach_the_service_exactly_as_given(tmp_path: Path) -> None:
    """The ids went into the URL unencoded: "order%41" landed in conversation "orderA",
    and "/", "?", "#", "." and ".." sent the request to another URL."""
    ids = ["order%41", "a/b?c#d", ".", "..", "x/turns", "é 中"]
    options = ("--no-auth", "--store", str(tmp_path / "c.db"), "--embedder", "hashing")
    with served(*options) as base_url, Client(base_url) as memory:
        for index, conversation_id in enumerate(ids):
            turns = make_turns([f"第{index}段对话"])
            receipt = memory.add_turns(conversation_id, turns)
            assert receipt.conversation_id == conversation_id
            assert memory.status(conversation_id)["last_turn"] == 0
        assert memory.status("orderA")["last_turn"] is None
        with httpx.Client(base_url=base_url) as raw:

            def texts(conversation_id: str) -> list[str]:
                segment = quote(conversation_id, safe="").replace(".", "%2E")
                response = raw.get(f"/v1/conversations/{segment}/turns")
                assert response.status_code == 200, response.text
                return [turn["text"] for turn in response.json()]

            for index, conversation_id in enumerate(ids):
                assert texts(conversation_id) == [f"第{index}段对话"]
            assert memory.delete("a/b?c#d", turn_range=[0, 10])["turns_deleted"] == 1
            assert texts("a/b?c#d") == [] and texts("x/turns") == ["第4段对话"]
        with pytest.raises(InvalidInputError) as caught:
            memory.status(7)
        assert caught.value.field == "conversation_id"
