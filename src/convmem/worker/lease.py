"""Lease renewal for index passes under way.

A claim holds its jobs until ``lease_until``; after that any worker may take them. A pass
slower than the lease (a slow model, a long conversation, a stalled machine) would be
taken and run a second time. While passes run, one thread per indexer extends their
claims every third of the lease, and a pass confirms its claims before it writes: a job
another worker took in the meantime (the process stalled past its lease) is left to that
worker.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from convmem.store import ClaimedJob, SQLStore

__all__ = ["Lease", "LeaseKeeper"]

logger = logging.getLogger(__name__)

#: How long the renewal thread waits for the next pass before it ends.
LINGER_SECONDS = 5.0

_live_keepers: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    # as the worker pools do: no renewal may be inside a database call at teardown
    for keeper in list(_live_keepers):
        keeper.stop(timeout=10)


class Lease:
    """The claims of one pass: its jobs, until when no other worker can take them (the
    store's clock) and which it has lost."""

    def __init__(self, worker_id: str, jobs: Sequence[ClaimedJob], *, until: float, due: float):
        self.worker_id = worker_id
        self.jobs = [(job.tenant, job.job_id) for job in jobs]
        self.until = until
        #: ``time.monotonic()`` of the next renewal.
        self.due = due
        self.lost: set[tuple[str, int]] = set()


class LeaseKeeper:
    """Extends the leases of the passes under way from one thread, started with the
    first pass and ended when no pass has run for a while (or at :meth:`stop`)."""

    def __init__(self, store: SQLStore, *, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self._linger = min(self.interval, LINGER_SECONDS)
        self._cond = threading.Condition()
        self._leases: list[Lease] = []
        self._thread: threading.Thread | None = None
        self._stopped = False

    @contextmanager
    def hold(self, worker_id: str, jobs: Sequence[ClaimedJob], *, since: float) -> Iterator[Lease]:
        """Keep the claims of ``jobs`` (made by ``worker_id`` at store time ``since`` or
        later) for as long as the block runs."""
        lease = Lease(
            worker_id, jobs, until=since + self.lease_seconds, due=time.monotonic() + self.interval
        )
        with self._cond:
            self._leases.append(lease)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="convmem-lease", daemon=True)
                self._thread.start()
                _live_keepers.add(self)
            self._cond.notify_all()
        try:
            yield lease
        finally:
            with self._cond:
                self._leases.remove(lease)

    def confirm(self, lease: Lease) -> set[tuple[str, int]]:
        """The ``(tenant, job_id)`` jobs the pass still holds, renewed first when less
        than a third of the lease is left (so none runs out before the pass writes)."""
        if self.store.now() >= lease.until - self.interval:
            self._renew(lease)
        with self._cond:
            return set(lease.jobs) - lease.lost

    def stop(self, timeout: float = 10.0) -> None:
        """End the renewal thread (the handle is closing; its passes have ended)."""
        with self._cond:
            self._stopped = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)
        _live_keepers.discard(self)

    def _renew(self, lease: Lease) -> None:
        with self._cond:
            lease.due = time.monotonic() + self.interval
            jobs = [job for job in lease.jobs if job not in lease.lost]
        if not jobs:
            return
        since = self.store.now()
        held = self.store.renew_jobs(lease.worker_id, jobs, lease_seconds=self.lease_seconds)
        lost = set(jobs) - held
        with self._cond:
            lease.until = max(lease.until, since + self.lease_seconds)
            lease.lost |= lost
        if lost:
            logger.warning(
                "index jobs %s were taken over by another worker (this pass outlived its "
                "%.0f s lease); it leaves them to that worker",
                sorted(job_id for _, job_id in lost),
                self.lease_seconds,
            )

    def _run(self) -> None:
        idle_since: float | None = None
        while True:
            with self._cond:
                now = time.monotonic()
                if self._leases:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                if self._stopped or (idle_since is not None and now - idle_since >= self._linger):
                    self._thread = None
                    return
                if idle_since is not None:
                    self._cond.wait(self._linger - (now - idle_since))
                    continue
                due = [lease for lease in self._leases if lease.due <= now]
                if not due:
                    self._cond.wait(min(lease.due for lease in self._leases) - now)
                    continue
            for lease in due:
                try:
                    self._renew(lease)
                except Exception:  # the pass confirms its claims again before it writes
                    logger.warning("renewing the lease of index jobs failed", exc_info=True)
