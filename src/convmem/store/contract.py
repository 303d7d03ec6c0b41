"""The store contract, in one place.

- :class:`Backend` is what a new SQL backend implements: connections, the lexical index,
  vector search and a few hooks. Its abstract methods are the whole list; Python refuses
  to create a backend that lacks one. Everything else (the queries) is shared, written
  once in :class:`~convmem.store.base.SQLStore`'s modules, whose public methods are what the
  layers above call (``Store``). The conformance suite checks that each backend implements
  every hook and passes the same behavioural cases.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from convmem.clock import SYSTEM_CLOCK, Clock
from convmem.errors import EmbeddingMismatchError
from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec
from convmem.store.records import next_change

__all__ = ["Backend"]


class Backend(ABC):
    """The hooks a SQL backend provides; the shared queries call only these."""

    #: SQL of the larger of two values (``max`` in SQLite, ``greatest`` in PostgreSQL).
    GREATEST = "max"
    #: SQL that sets ``deleted`` in the JSON metadata column of a tombstoned chunk.
    TOMBSTONE_METADATA = "json_set(metadata, '$.deleted', json('true'))"
    #: How a vector parameter is written in SQL.
    VECTOR_PARAM = "?"
    #: Keeps SQLite's planner off the tenant index when looking up a handful of rowids.
    NOT_INDEXED = ""
    #: Which SQL the filters compile to.
    DIALECT = "sqlite"
    #: Follows a text column in an ORDER BY so that it sorts by code point, as SQLite's
    #: BINARY does: a PostgreSQL database created with a locale sorts 'alice' before 'Bob'.
    CODE_POINTS = ""
    #: True when the backend answers vector queries from its own index (no ANN sidecar).
    native_vector_index = False
    #: Where TTLs, expiry, leases and timestamps read the time.
    clock: Clock = SYSTEM_CLOCK

    def now(self) -> float:
        """Seconds since the epoch, from the store's clock."""
        return self.clock.now()

    # -- connections -------------------------------------------------------------------

    @property
    @abstractmethod
    def url(self) -> str:
        """The store's URL, with any password redacted."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _db(self) -> Connection:
        """A connection for one-statement reads."""

    @abstractmethod
    def _write(self) -> AbstractContextManager[Connection]:
        """One transaction; commits on exit, rolls back on an exception."""

    def _lock_conversation(self, conn: Connection, tenant: str, conversation_id: str) -> None:  # noqa: B027 (an optional hook)
        """Serialise writers of one conversation (SQLite already has one writer at a time)."""

    def _lock_schema(self, conn: Connection) -> None:  # noqa: B027 (an optional hook)
        """Keep two processes from migrating at once (SQLite's write lock already does)."""

    def _lock_model(self, conn: Connection, *, exclusive: bool) -> None:  # noqa: B027 (an optional hook)
        """Order vector writes (shared) against a change of the store's embedding model
        (exclusive), so none commits vectors of the old model after the change (SQLite's
        write lock already does)."""

    def _check_model(self, conn: Connection, model_id: str) -> None:
        """Refuse, inside the writing transaction ``conn``, vectors of ``model_id`` for a
        store that records another model: a process still running the model a reindex
        moved the store from would otherwise mix two vector spaces in one index."""
        self._lock_model(conn, exclusive=False)
        row = conn.execute("SELECT value FROM meta WHERE key='embedding_model'").fetchone()
        if row is not None and row[0] != model_id:
            raise EmbeddingMismatchError(
                f"Store at {self.url} now holds vectors from '{row[0]}' (it was reindexed); "
                f"this process embeds with '{model_id}' and cannot write to it. Restart it "
                "with the store's model (embedder=None, or no --embedder)."
            )

    def _next_change(self, conn: Connection) -> int:
        """A new change number, inside the writing transaction ``conn``.

        The numbers order chunk writes for the SQLite store's incremental HNSW sidecar
        (``latest_change``/``changes_since``). The default keeps a counter row in ``meta``,
        which serialises writers: right where there is one writer at a time."""
        return next_change(conn)

    def latest_change(self) -> int:
        """The newest change number handed out (0 before the first write)."""
        row = self._db().execute("SELECT value FROM meta WHERE key='change_seq'").fetchone()
        return int(row[0]) if row else 0

    @abstractmethod
    def _migrations(self) -> list[str]:
        """DDL per schema version (index i: version i + 1), in the backend's dialect."""

    @abstractmethod
    def _size_bytes(self) -> int: ...

    def _after_purge(self) -> None:  # noqa: B027 (an optional hook)
        """Give the freed space back (VACUUM and the like), outside the transaction."""

    def _claimable(
        self, conn: Connection, rows: list[Any], worker_id: str, now: float
    ) -> list[Any]:
        """The candidate job rows this worker may take (SQLite: all; one writer at a time)."""
        return rows

    # -- vectors -----------------------------------------------------------------------

    def _vector_param(self, vector: np.ndarray) -> Any:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def _vector_bytes(self, stored: Any) -> bytes:
        return bytes(stored)

    @abstractmethod
    def scan_vectors(
        self,
        tenant: str,
        spec: FilterSpec,
        query: np.ndarray,
        limit: int,
        *,
        model_id: str | None = None,
    ) -> list[tuple[int, float]]:
        """The nearest live chunks the filter admits: ``(rowid, cosine)``, best first; with
        ``model_id``, only chunks that model embedded (a store part way through a reindex
        holds two models' vectors, of one dimension when both models have it)."""

    # -- lexical index -----------------------------------------------------------------

    @abstractmethod
    def _index_tokens(
        self, conn: Connection, tenant: str, rows: Sequence[tuple[int, Sequence[str]]]
    ) -> None:
        """Add ``tenant``'s rows' segmented tokens to the lexical index."""

    @abstractmethod
    def _unindex(self, conn: Connection, tenant: str, rowids: Sequence[int]) -> None: ...

    @abstractmethod
    def _clear_lexical(self, conn: Connection) -> None: ...

    @abstractmethod
    def _term_counts(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        """Documents holding each term (terms in no document may be left out)."""

    def _forget_terms(self) -> None:  # noqa: B027 (an optional hook)
        """Drop cached term statistics (after the lexical index was rebuilt)."""

    @abstractmethod
    def lexical(
        self,
        tenant: str,
        spec: FilterSpec,
        tokens: Sequence[str],
        limit: int,
        *,
        secondary: bool = False,
    ) -> list[tuple[int, float]]:
        """BM25 (:mod:`convmem.text.bm25`) under the filter: ``(rowid, score)``, best first.
        A ``secondary`` ranking (more words for a question already ranked: its synonyms,
        its words in another language) reads fewer postings tenant-wide
        (:data:`~convmem.store.lexical.SECONDARY_SHARE`)."""
