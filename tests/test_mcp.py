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
from mcp.server.mcpserver.exceptions import ToolError

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
        typed = await session.call_tool("recall", {"query": "车位", "top_k": "abc"})
        seen["typed"] = (typed.is_error, typed.content[0].text)
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
    is_error, message = seen["typed"]
    assert is_error and "InvalidInputError (field top_k): top_k: " in message
    is_error, message = seen["whole"]
    assert is_error and "all=true" in message  # a whole conversation needs an explicit all


def test_recall_is_brief_unless_asked_for_full_detail(tmp_path: Path) -> None:
    """A hit's search bookkeeping (feature scores, turn lists, flags) is some 60 % of it and
    lands in the agent's context on every recall; brief keeps what an agent acts on."""
    from convmem import HashingEmbedder, Memory
    from convmem.mcp import build_server

    with Memory.open(tmp_path / "m.db", embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["我的车停在地下二层B区17号车位。", "好的，记下了。"]))
        memory.flush()
        server = build_server(memory)

        def recall(**args: Any) -> Any:
            return asyncio.run(server.call_tool("recall", {"query": "车位", **args}))

        brief = _payload(recall())["hits"]
        full = _payload(recall(detail="full"))["hits"]
        assert [hit["chunk_id"] for hit in brief] == [hit["chunk_id"] for hit in full]
        assert brief[0]["text"] == full[0]["text"] and brief[0]["context"] == full[0]["context"]
        assert set(brief[0]["metadata"]) <= {
            "conversation_id",
            "turn_range",
            "timestamp_range",
            "participants",
            "category",
            "sub_query",
        }
        assert brief[0]["metadata"]["turn_range"] == full[0]["metadata"]["turn_range"]
        assert "evidence" in full[0]["metadata"] and "evidence" not in brief[0]["metadata"]
        assert len(json.dumps(brief)) < 0.6 * len(json.dumps(full))
        hinted = _payload(recall(hints={"strategies": ["deep_search"]}))["hits"]
        assert hinted and "evidence" not in hinted[0]["metadata"]
        with pytest.raises(ToolError, match="field detail"):  # in process, an error raises
            recall(detail="everything")


def test_argument_type_errors_read_like_the_tools_own_errors(tmp_path: Path) -> None:
    """The SDK's own argument check once answered with pydantic's multi-line text and a
    URL; docs/mcp.md promises ``InvalidInputError (field top_k): ...``."""
    from convmem import HashingEmbedder, Memory
    from convmem.mcp import build_server

    with Memory.open(tmp_path / "m.db", embedder=HashingEmbedder(), workers=0) as memory:
        server = build_server(memory)
        for name, arguments, field in (
            ("recall", {"query": "车位", "top_k": "abc"}, "top_k"),
            ("remember", {"conversation_id": "c", "turns": "hello"}, "turns"),
            ("recall", {}, "query"),
        ):
            with pytest.raises(ToolError) as caught:
                asyncio.run(server.call_tool(name, arguments))
            message = str(caught.value)
            assert f"InvalidInputError (field {field}): {field}: " in message, message
            assert "\n" not in message and "pydantic.dev" not in message
        assert memory.stats()["turns"] == 0
