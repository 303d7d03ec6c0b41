"""An injectable clock: TTLs, expiry, sweeps and leases read time through it, so tests
move time instead of sleeping."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
