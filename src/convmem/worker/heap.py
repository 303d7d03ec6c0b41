"""Give freed heap memory back to the operating system, every so often.

A busy server frees most of what a request allocates, but glibc keeps freed memory in
its per-thread arenas instead of returning it: under steady load with a constant data set
RSS rose 122 MB in two minutes while the Python heap (tracemalloc) stayed flat, and one
``malloc_trim(0)`` gave back 97 MB of it; once the load stops, the periodic trim returns
what is no longer used (bench/README.md, the HTTP soak). Elsewhere (musl, macOS) it is a
no-op.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["HeapTrimmer", "freeze_startup_heap", "trim_heap"]

logger = logging.getLogger(__name__)


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        function = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def freeze_startup_heap() -> int:
    """Collect once, then move every object alive now out of the garbage collector's sight
    (``gc.freeze``); returns how many. For a long-running process that convmem owns
    (``convmem serve``, ``convmem mcp``), once it has started: its modules, classes and
    functions (75k objects in the HTTP service) live as long as the process, yet every
    full collection walked them. In the service at 100k chunks a full collection took 61 ms
    and the slowest of 300 searches 86 ms; frozen, they took 7-12 ms and 39 ms
    (bench/README.md, stop 36). What the process makes later is collected as before; a
    library never calls this for its host."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def trim_heap() -> bool:
    """Return free heap pages of every arena to the OS. False where there is no glibc."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class HeapTrimmer:
    """A daemon thread that calls :func:`trim_heap` every ``interval_seconds``."""

    def __init__(self, *, interval_seconds: float = 30.0) -> None:
        if interval_seconds < 0:
            raise ValueError(
                f"interval_seconds must be >= 0 (0 turns trimming off), not {interval_seconds}"
            )
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.interval_seconds or _MALLOC_TRIM is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="convmem-heap-trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            began = time.perf_counter()
            trim_heap()
            logger.debug("heap trimmed in %.1f ms", (time.perf_counter() - began) * 1000)
