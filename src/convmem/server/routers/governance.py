"""Delete, update (chunks and the note confirmation loop), notes and the retention policy."""

from typing import Annotated, Any, Literal

from fastapi import Query

from convmem.errors import InvalidInputError
from convmem.server.auth import Caller
from convmem.server.errors import documented
from convmem.server.routers._tenant import BODY_ERRORS, tenant_router
from convmem.server.schemas import DeleteIn, DeleteOut, UpdateIn

__all__ = ["router"]

router = tenant_router("governance")


@router.post("/delete", responses=BODY_ERRORS)
def delete(body: DeleteIn, memory: Caller) -> DeleteOut:
    """Logical delete by ``conversation_id`` + ``turn_range`` or ``chunk_ids``."""
    if body.turn_range is None and body.chunk_ids is None:
        raise InvalidInputError(
            "send turn_range or chunk_ids; to delete a whole conversation send "
            "turn_range [0, 9007199254740991]",
            field="turn_range",
        )
    result = memory.delete(body.conversation_id, body.turn_range, body.chunk_ids)
    return DeleteOut(
        deleted=result.deleted, turns_deleted=result.turns_deleted, errors=result.errors
    )


def _verdict(body: UpdateIn) -> bool:
    """``confirm``, or the seed's ``status`` / ``requires_confirmation`` forms, agreeing."""
    if body.requires_confirmation is True and body.confirm is None and body.status is None:
        # "still requires confirmation" is no verdict: read as a rejection, it silently
        # rejected the note
        raise InvalidInputError(
            "requires_confirmation: true is not a verdict; send confirm: true to confirm the "
            "note or confirm: false to reject it (or requires_confirmation: false to confirm)",
            field="requires_confirmation",
        )
    verdicts = {
        body.confirm,
        None if body.status is None else body.status == "confirmed",
        None if body.requires_confirmation is None else not body.requires_confirmation,
    } - {None}
    if len(verdicts) != 1:
        raise InvalidInputError(
            "send one verdict: confirm true/false (or status, or requires_confirmation "
            "false), and not two that disagree",
            field="confirm",
        )
    confirm = verdicts.pop() is True
    if not confirm and body.evidence_level == "S3_user_confirmed":
        raise InvalidInputError(
            "evidence_level S3_user_confirmed says the user confirmed the note, but the verdict "
            "rejects it; leave evidence_level out to reject, or send confirm: true",
            field="evidence_level",
        )
    return confirm


@router.post("/update", responses={**BODY_ERRORS, **documented(404)})
def update(body: UpdateIn, memory: Caller) -> dict[str, Any]:
    """Overwrite a chunk, or confirm/reject a note (the confirmation loop)."""
    if body.chunk is not None and body.note_id is None:
        result = memory.update(body.chunk)
        if result.errors and not (result.upserted or result.updated):
            raise InvalidInputError("; ".join(result.errors), field="chunk")
        return {"upserted": result.upserted, "updated": result.updated, "errors": result.errors}
    if body.note_id is None or body.chunk is not None:
        raise InvalidInputError("send exactly one of chunk or note_id", field="note_id")
    note = memory.update_note(
        body.note_id, confirm=_verdict(body), evidence_level=body.evidence_level
    )
    return note.model_dump(mode="json")


@router.get("/notes")
def notes(
    memory: Caller,
    conversation_id: Annotated[str | None, Query(max_length=200)] = None,
    status: Literal["pending", "confirmed", "rejected"] | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 200,
) -> list[dict[str, Any]]:
    """Live notes (pending and confirmed by default)."""
    return [
        note.model_dump(mode="json") for note in memory.notes(conversation_id, status, limit=limit)
    ]


@router.get("/policy")
def get_policy(memory: Caller) -> dict[str, Any]:
    """The retention policy in force for the caller's tenant."""
    return memory.policy().as_dict()


@router.put("/policy", responses=BODY_ERRORS)
def put_policy(overrides: dict[str, Any], memory: Caller) -> dict[str, Any]:
    """Set the tenant's retention overrides (``{}`` clears them)."""
    return memory.set_policy(overrides or None).as_dict()
