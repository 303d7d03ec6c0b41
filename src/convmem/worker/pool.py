"""Index worker threads inside the process: a loop per thread that runs pending jobs and,
every ``sweep_seconds``, marks expired memory; stopped cleanly at close or interpreter exit."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref

from convmem.clock import Clock
from convmem.worker.indexer import Indexer

__all__ = ["WorkerPool"]

logger = logging.getLogger(__name__)

_live_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    # Threads still inside a native call (an embedding, a database read) when the
    # interpreter tears down abort the process; stop them before that.
    for pool in list(_live_pools):
        pool.stop(timeout=10)


class WorkerPool:
    """``threads`` worker threads over one :class:`Indexer`."""

    def __init__(self, indexer: Indexer, *, clock: Clock, sweep_seconds: float = 60.0) -> None:
        self.indexer = indexer
        self.clock = clock
        self.sweep_seconds = sweep_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_sweep = 0.0

    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stop.is_set()

    def start(self, threads: int) -> None:
        for index in range(threads):
            thread = threading.Thread(
                target=self._loop, name=f"convmem-worker-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)  # only started threads (stop joins them)
        if threads:
            _live_pools.add(self)

    def wake(self) -> None:
        """Tell idle workers there is new work."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the threads after their current pass; in-flight jobs finish or are released."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=timeout)
        _live_pools.discard(self)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._maybe_sweep()
            try:
                worked = self.indexer.run_pending()
            except Exception:  # keep the worker alive; the failure is on the jobs
                logger.exception("index worker pass failed")
                worked = 0
            if not worked:
                self._wake.wait(timeout=0.25)
                self._wake.clear()

    def _maybe_sweep(self) -> None:
        now = self.clock.now()
        if not self.sweep_seconds or now - self._last_sweep < self.sweep_seconds:
            return
        self._last_sweep = now
        try:
            self.indexer.store.sweep_expired(now)
        except Exception:  # the next pass tries again
            logger.exception("expiry sweep failed")
