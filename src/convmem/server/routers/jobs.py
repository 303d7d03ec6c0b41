"""Index jobs: their state, and retrying a failed one now."""

from convmem.models import JobInfo
from convmem.server.auth import Caller
from convmem.server.errors import documented
from convmem.server.routers._tenant import tenant_router
from convmem.server.schemas import JobId

__all__ = ["router"]

router = tenant_router("jobs")


@router.get("/jobs/{job_id}", responses=documented(404))
def job(job_id: JobId, memory: Caller) -> JobInfo:
    """An index job of the caller's tenant: status, attempts, last error."""
    return memory.job(job_id)


@router.post("/jobs/{job_id}/retry", responses=documented(404))
def retry(job_id: JobId, memory: Caller) -> JobInfo:
    """Run a failed job again now."""
    return memory.retry_job(job_id)
