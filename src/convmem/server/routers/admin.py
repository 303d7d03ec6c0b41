"""The admin key's routes: API keys, and the service's status across tenants."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from convmem.server.auth import Admin, require_admin
from convmem.server.errors import documented
from convmem.server.schemas import KeyIn, KeyOut, RevokedOut, check_json_values

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin), Depends(check_json_values)],
    responses=documented(403, 422, 503),
)


@router.post("/keys", status_code=201, responses=documented(400, 413))
def create_key(body: KeyIn, memory: Admin) -> KeyOut:
    """Create an API key for a tenant; the key is shown only in this response.

    The tenant name is checked exactly as the library checks it (422 naming ``tenant``).
    """
    key_id, secret = memory.create_api_key(body.tenant, body.name)
    return KeyOut(key_id=key_id, key=secret, tenant=body.tenant)


@router.get("/keys")
def list_keys(memory: Admin) -> list[dict[str, Any]]:
    """Every key: id, tenant, name, created and revoked times; never the secrets."""
    return memory.list_api_keys()


@router.delete("/keys/{key_id}", responses=documented(404))
def revoke_key(
    key_id: Annotated[str, Path(min_length=1, max_length=200)], memory: Admin
) -> RevokedOut:
    """Revoke a key; requests with it get 401 from now on."""
    memory.revoke_api_key(key_id)
    return RevokedOut(key_id=key_id, status="revoked")


@router.get("/status")
def service_status(
    memory: Admin, tenant: Annotated[str | None, Query(min_length=1, max_length=100)] = None
) -> dict[str, Any]:
    """Index backlog and failed jobs of every tenant, or one tenant's counts (``tenant=``).

    This is the detail ``/healthz`` no longer shows to callers without a key.
    """
    if tenant is not None:
        return memory.for_tenant(tenant).stats()
    pending, failed = memory.backlog(all_tenants=True)
    return {"status": "ok", "backlog": pending, "failed_jobs": failed}
