"""The slice of DB-API that the store uses, typed once for both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Connection", "Cursor"]


class Cursor(Protocol):
    """What the store reads off a cursor (sqlite3 and psycopg cursors both have it)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection taking ``?`` parameters (PostgreSQL's is wrapped to take them)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> Cursor: ...
