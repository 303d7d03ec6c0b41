"""What every command shares: opening the Memory from settings, JSON output, waiting for
the index with a progress bar."""

from __future__ import annotations

import argparse
import errno
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from convmem.cli.progress import Progress
from convmem.errors import FlushTimeoutError, InvalidInputError
from convmem.settings import Settings
from convmem.text import read_utf8

if TYPE_CHECKING:
    from convmem import Memory

__all__ = [
    "bounded_float",
    "bounded_int",
    "check_port_free",
    "drain_index",
    "open_memory",
    "print_json",
    "quiet",
    "read_json_file",
    "read_text_file",
    "seconds",
    "settings_of",
]


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
    existing: bool = False,
) -> Memory:
    """The memory the command's settings name. ``existing``: a command that reads or
    maintains a store refuses to create one (a mistyped ``--store`` made an empty store
    and answered "no hits")."""
    from convmem import Memory
    from convmem.embed import resolve_embedder
    from convmem.governance import resolve_marker
    from convmem.store import sqlite_path

    settings = settings_of(args)
    embedder = resolve_embedder(settings.embedder) if settings.embedder else None
    marker = resolve_marker(
        settings.marker,
        llm_url=settings.llm_url,
        llm_model=settings.llm_model,
        llm_key=settings.llm_key,
    )
    path = sqlite_path(settings.store)
    if existing and path is not None and not path.exists():
        raise InvalidInputError(
            f"no store at {path}; check --store (or CONVMEM_STORE): `convmem ingest` or "
            "`convmem demo` creates one",
            field="--store",
        )
    return Memory.open(
        settings.store,
        embedder=embedder,
        tenant=settings.tenant,
        workers=workers,
        allow_model_change=allow_model_change,
        chunking=chunking,
        marker=marker,
        policy=settings.policy,
    )


def read_text_file(name: str, *, field: str) -> str:
    """The text of a UTF-8 file given on the command line (a byte order mark is accepted).

    Raises:
        InvalidInputError: the path holds a NUL, or the file is not UTF-8 (naming ``field``).
        OSError: the file is missing or unreadable.
    """
    if "\x00" in name:
        raise InvalidInputError("the file path holds a NUL character; check it", field=field)
    return read_utf8(Path(name), field=field, name=name)


def read_json_file(name: str, *, field: str) -> Any:
    """The JSON value of a UTF-8 file given on the command line.

    Raises:
        InvalidInputError: the file is not UTF-8 or not JSON (naming the file and ``field``).
    """
    try:
        return json.loads(read_text_file(name, field=field))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{name} is not valid JSON ({exc}); fix the file", field=field
        ) from None


def check_port_free(host: str, port: int, *, option: str) -> None:
    """Refuse, before anything starts, a port this process cannot listen on.

    Binds and releases a socket as the server will (``SO_REUSEADDR``, as uvicorn), so a
    port in use is one clear line naming ``option`` instead of the server's own exit.

    Raises:
        InvalidInputError: the port is in use, or ``host:port`` cannot be bound.
    """
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInputError(
                f"port {port} on {host} is in use (another server?); stop it or pick another "
                f"with {option} PORT",
                field=option,
            ) from None
        raise InvalidInputError(
            f"cannot listen on {host} port {port}: {exc.strerror or exc}; pick another "
            f"{option}" + (" or --host" if option == "--port" else ""),
            field=option,
        ) from None


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def drain_index(
    memory: Memory, args: argparse.Namespace, *, timeout: float, conversation_id: str | None = None
) -> int:
    """Run this tenant's index jobs until none is pending (of ``conversation_id`` only,
    when given: other writers' new turns are not this command's to wait for), drawing a
    bar on a terminal.

    Returns the number of failed jobs.

    Raises:
        FlushTimeoutError: jobs were still pending after ``timeout`` seconds.
    """
    pending, failed = memory.backlog(conversation_id=conversation_id)
    deadline = time.monotonic() + timeout
    with Progress.for_terminal("indexing", quiet=quiet(args), total=pending) as bar:
        while True:
            try:
                failed = memory.flush(
                    timeout=min(0.5, max(0.0, deadline - time.monotonic())),
                    conversation_id=conversation_id,
                ).failed
                bar.update(bar.total or 0)
                return failed
            except FlushTimeoutError:
                left, failed = memory.backlog(conversation_id=conversation_id)
                bar.update(max(0, (bar.total or 0) - left))
                if time.monotonic() >= deadline:
                    raise FlushTimeoutError(
                        f"{left} index jobs still pending after {timeout:g}s ({failed} "
                        "failed); raise --timeout, or run 'convmem jobs --status failed'"
                    ) from None


N = TypeVar("N", int, float)


def _bounded(kind: Callable[[str], N], what: str, low: N, high: N) -> Callable[[str], N]:
    """An argparse type: a ``kind`` in ``[low, high]``, else a usage error naming the range."""

    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    parse.__name__ = "int" if kind is int else "number"
    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number in ``[low, high]``."""
    return _bounded(float, "a number", low, high)


def bounded_int(low: int, high: int = 2**31 - 1) -> Callable[[str], int]:
    """An argparse type: an int in ``[low, high]``."""
    return _bounded(int, "a whole number", low, high)


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds (at most a week)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..604800 seconds")
    return value
