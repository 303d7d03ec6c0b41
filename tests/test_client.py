"""The typed HTTP client against a real ``convmem serve`` on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from convmem import InvalidInputError, NotFoundError, TurnConflictError
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
