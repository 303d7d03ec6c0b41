"""Who is calling: the tenant dependency (API keys) and the admin dependency.

A key is sent as ``Authorization: Bearer cm_...`` or ``X-API-Key``; both are declared as
OpenAPI security schemes (``bearer``, ``apiKey``; ``adminBearer``, ``adminApiKey`` for the
admin routes) so generated clients send them.
"""

# No "from __future__ import annotations": FastAPI reads the dependency annotations.
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from convmem import Memory
from convmem.metrics import Histogram
from convmem.server.errors import ForbiddenError, UnauthorizedError
from convmem.store.keys import hash_key

if TYPE_CHECKING:
    from convmem.server.settings import ServerSettings

__all__ = [
    "Admin",
    "Caller",
    "Service",
    "ServiceState",
    "require_admin",
    "service",
    "tenant_memory",
]

_bearer = HTTPBearer(
    scheme_name="bearer", auto_error=False, description="an API key: Bearer cm_..."
)
_api_key = APIKeyHeader(
    name="X-API-Key", scheme_name="apiKey", auto_error=False, description="an API key, cm_..."
)
_admin_bearer = HTTPBearer(
    scheme_name="adminBearer", auto_error=False, description="the admin key (CONVMEM_ADMIN_KEY)"
)
_admin_api_key = APIKeyHeader(
    name="X-API-Key",
    scheme_name="adminApiKey",
    auto_error=False,
    description="the admin key (CONVMEM_ADMIN_KEY)",
)


@dataclass
class Service:
    """What the routes share: the base Memory, the settings and the request timings."""

    memory: Memory
    settings: "ServerSettings"
    admin_hash: str | None
    request_seconds: dict[tuple[str, str], Histogram] = field(default_factory=dict)


def service(request: Request) -> Service:
    state: Service = request.app.state.convmem
    return state


def _secret(bearer: HTTPAuthorizationCredentials | None, api_key: str | None) -> str | None:
    if bearer is not None and bearer.credentials.strip():
        return bearer.credentials.strip()
    return api_key or None


def tenant_memory(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    api_key: Annotated[str | None, Security(_api_key)],
) -> Memory:
    """The tenant view of the API key (or of the default tenant when auth is off)."""
    state = service(request)
    if not state.settings.auth:
        request.state.tenant = state.settings.default_tenant
        return state.memory.for_tenant(state.settings.default_tenant)
    secret = _secret(bearer, api_key)
    if secret is None:
        raise UnauthorizedError("send an API key: 'Authorization: Bearer cm_...' or X-API-Key")
    tenant = state.memory.api_key_tenant(secret)
    if tenant is None:
        raise UnauthorizedError("unknown or revoked API key")
    request.state.tenant = tenant
    return state.memory.for_tenant(tenant)


def require_admin(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_admin_bearer)],
    api_key: Annotated[str | None, Security(_admin_api_key)],
) -> Memory:
    """The base Memory, for a caller holding the admin key (403 otherwise)."""
    state = service(request)
    if state.admin_hash is None:
        raise ForbiddenError("no admin key is configured (set CONVMEM_ADMIN_KEY)")
    secret = _secret(bearer, api_key)
    if secret is None or not hmac.compare_digest(hash_key(secret), state.admin_hash):
        raise ForbiddenError("this route needs the admin key")
    request.state.tenant = "admin"
    return state.memory


Caller = Annotated[Memory, Depends(tenant_memory)]
Admin = Annotated[Memory, Depends(require_admin)]
ServiceState = Annotated[Service, Depends(service)]
