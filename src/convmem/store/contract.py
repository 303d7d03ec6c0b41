"""The store contract, in one place.

- :class:`Store` is what the layers above call (the facade, the worker, the searcher, the
  ANN sidecar): every public method of a store. Both backends are instances of it, and the
  conformance suite checks that.
- :class:`Backend` is what a new SQL backend implements: connections, the lexical index,
  vector search and a few hooks. Its abstract methods are the whole list; Python refuses
  to create a backend that lacks one. Everything else (the queries) is shared, written
  once in :class:`~convmem.store.base.SQLStore`'s modules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from convmem.clock import SYSTEM_CLOCK, Clock
from convmem.store.dbapi import Connection
from convmem.store.filters import FilterSpec

if TYPE_CHECKING:
    from convmem.governance import Note
    from convmem.governance.derive import Decision
    from convmem.models import JobInfo, Turn
    from convmem.store.records import (
        ClaimedJob,
        ConversationState,
        IndexBatch,
        IndexedChunk,
        MarkRow,
        StoredTurn,
    )

__all__ = ["Backend", "Store"]


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
        self, tenant: str, spec: FilterSpec, query: np.ndarray, limit: int
    ) -> list[tuple[int, float]]:
        """The nearest live chunks the filter admits: ``(rowid, cosine)``, best first."""

    # -- lexical index -----------------------------------------------------------------

    @abstractmethod
    def _index_tokens(self, conn: Connection, rows: Sequence[tuple[int, Sequence[str]]]) -> None:
        """Add rows' segmented tokens to the lexical index."""

    @abstractmethod
    def _unindex(self, conn: Connection, rowids: Sequence[int]) -> None: ...

    @abstractmethod
    def _clear_lexical(self, conn: Connection) -> None: ...

    @abstractmethod
    def _term_counts(self, conn: Connection, terms: Sequence[str]) -> dict[str, int]:
        """Documents holding each term (terms in no document may be left out)."""

    def _forget_terms(self) -> None:  # noqa: B027 (an optional hook)
        """Drop cached term statistics (after the lexical index was rebuilt)."""

    @abstractmethod
    def lexical(
        self, tenant: str, spec: FilterSpec, tokens: Sequence[str], limit: int
    ) -> list[tuple[int, float]]:
        """BM25 (:mod:`convmem.text.bm25`) under the filter: ``(rowid, score)``, best first."""


