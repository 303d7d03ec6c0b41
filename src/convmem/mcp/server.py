"""The MCP tools over one :class:`~convmem.Memory`: remember, recall, forget, list_notes,
confirm_note, scene_context.

Every tool validates its input with the HTTP service's request models, so a bad value is
refused with the same message and field as ``/v1`` would give, as a tool error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import BaseModel, ValidationError

from convmem.errors import ConvmemError, InvalidInputError
from convmem.memory import Memory
from convmem.retrieve import DEFAULT_MIN_SCORE
from convmem.server.schemas import DeleteIn, SceneIn, SearchIn, TurnsIn
from convmem.story import build_scene_memory_context

__all__ = ["TOOLS", "build_server"]

TOOLS = ("remember", "recall", "forget", "list_notes", "confirm_note", "scene_context")
_Model = TypeVar("_Model", bound=BaseModel)
_Tool = TypeVar("_Tool", bound=Callable[..., Any])


def _parse(model: type[_Model], data: dict[str, Any]) -> _Model:
    """The request model for a tool's arguments, or InvalidInputError naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InvalidInputError(f"{field}: {error['msg']}", field=field) from None


def _tool_errors(function: _Tool) -> _Tool:
    """Library errors become tool errors that name the field and say the fix."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except ConvmemError as exc:
            field = getattr(exc, "field", None)
            prefix = f"{type(exc).__name__} (field {field})" if field else type(exc).__name__
            raise ToolError(f"{prefix}: {exc}") from exc

    return wrapped  # type: ignore[return-value]


def _argument_error(exc: ValidationError) -> str:
    """An argument the SDK refused (a wrong type, a missing one), told as the tools tell
    their own input errors: ``InvalidInputError (field top_k): top_k: ...``."""
    problems = exc.errors()
    field = ".".join(str(part) for part in problems[0]["loc"]) or "arguments"
    message = "required; send it" if problems[0]["type"] == "missing" else problems[0]["msg"]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"InvalidInputError (field {field}): {field}: {message}{more}"


class _Server(MCPServer[Any]):
    """The SDK's server, with its argument validation errors in the tools' own form
    instead of pydantic's multi-line text (docs/mcp.md)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {_argument_error(cause)}") from cause


def build_server(memory: Memory) -> MCPServer:
    """An MCP server whose tools read and write ``memory`` (one tenant)."""
    server = _Server(
        "convmem",
        instructions="Long-term conversation memory: remember turns, recall evidence with "
        "filters and retrieval hints, forget by turn range or chunk id, confirm notes, and "
        "build a story scene's memory context.",
    )

    _memory_tools(server, memory)
    _note_and_story_tools(server, memory)
    return server


#: The metadata a brief hit keeps: what an agent acts on (when, who, where to forget it,
#: which part of the question it answers). The rest is the search's bookkeeping (scores of
#: each feature, turn lists, flags): about 60 % of a hit, in the agent's context each time.
BRIEF_METADATA = (
    "conversation_id",
    "turn_range",
    "timestamp_range",
    "participants",
    "category",
    "sub_query",
)
DETAILS = ("brief", "full")


def _shown(result: dict[str, Any], detail: str) -> dict[str, Any]:
    """``recall``'s answer at the detail asked for."""
    if detail == "full":
        return result
    hits = []
    for hit in result["hits"]:
        metadata = hit.get("metadata") or {}
        brief = {
            key: hit[key]
            for key in ("chunk_id", "score", "text", "context", "tier", "pending")
            if key in hit
        }
        brief["metadata"] = {key: metadata[key] for key in BRIEF_METADATA if key in metadata}
        hits.append(brief)
    return {**result, "hits": hits}


