"""Search the caller's tenant: plain hybrid search, or hinted (tiered) retrieval."""

from convmem.server.auth import Caller
from convmem.server.routers._tenant import BODY_ERRORS, tenant_router
from convmem.server.schemas import SearchIn, SearchOut

__all__ = ["router"]

router = tenant_router("search")


@router.post("/search", responses=BODY_ERRORS)
def search(body: SearchIn, memory: Caller) -> SearchOut:
    """Hybrid search in the caller's tenant; deleted and expired memory never returned.

    With ``hints`` (``{"strategies": [...], "params": {...}}``) the hierarchical service
    reads the tiers they ask for (STM, MTM, LTM); the hints applied are echoed. ``mode``,
    ``granularity`` and ``min_score`` apply to the dialogue tier either way.
    """
    if body.hints is not None:
        hints = body.hints.model_dump(mode="json", exclude_unset=True)
        result = memory.retrieve(body.query_text, hints, **body.options())
        return SearchOut(hits=result.hits, hints=result.hints)
    hits = memory.search(body.query_text, **body.options())
    return SearchOut(hits=hits, hints=None)
