"""The slice of DB-API that the store uses, typed once for both backends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "StoreConnections"]


class Cursor(Protocol):
    """What the store reads off a cursor (sqlite3 and psycopg cursors both have it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection taking ``?`` parameters (PostgreSQL's is wrapped to take them)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> Cursor: ...


class StoreConnections:
    """What the table mixins need from a store: a connection for reads, a transaction."""

    def _db(self) -> Connection:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _lock_conversation(self, conn: Connection, tenant: str, conversation_id: str) -> None:
        """Serialise writers of one conversation (SQLite already has one writer at a time)."""
