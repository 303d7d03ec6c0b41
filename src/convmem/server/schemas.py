"""Request and response models of the HTTP service, and what any request body may hold.

The library validates turns, filters and policies itself (one definition of each); the
models here type the HTTP edge so that a wrong type or range is a 422 naming the field
and the OpenAPI document describes it. :func:`check_json_values` walks every JSON body
once for values no store can hold (lone surrogates, NUL, integers beyond 64 bits,
non-finite numbers), so those are a 422 too and never reach the store.
"""

# No "from __future__ import annotations": FastAPI and pydantic read these at runtime.
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

from fastapi import Path, Request
from pydantic import (
    AfterValidator,
    AliasChoices,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
)

from convmem.errors import InvalidInputError
from convmem.ids import MAX_CONVERSATION_ID, check_chunk_id, check_conversation_id
from convmem.models import (
    MAX_ID_LENGTH,
    MAX_QUERY_CHARS,
    MAX_SEQ,
    ChunkMetadata,
    ChunkRecord,
    Hit,
    JobInfo,
    Role,
    first_problem,
    runs_backwards,
    value_problem,
)
from convmem.retrieve.calibration import DEFAULT_MIN_SCORE
from convmem.story import CharactersConfig, EntityStateSnapshot, ScenePlan, StoryMemoryChunk
from convmem.story.models import MAX_CHAPTER

__all__ = [
    "ConversationStatusOut",
    "DeleteIn",
    "DeleteOut",
    "HealthOut",
    "Hints",
    "KeyIn",
    "KeyOut",
    "RevokedOut",
    "SceneIn",
    "SearchIn",
    "SearchOut",
    "StoryChunksIn",
    "StoryChunksOut",
    "StoryStatesIn",
    "StoryStatesOut",
    "TurnIn",
    "TurnOut",
    "TurnsIn",
    "TurnsOut",
    "UpdateIn",
    "check_json_values",
]

# The names of convmem.retrieve.routing.STRATEGIES (a test keeps the two equal).
Strategy = Literal["semantic_search", "deep_search", "temporal_search", "persona_search"]
Bounded = Annotated[str, Field(max_length=64)]
JobId = Annotated[int, Path(ge=1, le=MAX_SEQ)]
Seq = Annotated[int, Field(ge=0, le=MAX_SEQ)]
TurnIdInt = Annotated[int, Field(strict=True, ge=0, le=MAX_SEQ)]
TurnIdText = Annotated[str, Field(strict=True, min_length=1, max_length=200, pattern=r"\d$")]


