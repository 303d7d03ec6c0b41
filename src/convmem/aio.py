"""An ``asyncio`` face on :class:`~convmem.Memory`: the same methods as coroutines, each run
in a worker thread (the core is synchronous: SQLite, the embedder, the worker).

>>> memory = AsyncMemory(Memory.open("sqlite:///m.db"))  # doctest: +SKIP
>>> hits = await memory.search("护照哪天到期")              # doctest: +SKIP

One generic wrapper, not a hand-copied twin: every public method of ``Memory`` listed in
:data:`ASYNC_METHODS` is offloaded the same way.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

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


class AsyncMemory:
    """Coroutines over one ``Memory`` (its tenant, store and workers)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name not in ASYNC_METHODS:
            raise AttributeError(f"AsyncMemory has no {name!r}; use .memory.{name} for sync calls")
        method = getattr(self.memory, name)

        @functools.wraps(method)
        async def offloaded(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return offloaded

    async def aclose(self) -> None:
        await asyncio.to_thread(self.memory.close)
