"""The system of record, written once for every SQL backend.

Tables (see docs/storage.md): ``meta`` (schema version, embedding model and dimension),
``turns`` (the event log), ``conversations`` (indexing frontier and revision), ``jobs``
(index jobs with retry state), ``chunks`` (records, vectors, governance columns), the
governance, key and story tables, and the lexical index.

:class:`SQLStore` composes the shared queries, one module per concern (written with ``?``
parameters and SQL that SQLite and PostgreSQL both accept):

- :mod:`~convmem.store.schema`: migrations, tokenizer signature, the recorded model;
- :mod:`~convmem.store.turns`: the event log;
- :mod:`~convmem.store.jobs`: index jobs, claims, retries, backlog;
- :mod:`~convmem.store.chunks`: index batches, upserts, deletes, re-chunking, purge;
- :mod:`~convmem.store.reads`: live rows under filters, the change feed, statistics;
- :mod:`~convmem.store.lexical`: query terms and their statistics;
- :mod:`~convmem.store.governance`, :mod:`~convmem.store.keys`,
  :mod:`~convmem.store.story`: marks and notes, API keys, entity states.

A backend (:class:`~convmem.store.sqlite.SQLiteStore`,
:class:`~convmem.store.postgres.PostgresStore`) implements the hooks declared in
:class:`~convmem.store.contract.Backend`. Each public method is one transaction.
"""

from __future__ import annotations

import time
from typing import Any

from convmem.clock import SYSTEM_CLOCK, Clock
from convmem.store.chunks import ChunkTables
from convmem.store.jobs import JobTables
from convmem.store.keys import KeyTables
from convmem.store.lexical import LexicalStats, query_terms
from convmem.store.reads import ChunkReads
from convmem.store.records import (
    ClaimedJob,
    ConversationState,
    IndexBatch,
    IndexedChunk,
    StoredTurn,
    select_in,
    text_digest,
    worker_identity,
)
from convmem.store.schema import MIGRATIONS, SCHEMA_VERSION, SchemaTables
from convmem.store.story import StoryTables
from convmem.store.turns import TurnTables

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ClaimedJob",
    "ConversationState",
    "IndexBatch",
    "IndexedChunk",
    "SQLStore",
    "Store",
    "StoredTurn",
    "query_terms",
    "select_in",
    "text_digest",
    "worker_identity",
]


class SQLStore(
    ChunkTables,
    TurnTables,
    JobTables,
    ChunkReads,
    SchemaTables,
    LexicalStats,
    KeyTables,
    StoryTables,
):
    """The shared system of record; a backend supplies the hooks of
    :class:`~convmem.store.contract.Backend` (connections, lexical index, vector search)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock = clock or SYSTEM_CLOCK
        # document frequencies of query terms, see LexicalStats._selective_terms
        self._term_cache: dict[str, int] = {}
        self._term_cache_time = time.monotonic()
        self._averages: dict[tuple[Any, ...], tuple[float, float]] = {}


#: What the layers above a store depend on: the shared queries over a backend's hooks.
Store = SQLStore
