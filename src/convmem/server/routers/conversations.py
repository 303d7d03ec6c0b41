"""Turns in, and what the service knows about a conversation."""

from typing import Annotated, Any

from fastapi import Path, Query, Response

from convmem.errors import InvalidInputError
from convmem.server.auth import Caller, ServiceState
from convmem.server.errors import documented
from convmem.server.routers._tenant import BODY_ERRORS, tenant_router
from convmem.server.schemas import ConversationStatusOut, TurnOut, TurnsIn, TurnsOut

__all__ = ["router"]

router = tenant_router("conversations")
ConversationId = Annotated[str, Path(min_length=1, max_length=200)]
# ":path": an id holding "/" (sent as %2F, which the server decodes) is still one id; the
# suffix (/turns, /status...) picks the route


@router.post(
    "/conversations/{conversation_id:path}/turns",
    status_code=202,
    responses={**BODY_ERRORS, **documented(409), 200: {"model": TurnsOut}},
)
def add_turns(
    conversation_id: ConversationId,
    body: TurnsIn,
    memory: Caller,
    state: ServiceState,
    response: Response,
) -> TurnsOut:
    """Store turns durably (fsync'd) and queue them for indexing; 202 once durable.

    Re-posting the same turns is a no-op (200, ``status: duplicate``); the same id with
    other text is 409.
    """
    limit = state.settings.max_turns_per_request
    if len(body.turns) > limit:
        raise InvalidInputError(
            f"{len(body.turns)} turns in one request; the limit is {limit}: "
            "split them into several requests",
            field="turns",
        )
    receipt = memory.add_turns(conversation_id, body.as_dicts())
    duplicate = not receipt.accepted_turn_ids
    if duplicate:
        response.status_code = 200
    return TurnsOut(
        conversation_id=receipt.conversation_id,
        status="duplicate" if duplicate else "accepted",
        accepted_turn_ids=receipt.accepted_turn_ids,
        duplicate_turn_ids=receipt.duplicate_turn_ids,
        job_id=receipt.job_id,
        accepted_at=receipt.accepted_at.isoformat(),
        message="every turn was already stored; nothing changed"
        if duplicate
        else f"{len(receipt.accepted_turn_ids)} turns stored durably and queued for indexing",
    )


@router.get("/conversations/{conversation_id:path}/status")
def status(conversation_id: ConversationId, memory: Caller) -> ConversationStatusOut:
    """Index backlog, last indexed turn and failed jobs of a conversation."""
    return ConversationStatusOut.model_validate(memory.status(conversation_id))


@router.get("/conversations/{conversation_id:path}/turns")
def recent_turns(
    conversation_id: ConversationId,
    memory: Caller,
    limit: Annotated[int, Query(ge=1, le=10000)] = 50,
) -> list[TurnOut]:
    """The newest live turns (the event log), oldest first."""
    return [
        TurnOut(
            turn_id=turn.turn_id,
            role=turn.role,
            name=turn.name,
            text=turn.text,
            timestamp=turn.timestamp.isoformat(),
        )
        for turn in memory.recent_turns(conversation_id, limit=limit)
    ]


@router.get("/conversations/{conversation_id:path}/marks")
def marks(conversation_id: ConversationId, memory: Caller) -> list[dict[str, Any]]:
    """Each turn's Stage 2 mark with its reason."""
    return [mark.model_dump(mode="json") for mark in memory.marks(conversation_id)]


@router.get("/conversations/{conversation_id:path}/pins")
def pins(conversation_id: ConversationId, memory: Caller) -> list[dict[str, Any]]:
    """The conversation's pinned memories."""
    return [pin.model_dump(mode="json") for pin in memory.pins(conversation_id)]