# The library's rules (convmem.ids.check_conversation_id), in the schema too: 1..200
# characters, not blank. A chunk id is 1..200 characters, as a story chunk's.
ConversationId = Annotated[
    str, Field(min_length=1, max_length=MAX_CONVERSATION_ID), AfterValidator(check_conversation_id)
]
ChunkId = Annotated[
    str, Field(min_length=1, max_length=MAX_ID_LENGTH), AfterValidator(check_chunk_id)
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _whole_number(value: Any) -> Any:
    # JSON Schema calls 7.0 an integer, so clients may send it; True is not a turn id.
    if isinstance(value, bool):
        raise ValueError(f"turn_id must be an int or a string ending in digits, got {value}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class TurnIn(_Strict):
    """One turn as sent; :class:`convmem.models.Turn` checks it again (one definition).

    The seed's names ``speaker`` (for ``role``) and ``timestamp_iso`` (for ``timestamp``)
    are accepted too; sending both names of one field is refused.
    """

    turn_id: Annotated[TurnIdInt | TurnIdText, BeforeValidator(_whole_number)] = Field(
        description="an int, or a string ending in digits (the digits give the order)"
    )
    role: Role = Field(
        validation_alias=AliasChoices("role", "speaker"), description="also accepted as speaker"
    )
    text: str = Field(min_length=1)
    timestamp: AwareDatetime | None = Field(
        default=None,
        validation_alias=AliasChoices("timestamp", "timestamp_iso"),
        description="ISO 8601 with a time zone (also accepted as timestamp_iso); "
        "default: when the turn is accepted",
    )
    name: str | None = Field(default=None, max_length=200)
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    conversation_id: str | None = Field(
        default=None, max_length=200, description="ignored: the path names the conversation"
    )


class TurnsIn(_Strict):
    turns: list[TurnIn] = Field(min_length=1)

    def as_dicts(self) -> list[dict[str, Any]]:
        """The turns as the library takes them, without the fields that were not sent."""
        return [turn.model_dump(mode="json", exclude_unset=True) for turn in self.turns]


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
    query_text: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: int = Field(default=6, ge=1, le=1000)
    filters: dict[str, Any] | None = None
    hints: Hints | None = None
    mode: Literal["hybrid", "vector", "lexical"] = "hybrid"
    granularity: Literal["turn", "chunk"] = Field(
        default="turn",
        description="turn: each dialogue hit is one evidence turn with its chunk as context; "
        "chunk: whole chunks",
    )
    min_score: float = Field(
        default=DEFAULT_MIN_SCORE,
        ge=0,
        le=1,
        description="drop hits whose calibrated score (the same scale for every query) is "
        "below this; with nothing relevant in memory the search returns no hits. 0 keeps all",
    )
    decompose: bool = Field(
        default=True,
        description="search each part of a question that asks several things "
        "('A？还有B', 'A, and also B') on its own and interleave their hits; false searches "
        "the text as one question",
    )

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``Memory.search`` this body asks for."""
        return {
            "top_k": self.top_k,
            "filters": self.filters,
            "mode": self.mode,
            "granularity": self.granularity,
            "min_score": self.min_score,
            "decompose": self.decompose,
        }


class DeleteIn(_Strict):
    conversation_id: ConversationId
    turn_range: tuple[Seq, Seq] | None = None
    chunk_ids: list[str] | None = Field(default=None, max_length=1000)


class ChunkMetadataIn(ChunkMetadata):
    """:class:`ChunkMetadata` whose times and numbers are checked before they reach the store."""

    # the rules of every route's conversation_id: a chunk stored under an id /v1/delete
    # refuses could never be deleted
    conversation_id: ConversationId
    turn_range: tuple[Seq, Seq]
    chunk_version: int = Field(default=1, ge=0, le=MAX_SEQ)
    turn_seqs: list[Seq] = Field(default_factory=list)
    # expires_at and timestamp_range are checked by ChunkMetadata itself (ISO 8601, zoned)

    @field_validator("timestamp_range")
    @classmethod
    def _in_order(cls, value: tuple[str, str] | None) -> tuple[str, str] | None:
        if runs_backwards(value):  # times that are not zoned ISO: ChunkMetadata says so
            raise ValueError(
                f"timestamp_range {list(value or ())} ends before it starts; send [start, end] "
                "with start <= end"
            )
        return value


class ChunkRecordIn(ChunkRecord):
    """A :class:`~convmem.models.ChunkRecord` (what ``/v1/update`` overwrites), checked."""

    chunk_id: ChunkId
    metadata: ChunkMetadataIn


class UpdateIn(_Strict):
    """Either ``chunk`` (overwrite a chunk by id) or ``note_id`` with a verdict.

    A verdict is ``confirm`` (true/false), or the seed's form: ``requires_confirmation:
    false`` / ``status: "confirmed"`` to confirm, ``status: "rejected"`` to reject;
    ``evidence_level`` may be raised on confirm.
    """

    # The schema says what the route checks: exactly one of chunk and note_id.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["chunk"]}, {"required": ["note_id"]}]},
    )

    chunk: ChunkRecordIn | None = None
    note_id: str | None = Field(default=None, max_length=200)
    confirm: bool | None = None
    status: Literal["confirmed", "rejected"] | None = None
    requires_confirmation: bool | None = None
    evidence_level: str | None = Field(default=None, max_length=40)


class SceneIn(_Strict):
    project_id: str = Field(min_length=1, max_length=200)
    chapter_index: int | None = Field(default=None, ge=0, le=MAX_CHAPTER)
    scene_index: int | None = Field(default=None, ge=0, le=MAX_CHAPTER)
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


class SearchOut(BaseModel):
    hits: list[Hit]
    hints: dict[str, JsonValue] | None = Field(
        description="the hints applied (strategies, params, tiers), or null without hints"
    )


class TurnOut(BaseModel):
    turn_id: int | str
    role: str
    name: str | None
    text: str
    timestamp: str


class ConversationStatusOut(BaseModel):
    conversation_id: str
    backlog: int
    last_turn: int | None
    last_indexed_turn: int | None
    failed_jobs: list[JobInfo]


class DeleteOut(BaseModel):
    deleted: int = Field(description="chunks marked deleted")
    turns_deleted: int
    errors: list[str]


class StoryChunksOut(BaseModel):
    project_id: str
    chunk_ids: list[str]


class StoryStatesOut(BaseModel):
    project_id: str
    states: int


class KeyOut(BaseModel):
    key_id: str
    key: str = Field(description="the secret: shown only in this response")
    tenant: str


class RevokedOut(BaseModel):
    key_id: str
    status: Literal["revoked"]


# -- what any body may hold ----------------------------------------------------------------


async def check_json_values(request: Request) -> None:
    """Reject (422, naming the field) a request holding a value no store can keep.

    FastAPI has already parsed the body (Starlette caches it), so this costs one walk.
    Path and query parameters are checked too (a %00 in a URL is a NUL, and percent-encoded
    bytes must be UTF-8).
    """
    undecodable = _not_utf8(request)
    if undecodable is not None:
        raise InvalidInputError(
            f"{undecodable} is not UTF-8 once percent-decoded; percent-encode the id as UTF-8 "
            "(é is %C3%A9)",
            field=undecodable,
        )
    for name, value in [*request.path_params.items(), *request.query_params.items()]:
        bad = value_problem(value)
        if bad is not None:
            raise InvalidInputError(f"{name} {bad}", field=name)
    if not await request.body():
        return
    try:
        body = await request.json()
    except ValueError:
        return  # not JSON: the route's own validation answers 400 or 422
    problem = first_problem(body)
    if problem is not None:
        field, message = problem
        raise InvalidInputError(f"{field or 'the body'} {message}", field=field or None)


def _utf8(raw: bytes) -> bool:
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _not_utf8(request: Request) -> str | None:
    """The path or query parameter whose percent-encoded bytes are not UTF-8, or None.

    Servers decode such bytes as U+FFFD, so ``a%FF`` and ``a%FE`` named one conversation.
    """
    raw_path = request.scope.get("raw_path")
    if isinstance(raw_path, bytes) and not _utf8(raw_path):
        names = [name for name, value in request.path_params.items() if "\ufffd" in str(value)]
        return names[0] if names else next(iter(request.path_params), "path")
    for pair in bytes(request.scope.get("query_string", b"")).split(b"&"):
        if not _utf8(pair):
            return unquote_to_bytes(pair.partition(b"=")[0]).decode("utf-8", "replace")
    return None
