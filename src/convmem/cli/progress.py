"""A tiny progress renderer for long commands: one self-overwriting line on stderr.

Drawn only when stderr is a terminal and ``--json`` is off, so pipes, logs and scripts see
nothing. A known total gives a bar; an unknown one gives a count or, around a single
blocking call, a spinner with the elapsed time.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]

_WIDTH = 28
_SPIN = "|/-\\"


class Progress:
    """``with Progress("indexing", total=n, enabled=...) as bar: bar.update(done)``."""

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        enabled: bool,
        stream: TextIO | None = None,
        spin: bool = False,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True) if spin else None

    @staticmethod
    def for_terminal(
        label: str, *, quiet: bool, total: int | None = None, spin: bool = False
    ) -> Progress:
        """A renderer that draws only on an interactive stderr and when not ``quiet``."""
        return Progress(label, total=total, enabled=not quiet and sys.stderr.isatty(), spin=spin)

    def __enter__(self) -> Progress:
        if self.enabled and self._ticker is not None:
            self._ticker.start()
        self._draw(force=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker.is_alive():
            self._ticker.join()
        if self.enabled:
            self._draw(force=True)
            self._stream.write("\n")
            self._stream.flush()

    def update(self, done: int) -> None:
        self.done = done
        self._draw()

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def line(self) -> str:
        """The text of the current state (what the terminal shows)."""
        elapsed = time.monotonic() - self._started
        if self.total:
            share = min(1.0, self.done / self.total)
            filled = int(share * _WIDTH)
            bar = "#" * filled + "." * (_WIDTH - filled)
            return f"{self.label} [{bar}] {self.done}/{self.total} {share:4.0%} {elapsed:5.1f}s"
        if self._ticker is not None:
            return f"{self.label} {_SPIN[int(elapsed * 8) % len(_SPIN)]} {elapsed:5.1f}s"
        return f"{self.label} {self.done} {elapsed:5.1f}s"

    def _tick(self) -> None:
        while not self._stop.wait(0.125):
            self._draw(force=True)

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        self._stream.write("\r\x1b[2K" + self.line())
        self._stream.flush()