@runtime_checkable
class Store(Protocol):
    """Every method the layers above a store call. Both backends implement it."""

    native_vector_index: bool

    @property
    def url(self) -> str: ...
    def close(self) -> None: ...
    def now(self) -> float: ...

    # meta and write path
    def embedding_model(self) -> tuple[str, int] | None: ...
    def set_embedding_model(self, model_id: str, dimension: int) -> None: ...
    def add_turns(
        self, tenant: str, conversation_id: str, turns: Sequence[Turn], *, accepted_at: datetime
    ) -> tuple[list[int | str], list[int | str], int | None]: ...

    # jobs
    def recover_dead_claims(self) -> int: ...
    def claim_jobs(
        self, worker_id: str, *, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]: ...
    def fail_jobs(
        self,
        job_ids: Sequence[int],
        *,
        error_code: str,
        message: str,
        base_delay: float,
        max_delay: float,
        max_attempts: int,
    ) -> None: ...
    def release_jobs(self, job_ids: Sequence[int]) -> None: ...
    def release_worker(self, worker_prefix: str) -> int: ...
    def job(self, tenant: str, job_id: int) -> JobInfo: ...
    def jobs(
        self, tenant: str, *, status: str | None = None, limit: int = 100
    ) -> list[JobInfo]: ...
    def retry_job(self, tenant: str, job_id: int) -> JobInfo: ...
    def backlog(self, tenant: str | None = None) -> tuple[int, int]: ...
    def backlog_by_conversation(self, tenant: str) -> dict[str, int]: ...

    # indexing
    def conversation_state(self, tenant: str, conversation_id: str) -> ConversationState: ...
    def last_final_chunk_before(
        self, tenant: str, conversation_id: str, seq: int
    ) -> tuple[int, int] | None: ...
    def load_turns(
        self,
        tenant: str,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        between: tuple[int, int] | None = None,
        include_deleted: bool = False,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[StoredTurn]: ...
    def chunk_fingerprints(
        self, tenant: str, chunk_ids: Sequence[str]
    ) -> dict[str, tuple[str, str, bytes]]: ...
    def apply_index(self, batches: Sequence[IndexBatch], *, model_id: str) -> list[bool]: ...
    def upsert_records(
        self, tenant: str, items: Sequence[IndexedChunk], *, model_id: str
    ) -> tuple[int, int]: ...

    # delete, purge, re-cut
    def delete_turns(
        self, tenant: str, conversation_id: str, turn_range: tuple[int, int]
    ) -> tuple[int, int, int | None]: ...
    def reset_conversations(self, tenant: str, conversation_id: str | None = None) -> int: ...
    def chunk_sources(
        self, tenant: str, chunk_ids: Sequence[str]
    ) -> dict[str, tuple[str, int, int, str]]: ...
    def delete_chunk_rows(self, tenant: str, chunk_ids: Sequence[str]) -> int: ...
    def purge(self, tenant: str | None) -> dict[str, int]: ...

    # search
    def scan_vectors(
        self, tenant: str, spec: FilterSpec, query: np.ndarray, limit: int
    ) -> list[tuple[int, float]]: ...
    def lexical(
        self, tenant: str, spec: FilterSpec, tokens: Sequence[str], limit: int
    ) -> list[tuple[int, float]]: ...
    def admit(self, tenant: str, spec: FilterSpec, rowids: Sequence[int]) -> set[int]: ...
    def load_rows(
        self, tenant: str, rowids: Sequence[int]
    ) -> dict[int, tuple[str, str, dict[str, Any]]]: ...
    def latest_change(self) -> int: ...
    def changes_since(
        self, tenant: str, after: int, upto: int, *, page: int = 50_000
    ) -> Iterator[list[tuple[int, bytes | None]]]: ...
    def removed_since(self, tenant: str, after: int, upto: int) -> list[int]: ...

    # maintenance
    def iter_live_chunks(self, batch: int = 512) -> Iterator[list[tuple[int, str]]]: ...
    def replace_vectors(self, rows: Sequence[tuple[int, np.ndarray]], model_id: str) -> None: ...
    def stats(self, tenant: str) -> dict[str, Any]: ...

    # governance
    def load_marks(
        self, tenant: str, conversation_id: str, from_seq: int
    ) -> dict[int, MarkRow]: ...
    def pin_decisions(self, tenant: str, conversation_id: str) -> dict[str, Decision]: ...
    def notes(
        self,
        tenant: str,
        *,
        conversation_id: str | None = None,
        status: str | None = None,
        limit: int = 1000,
    ) -> list[Note]: ...
    def note(self, tenant: str, note_id: str, *, now: float | None = None) -> Note: ...
    def decide_note(
        self, tenant: str, note_id: str, *, status: str, evidence_level: str | None = None
    ) -> tuple[Note, int | None]: ...
    def mark_rows(self, tenant: str, conversation_id: str) -> Iterator[tuple[Any, ...]]: ...
    def pin_rows(self, tenant: str, conversation_id: str) -> list[tuple[str, str, str]]: ...
    def sweep_expired(self, now: float | None = None) -> dict[str, int]: ...
    def get_policy(self, tenant: str) -> dict[str, Any] | None: ...
    def set_policy(self, tenant: str, policy: Mapping[str, Any] | None) -> None: ...

    # API keys and story states
    def create_api_key(self, tenant: str, name: str = "") -> tuple[str, str]: ...
    def api_key_tenant(self, secret: str) -> str | None: ...
    def list_api_keys(self) -> list[dict[str, Any]]: ...
    def revoke_api_key(self, key_id: str) -> None: ...
    def put_entity_states(self, tenant: str, snapshots: list[dict[str, Any]]) -> int: ...
    def latest_entity_state(
        self,
        tenant: str,
        project_id: str,
        entity_id: str,
        chapter_index: int,
        scene_index: int,
        *,
        inclusive: bool = True,
    ) -> dict[str, Any] | None: ...
    def entity_timeline(
        self,
        tenant: str,
        project_id: str,
        first_chapter: int,
        last_chapter: int,
        entity_id: str | None = None,
    ) -> list[dict[str, Any]]: ...
