"""Open routes for operators: liveness and Prometheus metrics (no tenant detail in either)."""

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from convmem.server.auth import ServiceState
from convmem.server.errors import DESCRIPTIONS, ERROR_BODY_REF, documented
from convmem.server.metrics import render_prometheus
from convmem.server.schemas import HealthOut

__all__ = ["router"]

router = APIRouter(tags=["ops"])


@router.get("/healthz", responses=documented(503))
def healthz(state: ServiceState) -> HealthOut:
    """``{"status": "ok"}`` when the store answers; 503 ``store_unavailable`` when not."""
    state.memory.backlog(all_tenants=True)  # a read of the store: raises StoreError when down
    return HealthOut(status="ok")


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        # spelled out: a model here would be documented as text/plain, like the 200
        503: {
            "description": DESCRIPTIONS[503],
            "content": {"application/json": {"schema": {"$ref": ERROR_BODY_REF}}},
        },
    },
)
def metrics(state: ServiceState) -> str:
    """Prometheus text format: process-wide counters and timings, no tenant labels."""
    return render_prometheus(state.memory, state.request_seconds)
