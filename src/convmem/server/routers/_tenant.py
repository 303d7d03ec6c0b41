"""What every tenant router shares: the key, the body check and the documented errors."""

from fastapi import APIRouter, Depends

from convmem.server.auth import tenant_memory
from convmem.server.errors import documented
from convmem.server.schemas import check_json_values

__all__ = ["BODY_ERRORS", "tenant_router"]

# A route that reads a JSON body can also answer these.
BODY_ERRORS = documented(400, 413)


def tenant_router(tag: str) -> APIRouter:
    """A /v1 router whose routes act on the caller's tenant (401 without a valid key)."""
    return APIRouter(
        prefix="/v1",
        tags=[tag],
        # tenant first: an unauthenticated request gets 401 whatever its body holds
        dependencies=[Depends(tenant_memory), Depends(check_json_values)],
        responses=documented(401, 422, 503),
    )
