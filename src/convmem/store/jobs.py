"""Index jobs: claiming (never two workers on one conversation), leases, retries with
backoff, and the backlog."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from convmem.errors import NotFoundError
from convmem.models import JobInfo
from convmem.store.contract import Backend
from convmem.store.dbapi import Connection
from convmem.store.records import ClaimedJob, pid_alive

__all__ = ["JobTables"]

logger = logging.getLogger(__name__)

JOB_STATUSES = ("pending", "running", "done", "failed")


class JobTables(Backend):
    """Index jobs: claims with leases, failures with backoff, backlog."""

    def recover_dead_claims(self) -> int:
        """Release jobs claimed by processes on this host that no longer exist."""
        host = socket.gethostname()
        released = 0
        with self._write() as conn:
            for tenant, job_id, claimed_by in conn.execute(
                "SELECT tenant, job_id, claimed_by FROM jobs WHERE status='running'"
            ).fetchall():
                parts = (claimed_by or "").split(":")
                dead = (
                    len(parts) >= 2
                    and parts[0] == host
                    and parts[1].isdigit()
                    and not pid_alive(int(parts[1]))
                )
                if dead:
                    conn.execute(
                        "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL "
                        "WHERE tenant=? AND job_id=?",
                        (tenant, job_id),
                    )
                    released += 1
        if released:
            logger.info("released %d jobs of dead workers", released)
        return released

    #: Ready jobs whose conversation no other worker holds a live claim on.
    READY_JOBS = """
        SELECT job_id, tenant, conversation_id, min_seq, max_seq, attempts FROM jobs AS j
        WHERE ((status = 'pending' AND next_retry_at <= ?)
               OR (status = 'running' AND lease_until < ?))
          AND NOT EXISTS (
              SELECT 1 FROM jobs AS o
              WHERE o.tenant = j.tenant AND o.conversation_id = j.conversation_id
                AND o.status = 'running' AND o.lease_until >= ?
                AND o.claimed_by <> ?)
        ORDER BY job_id LIMIT ?
    """

    def _claimable(
        self, conn: Connection, rows: list[Any], worker_id: str, now: float
    ) -> list[Any]:
        """The candidate rows this worker may take (SQLite: all; one writer at a time)."""
        return rows

    def claim_jobs(self, worker_id: str, *, limit: int, lease_seconds: float) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs, never two workers on one conversation."""
        now = self.now()
        with self._write() as conn:
            rows = conn.execute(self.READY_JOBS, (now, now, now, worker_id, limit)).fetchall()
            rows = self._claimable(conn, rows, worker_id, now)
            if rows:
                # the tenant routes each update to one shard on Citus
                conn.executemany(
                    "UPDATE jobs SET status='running', claimed_by=?, lease_until=?, updated_at=? "
                    "WHERE tenant=? AND job_id=?",
                    [(worker_id, now + lease_seconds, now, row[1], row[0]) for row in rows],
                )
        return [ClaimedJob(*row) for row in rows]

    def fail_jobs(
        self,
        jobs: Sequence[tuple[str, int]],
        *,
        error_code: str,
        message: str,
        base_delay: float,
        max_delay: float,
        max_attempts: int,
        worker_id: str | None = None,
    ) -> None:
        """Record a failure of ``(tenant, job_id)`` jobs; retry with exponential backoff, or
        mark failed after max_attempts. (The tenant routes each statement to one shard.)
        ``worker_id``: only the jobs that worker still holds (another may have taken a job
        whose lease ran out)."""
        now = self.now()
        held = "" if worker_id is None else " AND status='running' AND claimed_by=?"
        mine: tuple[str, ...] = () if worker_id is None else (worker_id,)
        with self._write() as conn:
            for tenant, job_id in jobs:
                row = conn.execute(
                    "SELECT attempts FROM jobs WHERE tenant=? AND job_id=?" + held,
                    (tenant, job_id, *mine),
                ).fetchone()
                if row is None:
                    continue
                attempts = int(row[0]) + 1
                delay = min(max_delay, base_delay * (2 ** (attempts - 1)))
                status = "failed" if attempts >= max_attempts else "pending"
                conn.execute(
                    "UPDATE jobs SET status=?, attempts=?, error_code=?, error_message=?, "
                    "next_retry_at=?, claimed_by=NULL, lease_until=NULL, updated_at=? "
                    "WHERE tenant=? AND job_id=?",
                    (status, attempts, error_code, message[:500], now + delay, now, tenant, job_id),
                )

    def release_jobs(
        self, jobs: Sequence[tuple[str, int]], *, worker_id: str | None = None
    ) -> None:
        """Hand claimed ``(tenant, job_id)`` jobs back untouched (shutdown, or a lost race to
        run again at once); ``worker_id``: only those that worker still holds."""
        held = "" if worker_id is None else " AND claimed_by=?"
        mine: tuple[str, ...] = () if worker_id is None else (worker_id,)
        with self._write() as conn:
            conn.executemany(
                "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL, "
                "next_retry_at=? WHERE tenant=? AND job_id=? AND status='running'" + held,
                [(self.now(), tenant, job_id, *mine) for tenant, job_id in jobs],
            )

    def renew_jobs(
        self, worker_id: str, jobs: Sequence[tuple[str, int]], *, lease_seconds: float
    ) -> set[tuple[str, int]]:
        """Extend the lease of the ``(tenant, job_id)`` jobs ``worker_id`` still holds to
        ``lease_seconds`` from now; returns those (a job missing was finished, released,
        or taken by another worker after its lease ran out)."""
        now = self.now()
        held: set[tuple[str, int]] = set()
        with self._write() as conn:
            for tenant, job_id in jobs:  # the tenant routes each update to one shard
                cursor = conn.execute(
                    "UPDATE jobs SET lease_until=? WHERE tenant=? AND job_id=? AND "
                    "status='running' AND claimed_by=?",
                    (now + lease_seconds, tenant, job_id, worker_id),
                )
                if cursor.rowcount:
                    held.add((tenant, job_id))
        return held

    def release_worker(self, worker_prefix: str) -> int:
        """Release every job a worker (by identity prefix: one handle's workers are
        ``host:pid:handle:``) still holds."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status='pending', claimed_by=NULL, lease_until=NULL "
                # a prefix compared as it is (LIKE ignored case on SQLite, not on PostgreSQL)
                "WHERE status='running' AND substr(claimed_by, 1, ?) = ?",
                (len(worker_prefix), worker_prefix),
            )
            return cursor.rowcount

    def _job_info(self, row: Sequence[Any]) -> JobInfo:
        def stamp(value: float | None) -> datetime | None:
            return None if value is None else datetime.fromtimestamp(value, UTC)

        return JobInfo(
            job_id=row[0],
            conversation_id=row[1],
            status=row[2],
            attempts=row[3],
            error_code=row[4],
            error_message=row[5],
            next_retry_at=stamp(row[6]) if row[2] in ("pending", "failed") and row[3] else None,
            created_at=datetime.fromtimestamp(row[7], UTC),
            updated_at=datetime.fromtimestamp(row[8], UTC),
        )

    _JOB_COLUMNS = (
        "job_id, conversation_id, status, attempts, error_code, error_message, next_retry_at, "
        "created_at, updated_at"
    )

    def job(self, tenant: str, job_id: int) -> JobInfo:
        row = (
            self._db()
            .execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE tenant=? AND job_id=?",
                (tenant, job_id),
            )
            .fetchone()
        )
        if row is None:
            raise NotFoundError(f"No job {job_id} in tenant {tenant!r}")
        return self._job_info(row)

    def jobs(self, tenant: str, *, status: str | None = None, limit: int = 100) -> list[JobInfo]:
        sql = f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE tenant=?"
        params: list[Any] = [tenant]
        if status is not None:
            sql += " AND status=?"
            params.append(status)
        sql += " ORDER BY job_id DESC LIMIT ?"
        params.append(limit)
        return [self._job_info(row) for row in self._db().execute(sql, params)]

    def retry_job(self, tenant: str, job_id: int) -> JobInfo:
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET status='pending', next_retry_at=?, updated_at=? "
                "WHERE tenant=? AND job_id=? AND status IN ('failed', 'pending')",
                (self.now(), self.now(), tenant, job_id),
            )
            if cursor.rowcount == 0:
                exists = conn.execute(
                    "SELECT status FROM jobs WHERE tenant=? AND job_id=?", (tenant, job_id)
                ).fetchone()
                if exists is None:
                    raise NotFoundError(f"No job {job_id} in tenant {tenant!r}")
        return self.job(tenant, job_id)

    def backlog(
        self, tenant: str | None = None, conversation_id: str | None = None
    ) -> tuple[int, int]:
        """``(pending_or_running, failed)`` job counts, for one tenant (or one of its
        conversations) or all."""
        sql = "SELECT status, count(*) FROM jobs WHERE status IN ('pending','running','failed')"
        params: list[Any] = []
        if tenant is not None:
            sql += " AND tenant=?"
            params.append(tenant)
            if conversation_id is not None:
                sql += " AND conversation_id=?"
                params.append(conversation_id)
        counts = dict(self._db().execute(sql + " GROUP BY status", params).fetchall())
        return counts.get("pending", 0) + counts.get("running", 0), counts.get("failed", 0)

    def job_counts(self, tenant: str | None = None) -> dict[str, int]:
        """Index jobs by status (``pending``, ``running``, ``done``, ``failed``), for one
        tenant or all: the work of every worker process on this store, not only this one's."""
        sql = "SELECT status, count(*) FROM jobs"
        params: list[Any] = []
        if tenant is not None:
            sql += " WHERE tenant=?"
            params.append(tenant)
        counts = dict(self._db().execute(sql + " GROUP BY status", params).fetchall())
        return {status: int(counts.get(status, 0)) for status in JOB_STATUSES}

    def backlog_by_conversation(self, tenant: str) -> dict[str, int]:
        return dict(
            self._db()
            .execute(
                "SELECT conversation_id, count(*) FROM jobs WHERE tenant=? AND status IN "
                "('pending','running') GROUP BY conversation_id",
                (tenant,),
            )
            .fetchall()
        )
