"""Request and response models of the HTTP service, and what any request body may hold.

The library validates turns, filters and policies itself (one definition of each); the
models here type the HTTP edge so that a wrong type or range is a 422 naming the field
and the OpenAPI document describes it. :func:`check_json_values` walks every JSON body
once for values no store can hold (lone surrogates, NUL, integers beyond 64 bits,
non-finite numbers), so those are a 422 too and never reach the store.
"""

# No "from __future__ import annotations": FastAPI and pydantic read these at runtime.
import math
from typing import Annotated, Any, Literal

from fastapi import Path, Request
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from convmem.errors import InvalidInputError
from convmem.models import MAX_SEQ, ChunkRecord
from convmem.story import CharactersConfig, EntityStateSnapshot, ScenePlan, StoryMemoryChunk

__all__ = [
    "DeleteIn",
    "HealthOut",
    "Hints",
    "KeyIn",
    "SceneIn",
    "SearchIn",
    "StoryChunksIn",
    "StoryStatesIn",
    "TurnsIn",
    "TurnsOut",
    "UpdateIn",
    "check_json_values",
]

INT64 = 2**63 - 1
# The names of convmem.retrieve.routing.STRATEGIES (a test keeps the two equal).
Strategy = Literal["semantic_search", "deep_search", "temporal_search", "persona_search"]
Bounded = Annotated[str, Field(max_length=64)]
JobId = Annotated[int, Path(ge=1, le=MAX_SEQ)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnsIn(_Strict):
    turns: list[dict[str, Any]] = Field(
        description="turns: turn_id (int or string ending in digits), role "
        "(user|assistant|tool|system) or speaker, text, timestamp (ISO 8601), optional name, meta"
    )


class TurnsOut(BaseModel):
    conversation_id: str
    status: Literal["accepted", "duplicate"]
    accepted_turn_ids: list[int | str]
    duplicate_turn_ids: list[int | str]
    job_id: int | None
    accepted_at: str
    message: str


class HintParams(BaseModel):
    """Parameters of a hinted search; other keys are echoed back, not used."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)

    top_k: int | None = Field(default=None, ge=1, le=1000)
    time_range: (
        Literal["recent", "24h", "7d", "30d"] | tuple[Bounded | None, Bounded | None] | None
    ) = Field(
        default=None,
        description="'recent' (7 days before the conversation's newest turn), '24h', "
        "'7d', '30d', or [start, end] as ISO 8601 (null: open)",
    )
    include_persona: bool | None = None
    candidates_multiplier: int | None = Field(default=None, ge=1, le=10)


class Hints(BaseModel):
    """Which memory tiers a search reads (the hierarchical service)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)

    strategies: list[Strategy] | None = Field(default=None, max_length=8)
    params: HintParams | None = None
    route_strategy: str | None = Field(default=None, max_length=200)


class SearchIn(_Strict):
    query_text: str = Field(min_length=1, max_length=8000)
    top_k: int = Field(default=6, ge=1, le=1000)
    filters: dict[str, Any] | None = None
    hints: Hints | None = None
    mode: Literal["hybrid", "vector", "lexical"] = "hybrid"


class DeleteIn(_Strict):
    conversation_id: str = Field(min_length=1, max_length=200)
    turn_range: tuple[int, int] | None = None
    chunk_ids: list[str] | None = Field(default=None, max_length=1000)


class UpdateIn(_Strict):
    """Either ``chunk`` (overwrite a chunk by id) or ``note_id`` with a verdict.

    A verdict is ``confirm`` (true/false), or the seed's form: ``requires_confirmation:
    false`` / ``status: "confirmed"`` to confirm, ``status: "rejected"`` to reject;
    ``evidence_level`` may be raised on confirm.
    """

    chunk: ChunkRecord | None = None
    note_id: str | None = Field(default=None, max_length=200)
    confirm: bool | None = None
    status: Literal["confirmed", "rejected"] | None = None
    requires_confirmation: bool | None = None
    evidence_level: str | None = Field(default=None, max_length=40)


class SceneIn(_Strict):
    project_id: str = Field(min_length=1, max_length=200)
    chapter_index: int | None = Field(default=None, ge=0, le=1_000_000)
    scene_index: int | None = Field(default=None, ge=0, le=1_000_000)
    scene_plan: ScenePlan
    characters: CharactersConfig = Field(default_factory=CharactersConfig)
    top_k: int = Field(default=10, ge=1, le=100)


class StoryChunksIn(_Strict):
    chunks: list[StoryMemoryChunk] = Field(max_length=1000)


class StoryStatesIn(_Strict):
    states: list[EntityStateSnapshot] = Field(max_length=1000)


class KeyIn(_Strict):
    tenant: str = Field(min_length=1, max_length=100)
    name: str = Field(default="", max_length=200)


class HealthOut(BaseModel):
    status: Literal["ok"]


# -- what any body may hold ----------------------------------------------------------------


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "holds U+0000 (NUL), which the stores cannot keep; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds a lone surrogate at character {exc.start} (an unpaired \\ud800-\\udfff "
            "escape), which is not valid Unicode; send the text as UTF-8"
        )
    return None


def _bad_value(value: Any) -> str | None:
    if isinstance(value, str):
        return _bad_text(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -INT64 <= value <= INT64:
        return f"is {value}, beyond the 64-bit integers the stores hold; send a smaller number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value}, which is not a finite number; send a finite number"
    return None


def _first_problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first (path, message) of a value no store can hold, depth first."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in reversed(item.items()):
                child_path = f"{where}.{key}" if where else str(key)
                problem = _bad_text(key)
                if problem:
                    return child_path, f"the key {problem}"
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(item))))
        else:
            problem = _bad_value(item)
            if problem:
                return where, problem
    return None


async def check_json_values(request: Request) -> None:
    """Reject (422, naming the field) a JSON body holding a value no store can keep.

    FastAPI has already parsed the body (Starlette caches it), so this costs one walk.
    """
    if not await request.body():
        return
    try:
        body = await request.json()
    except ValueError:
        return  # not JSON: the route's own validation answers 400 or 422
    problem = _first_problem(body, "")
    if problem is not None:
        field, message = problem
        raise InvalidInputError(f"{field or 'the body'} {message}", field=field or None)