def _memory_tools(server: MCPServer, memory: Memory) -> None:
    """remember, recall, forget."""

    @server.tool()
    @_tool_errors
    def remember(conversation_id: str, turns: list[dict[str, Any]]) -> dict[str, Any]:
        """Store turns (turn_id, role, text, timestamp) durably and queue them for indexing."""
        body = _parse(TurnsIn, {"turns": turns})
        return memory.add_turns(conversation_id, body.as_dicts()).model_dump(mode="json")

    @server.tool()
    @_tool_errors
    def recall(
        query: str,
        top_k: int = 6,
        filters: dict[str, Any] | None = None,
        hints: dict[str, Any] | None = None,
        mode: str = "hybrid",
        min_score: float = DEFAULT_MIN_SCORE,
        detail: str = "brief",
    ) -> dict[str, Any]:
        """Search memory: hits with score, text and metadata; deleted memory never returns.

        Each hit is one evidence turn (its chunk in ``context``); ``score`` is calibrated
        (0-1, the same scale for every query) and hits under ``min_score`` are dropped, so
        an empty list means nothing relevant is remembered. A question that asks several
        things ("A? And also B") is searched part by part; each hit names its part in
        ``metadata.sub_query``. ``detail="brief"`` keeps the metadata an agent acts on
        (conversation, turn range, time, participants, category); ``"full"`` all of it.
        """
        if detail not in DETAILS:
            raise InvalidInputError(
                f"detail must be 'brief' or 'full', got {detail!r}", field="detail"
            )
        body = _parse(
            SearchIn,
            {
                "query_text": query,
                "top_k": top_k,
                "filters": filters,
                "hints": hints,
                "mode": mode,
                "min_score": min_score,
            },
        )
        if body.hints is not None:
            hints_used = body.hints.model_dump(mode="json", exclude_unset=True)
            result = memory.retrieve(body.query_text, hints_used, **body.options())
            return _shown(result.as_dict(), detail)
        hits = memory.search(body.query_text, **body.options())
        return _shown(
            {"hits": [hit.model_dump(mode="json") for hit in hits], "hints": None}, detail
        )

    @server.tool()
    @_tool_errors
    def forget(
        conversation_id: str,
        turn_range: list[int] | None = None,
        chunk_ids: list[str] | None = None,
        all: bool = False,
    ) -> dict[str, Any]:
        """Delete by turn range or chunk ids; a whole conversation only with all=true."""
        body = _parse(
            DeleteIn,
            {"conversation_id": conversation_id, "turn_range": turn_range, "chunk_ids": chunk_ids},
        )
        if body.turn_range is None and body.chunk_ids is None and not all:
            raise InvalidInputError(
                "send turn_range or chunk_ids, or all=true to forget the whole conversation",
                field="turn_range",
            )
        result = memory.delete(body.conversation_id, body.turn_range, body.chunk_ids)
        return {
            "deleted": result.deleted,
            "turns_deleted": result.turns_deleted,
            "errors": result.errors,
        }


def _note_and_story_tools(server: MCPServer, memory: Memory) -> None:
    """list_notes, confirm_note, scene_context."""

    @server.tool()
    @_tool_errors
    def list_notes(
        conversation_id: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Live notes: pending and confirmed by default, or one status."""
        return [
            note.model_dump(mode="json")
            for note in memory.notes(conversation_id, status, limit=limit)
        ]

    @server.tool()
    @_tool_errors
    def confirm_note(
        note_id: str, confirm: bool = True, evidence_level: str | None = None
    ) -> dict[str, Any]:
        """Confirm (or, with confirm=false, reject) a note awaiting the user's confirmation."""
        note = memory.update_note(note_id, confirm=confirm, evidence_level=evidence_level)
        return note.model_dump(mode="json")

    @server.tool()
    @_tool_errors
    def scene_context(
        project_id: str,
        scene_plan: dict[str, Any],
        chapter_index: int | None = None,
        scene_index: int | None = None,
        characters: dict[str, Any] | None = None,
        top_k: int = 10,
    ) -> dict[str, Any]:
        """A story scene's memory context from what came before it (seed 003)."""
        data = {"project_id": project_id, "scene_plan": scene_plan, "top_k": top_k}
        data |= {"chapter_index": chapter_index, "scene_index": scene_index}
        if characters is not None:
            data["characters"] = characters
        body = _parse(SceneIn, data)
        chapter = (
            body.chapter_index if body.chapter_index is not None else body.scene_plan.chapter_index
        )
        scene = body.scene_index if body.scene_index is not None else body.scene_plan.scene_index
        context = build_scene_memory_context(
            body.scene_plan,
            body.characters,
            body.project_id,
            chapter,
            scene,
            memory=memory,
            top_k=body.top_k,
        )
        return context.model_dump(mode="json")
