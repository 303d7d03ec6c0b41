"""Operations on the facade: jobs, status, statistics and metrics, API keys, backlog."""

from __future__ import annotations

from typing import Any

from convmem.errors import InvalidInputError
from convmem.facade.base import FacadeBase
from convmem.ids import check_conversation_id, check_flag, check_limit
from convmem.metrics import Counter, Histogram
from convmem.models import INT64, JobInfo
from convmem.store.jobs import JOB_STATUSES

__all__ = ["OperationsMethods"]


class OperationsMethods(FacadeBase):
    def job(self, job_id: int) -> JobInfo:
        """One index job of this tenant. Raises NotFoundError for an unknown id."""
        return self._engine.store.job(self._tenant, _job_id(job_id))

    def jobs(self, status: str | None = None, *, limit: int = 100) -> list[JobInfo]:
        """This tenant's index jobs, newest first: all, or those of one ``status``."""
        if status not in (None, *JOB_STATUSES):
            raise InvalidInputError(
                f"status must be one of {', '.join(JOB_STATUSES)} (or None for all), "
                f"got {status!r}",
                field="status",
            )
        return self._engine.store.jobs(self._tenant, status=status, limit=check_limit(limit))

    def retry_job(self, job_id: int) -> JobInfo:
        """Make a failed job ready to run now."""
        info = self._engine.store.retry_job(self._tenant, _job_id(job_id))
        self._engine.pool.wake()
        return info

    def status(self, conversation_id: str) -> dict[str, Any]:
        """Backlog, last indexed turn and failed jobs of one conversation."""
        conversation_id = check_conversation_id(conversation_id)
        store = self._engine.store
        state = store.conversation_state(self._tenant, conversation_id)
        failed = [
            job.model_dump(mode="json")
            for job in store.jobs(self._tenant, status="failed")
            if job.conversation_id == conversation_id
        ]
        return {
            "conversation_id": conversation_id,
            "backlog": store.backlog_by_conversation(self._tenant).get(conversation_id, 0),
            "last_turn": state.last_seq,
            "last_indexed_turn": state.indexed_seq,
            "failed_jobs": failed,
        }

    def instruments(self) -> dict[str, Counter | Histogram]:
        """The engine's counters and histograms (shared by every tenant view), by name."""
        engine = self._engine
        worker = engine.indexer.metrics
        items: list[Counter | Histogram] = [
            worker.chunks_ingested,
            worker.upsert_failures,
            worker.job_retries,
            engine.turns_accepted,
            engine.searcher.degraded,
            engine.story_degraded,
            engine.searcher.latency,
            worker.index_latency,
            engine.embedding.latency,
        ]
        return {item.name: item for item in items}

    def stats(self) -> dict[str, Any]:
        """Seed 001's metrics plus store counts, for this tenant."""
        engine = self._engine
        worker = engine.indexer.metrics
        pending, failed = engine.store.backlog(self._tenant)
        return {
            **engine.store.stats(self._tenant),
            "tenant": self._tenant,
            "store": engine.store.url,
            "embedding_model": engine.embedding.model_id,
            "embedding_dim": engine.embedding.dimension,
            "chunks_ingested": int(worker.chunks_ingested.value),
            "turns_accepted": int(engine.turns_accepted.value),
            "upsert_failures": int(worker.upsert_failures.value),
            "job_retries": int(worker.job_retries.value),
            "embedding_latency_seconds": engine.embedding.latency.summary(),
            "search_latency_seconds": engine.searcher.latency.summary(),
            "index_batch_seconds": worker.index_latency.summary(),
            "backlog": pending,
            "failed_jobs": failed,
            "backlog_by_conversation": engine.store.backlog_by_conversation(self._tenant),
        }

    def create_api_key(self, tenant: str, name: str = "") -> tuple[str, str]:
        """Create an API key for ``tenant``: ``(key_id, secret)``; the secret is not stored."""
        return self._engine.store.create_api_key(tenant, name)

    def api_key_tenant(self, secret: str) -> str | None:
        """The tenant a live API key maps to, or None (unknown or revoked)."""
        return self._engine.store.api_key_tenant(secret)

    def list_api_keys(self) -> list[dict[str, Any]]:
        """Every API key (id, tenant, name, created and revoked times), never the secrets."""
        return self._engine.store.list_api_keys()

    def revoke_api_key(self, key_id: str) -> None:
        """Revoke a key. Raises NotFoundError when no live key has this id."""
        self._engine.store.revoke_api_key(key_id)

    def job_counts(self, *, all_tenants: bool = False) -> dict[str, int]:
        """Index jobs of this tenant (or of every tenant) by status, read from the store:
        counts the work of ``convmem worker`` processes as well as this process's."""
        return self._engine.store.job_counts(
            None if check_flag(all_tenants, "all_tenants") else self._tenant
        )

    def backlog(
        self, *, all_tenants: bool = False, conversation_id: str | None = None
    ) -> tuple[int, int]:
        """``(pending_or_running, failed)`` index jobs of this tenant (or of one of its
        conversations, or of every tenant)."""
        if check_flag(all_tenants, "all_tenants"):
            if conversation_id is not None:
                raise InvalidInputError(
                    "conversation_id names a conversation of this tenant; leave it out with "
                    "all_tenants=True",
                    field="conversation_id",
                )
            return self._engine.store.backlog(None)
        if conversation_id is not None:
            conversation_id = check_conversation_id(conversation_id)
        return self._engine.store.backlog(self._tenant, conversation_id)


def _job_id(job_id: Any) -> int:
    """A job id to look up: an integer the stores can hold (SQLite's driver overflowed on a
    larger one that PostgreSQL simply did not find)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not -INT64 <= job_id <= INT64:
        raise InvalidInputError(
            f"job_id must be an integer from Memory.jobs(), got {job_id!r}", field="job_id"
        )
    return job_id
