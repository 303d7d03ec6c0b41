"""Index jobs: their state, and retrying a failed one now."""

from typing import Any

from convmem.server.auth import Caller
from convmem.server.errors import documented
from convmem.server.routers._tenant import tenant_router
from convmem.server.schemas import JobId

__all__ = ["router"]

router = tenant_router("jobs")


@router.get("/jobs/{job_id}", responses=documented(404))
def job(job_id: JobId, memory: Caller) -> dict[str, Any]:
    """An index job of the caller's tenant: status, attempts, last error."""
    return memory.job(job_id).model_dump(mode="json")


@router.post("/jobs/{job_id}/retry", responses=documented(404))
def retry(job_id: JobId, memory: Caller) -> dict[str, Any]:
    """Run a failed job again now."""
    return memory.retry_job(job_id).model_dump(mode="json")
