"""An ``asyncio`` face on :class:`~convmem.Memory`: the same methods as coroutines, each run
in a worker thread (the core is synchronous: SQLite, the embedder, the worker).

>>> memory = AsyncMemory(Memory.open("sqlite:///m.db"))  # doctest: +SKIP
>>> hits = await memory.search("护照哪天到期")              # doctest: +SKIP

One generic wrapper, not a hand-copied twin: every public method of ``Memory`` listed in
:data:`ASYNC_METHODS` is offloaded the same way.

Cancelling a task does not stop its worker thread, so :meth:`AsyncMemory.aclose` counts
calls by their threads: it refuses new calls, waits (without blocking the event loop) until
every thread it started has left the store, and only then closes it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from convmem.errors import StoreError
from convmem.memory import Memory

__all__ = ["ASYNC_METHODS", "AsyncMemory"]

ASYNC_METHODS = frozenset(
    {
        "add_turns",
        "flush",
        "search",
        "retrieve",
        "delete",
        "update",
        "upsert_chunks",
        "notes",
        "update_note",
        "recent_turns",
        "stats",
    }
)


class _Call:
    """One offloaded call: whether its thread started it or its caller gave up first."""

    __slots__ = ("abandoned", "started")

    def __init__(self) -> None:
        self.started = False
        self.abandoned = False


class AsyncMemory:
    """Coroutines over one ``Memory`` (its tenant, store and workers)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._in_flight = 0  # calls whose thread may still use the store
        self._closing = False
        self._drained: list[concurrent.futures.Future[None]] = []

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name not in ASYNC_METHODS:
            raise AttributeError(f"AsyncMemory has no {name!r}; use .memory.{name} for sync calls")
        method = getattr(self.memory, name)

        @functools.wraps(method)
        async def offloaded(*args: Any, **kwargs: Any) -> Any:
            call = self._begin()
            try:
                return await asyncio.to_thread(self._run, call, method, args, kwargs)
            except BaseException:
                # Cancelled (or never dispatched) before the thread took the call: the
                # thread will not run it, so it is no longer in flight.
                with self._lock:
                    if not call.started and not call.abandoned:
                        call.abandoned = True
                        self._done_locked()
                raise

        return offloaded

    def _begin(self) -> _Call:
        with self._lock:
            if self._closing:
                raise StoreError(
                    "AsyncMemory is closed (aclose was called); open it again with Memory.open"
                )
            self._in_flight += 1
        return _Call()

    def _run(
        self, call: _Call, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """In the worker thread: the call counts as in flight until this thread leaves it."""
        with self._lock:
            if call.abandoned:
                return None  # its caller was cancelled before the thread got here
            call.started = True
        try:
            return method(*args, **kwargs)
        finally:
            with self._lock:
                self._done_locked()

    def _done_locked(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            waiters, self._drained = self._drained, []
            for waiter in waiters:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    waiter.set_result(None)

    async def aclose(self) -> None:
        """Refuse new calls, wait for every call's thread to finish (cancelled ones too:
        cancelling a task does not stop its thread), then close the ``Memory``."""
        with self._lock:
            self._closing = True
            drained: concurrent.futures.Future[None] | None = None
            if self._in_flight:
                drained = concurrent.futures.Future()
                self._drained.append(drained)
        if drained is not None:
            await asyncio.wrap_future(drained)
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._close_lock:  # two concurrent aclose calls close once
            self.memory.close()
