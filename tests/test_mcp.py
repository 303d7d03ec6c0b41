"""The MCP server end to end: the SDK's own client talks to ``convmem mcp`` over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from convmem.mcp import TOOLS
from helpers import make_turns


def _payload(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def _session_run(store: Path) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "convmem", "mcp", "--store", str(store), "--embedder", "hashing"],
    )
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        seen["tools"] = {tool.name for tool in (await session.list_tools()).tools}
        turns = make_turns(["我的车停在地下二层B区17号车位。", "好的，记下了。"])
        receipt = _payload(
            await session.call_tool("remember", {"conversation_id": "c", "turns": turns})
        )
        seen["accepted"] = receipt["accepted_turn_ids"]
        for _ in range(100):  # the server's worker thread indexes in the background
            hits = _payload(await session.call_tool("recall", {"query": "车位", "top_k": 3}))[
                "hits"
            ]
            if hits:
                break
            await asyncio.sleep(0.1)
        seen["found"] = any("B区17号" in hit["text"] for hit in hits)
        forgot = _payload(
            await session.call_tool("forget", {"conversation_id": "c", "turn_range": [0, 1]})
        )
        seen["turns_deleted"] = forgot["turns_deleted"]
        after = _payload(await session.call_tool("recall", {"query": "车位", "top_k": 3}))["hits"]
        seen["after"] = [hit["text"] for hit in after]
        bad = await session.call_tool("recall", {"query": "车位", "top_k": 0})
        seen["bad"] = (bad.is_error, bad.content[0].text)
        whole = await session.call_tool("forget", {"conversation_id": "c"})
        seen["whole"] = (whole.is_error, whole.content[0].text)
    return seen


@pytest.mark.slow
def test_an_mcp_client_remembers_recalls_and_forgets_over_stdio(tmp_path: Path) -> None:
    seen = asyncio.run(_session_run(tmp_path / "mcp.db"))
    assert seen["tools"] >= set(TOOLS)
    assert seen["accepted"] == [0, 1] and seen["found"]
    assert seen["turns_deleted"] == 2 and seen["after"] == []
    is_error, message = seen["bad"]
    assert is_error and "top_k" in message  # the HTTP API's validation, field named
    is_error, message = seen["whole"]
    assert is_error and "all=true" in message  # a whole conversation needs an explicit all
