"""Stores opened by URL. The embedded default is SQLite (one file, WAL)."""

from __future__ import annotations

from pathlib import Path

from convmem.clock import Clock
from convmem.errors import InvalidInputError
from convmem.store.base import SQLStore, Store
from convmem.store.contract import Backend
from convmem.store.filters import Condition, FilterSpec, matches, parse_filters, to_sql
from convmem.store.records import (
    ClaimedJob,
    ConversationState,
    IndexBatch,
    IndexedChunk,
    MarkRow,
    MarkWrite,
    StoredTurn,
    matrix_rows,
    text_digest,
    worker_identity,
)
from convmem.store.sqlite import SQLiteStore

__all__ = [
    "Backend",
    "ClaimedJob",
    "Condition",
    "ConversationState",
    "FilterSpec",
    "IndexBatch",
    "IndexedChunk",
    "MarkRow",
    "MarkWrite",
    "SQLStore",
    "SQLiteStore",
    "Store",
    "StoredTurn",
    "default_store_path",
    "matches",
    "matrix_rows",
    "open_store",
    "parse_filters",
    "sqlite_path",
    "text_digest",
    "to_sql",
    "worker_identity",
]


def default_store_path() -> Path:
    """``memory.db`` in the user data directory (never a temporary folder)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("convmem", appauthor=False)) / "memory.db"


def sqlite_path(url: str | None) -> Path | None:
    """The file a store URL opens (:func:`open_store`'s reading), or None for a server."""
    if url is None:
        return default_store_path()
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///") or "memory.db")
    if url.startswith("sqlite://"):
        return Path(url.removeprefix("sqlite://"))
    if "://" not in url:
        return Path(url)
    return None


def open_store(
    url: str | None = None, *, durability: str = "full", clock: Clock | None = None
) -> SQLStore:
    """Open a store by URL: ``sqlite:///abs/path.db``, ``sqlite:///./rel.db``, a file path,
    or ``postgresql://user@host:port/db[?schema=name]`` (needs ``convmem[postgres]``; a
    database with the ``citus`` extension opens as a distributed :class:`CitusStore`).

    Raises:
        InvalidInputError: the URL's scheme is not supported.
    """
    path = sqlite_path(url)
    if path is not None:
        return SQLiteStore(path, durability=durability, clock=clock)
    assert url is not None  # sqlite_path(None) is the default file
    scheme = url.split("://", 1)[0]
    if scheme in ("postgresql", "postgres"):
        from convmem.store.citus import open_postgres

        return open_postgres(url, clock=clock)
    raise InvalidInputError(
        f"Unsupported store URL scheme {scheme!r}; use sqlite:///path/to/memory.db or "
        "postgresql://user@host:5432/db",
        field="url",
    )
