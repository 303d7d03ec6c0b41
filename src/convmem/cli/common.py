"""What every command shares: opening the Memory from settings, JSON output, waiting for
the index with a progress bar."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from convmem.cli.progress import Progress
from convmem.errors import FlushTimeoutError
from convmem.settings import Settings

if TYPE_CHECKING:
    from convmem import Memory

__all__ = ["drain_index", "open_memory", "print_json", "quiet", "settings_of"]


def settings_of(args: argparse.Namespace) -> Settings:
    settings: Settings = args.settings
    return settings


def quiet(args: argparse.Namespace) -> bool:
    """True when output is for machines (``--json``): no progress bars."""
    return settings_of(args).json_output


def open_memory(
    args: argparse.Namespace,
    *,
    workers: int = 0,
    allow_model_change: bool = False,
    chunking: Any = None,
) -> Memory:
    from convmem import Memory
    from convmem.embed import resolve_embedder
    from convmem.governance import resolve_marker

    settings = settings_of(args)
    return Memory.open(
        settings.store,
        embedder=resolve_embedder(settings.embedder) if settings.embedder else None,
        tenant=settings.tenant,
        workers=workers,
        allow_model_change=allow_model_change,
        chunking=chunking,
        marker=resolve_marker(
            settings.marker,
            llm_url=settings.llm_url,
            llm_model=settings.llm_model,
            llm_key=settings.llm_key,
        ),
        policy=settings.policy,
    )


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def drain_index(memory: Memory, args: argparse.Namespace, *, timeout: float) -> int:
    """Run this tenant's index jobs until none is pending, drawing a bar on a terminal.

    Returns the number of failed jobs.

    Raises:
        FlushTimeoutError: jobs were still pending after ``timeout`` seconds.
    """
    pending, failed = memory.backlog()
    deadline = time.monotonic() + timeout
    with Progress.for_terminal("indexing", quiet=quiet(args), total=pending) as bar:
        while True:
            try:
                failed = memory.flush(
                    timeout=min(0.5, max(0.0, deadline - time.monotonic()))
                ).failed
                bar.update(bar.total or 0)
                return failed
            except FlushTimeoutError:
                left, failed = memory.backlog()
                bar.update(max(0, (bar.total or 0) - left))
                if time.monotonic() >= deadline:
                    raise FlushTimeoutError(
                        f"{left} index jobs still pending after {timeout:g}s ({failed} "
                        "failed); raise --timeout, or run 'convmem jobs --status failed'"
                    ) from None
