"""Stores opened by URL. The embedded default is SQLite (one file, WAL)."""

from __future__ import annotations

from pathlib import Path

from convmem.errors import InvalidInputError
from convmem.store.base import SQLStore
from convmem.store.filters import Condition, FilterSpec, matches, parse_filters, to_sql
from convmem.store.sqlite import SQLiteStore

__all__ = [
    "Condition",
    "FilterSpec",
    "SQLStore",
    "SQLiteStore",
    "default_store_path",
    "matches",
    "open_store",
    "parse_filters",
    "to_sql",
]


def default_store_path() -> Path:
    """``memory.db`` in the user data directory (never a temporary folder)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("convmem", appauthor=False)) / "memory.db"


def open_store(url: str | None = None, *, durability: str = "full") -> SQLStore:
    """Open a store by URL: ``sqlite:///abs/path.db``, ``sqlite:///./rel.db``, a file path,
    or ``postgresql://user@host:port/db[?schema=name]`` (needs ``convmem[postgres]``).

    Raises:
        InvalidInputError: the URL's scheme is not supported.
    """
    if url is None:
        return SQLiteStore(default_store_path(), durability=durability)
    if url.startswith("sqlite:///"):
        return SQLiteStore(url.removeprefix("sqlite:///") or "memory.db", durability=durability)
    if url.startswith("sqlite://"):
        return SQLiteStore(url.removeprefix("sqlite://"), durability=durability)
    if "://" not in url:
        return SQLiteStore(url, durability=durability)
    scheme = url.split("://", 1)[0]
    if scheme in ("postgresql", "postgres"):
        from convmem.store.citus import open_postgres

        return open_postgres(url)
    raise InvalidInputError(
        f"Unsupported store URL scheme {scheme!r}; use sqlite:///path/to/memory.db or "
        "postgresql://user@host:5432/db",
        field="url",
    )
