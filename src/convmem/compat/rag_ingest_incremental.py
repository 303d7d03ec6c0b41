"""Seed 001's functions with exactly its names and return shapes.

Importable as ``rag_ingest_incremental`` once convmem is installed. The functions share
one :class:`~convmem.Memory`, opened lazily from :func:`configure`, else from the
``CONVMEM_STORE`` / ``CONVMEM_EMBEDDER`` environment variables, else ``memory.db`` in the
user data directory (never a temporary folder).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from convmem.embed import Embedder
from convmem.embed.service import EmbeddingService as _BaseEmbeddingService
from convmem.errors import InvalidInputError
from convmem.ids import check_conversation_id, check_list
from convmem.ingest import ChunkingPolicy, ChunkTurn, plan_chunks, render_chunk
from convmem.memory import Memory
from convmem.models import MAX_TEXT_CHARS, Hit, Turn, parse_turns
from convmem.text import clean_text

__all__ = [
    "EmbeddingService",
    "build_incremental_chunks",
    "configure",
    "embed_chunk",
    "embed_db",
    "logical_delete_by_source",
    "upsert_vector_records",
]

_lock = threading.Lock()
_memory: Memory | None = None
_settings: dict[str, Any] = {}


def configure(
    store: str | None = None,
    embedder: Embedder | str | None = None,
    *,
    tenant: str = "default",
    workers: int = 0,
) -> Memory:
    """Choose the store and embedder these functions use (closing any earlier one).

    A refused setting (a bad store, embedder or option) raises and leaves the earlier
    configuration in use.
    """
    global _memory
    with _lock:
        settings = {"store": store, "embedder": embedder, "tenant": tenant, "workers": workers}
        if _memory is not None:
            _memory.close()  # before the new one opens: it may be the same SQLite file
            _memory = None
        _memory = _open(settings)
        _settings.clear()
        _settings.update(settings)
        return _memory


def _open(settings: Mapping[str, Any]) -> Memory:
    store = settings.get("store") or os.environ.get("CONVMEM_STORE")
    embedder = settings.get("embedder") or os.environ.get("CONVMEM_EMBEDDER")
    return Memory.open(
        store,
        embedder=embedder,
        tenant=settings.get("tenant", "default"),
        workers=settings.get("workers", 0),
    )


def _get() -> Memory:
    global _memory
    with _lock:
        if _memory is None:
            _memory = _open(_settings)
        return _memory


@atexit.register
def _close() -> None:
    global _memory
    if _memory is not None:
        _memory.close()
        _memory = None


class EmbeddingService(_BaseEmbeddingService):
    """The seed's singleton: ``EmbeddingService.get_instance()`` is the configured model."""

    @classmethod
    def get_instance(cls, embedder: Embedder | str | None = None) -> _BaseEmbeddingService:
        """The configured model's service; or the shared service of ``embedder`` (an
        Embedder, or a spec such as ``"hashing"`` resolved as ``configure`` resolves it)."""
        if embedder is not None:
            return _BaseEmbeddingService.get_instance(embedder)
        return _get().embedding


def build_incremental_chunks(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cut a run of MemoryEvents of one conversation into chunks (pure; stores nothing).

    Each event has ``conversation_id``, ``turn_id``, ``text``, ``timestamp`` and
    ``speaker``. Returns ``{conversation_id, turn_range, chunks}``; the last chunk may be
    provisional (``metadata.provisional``) if more turns could still join it.
    """
    if not events:
        raise InvalidInputError("events is empty; pass at least one MemoryEvent", field="events")
    events = check_list(events, "events")
    for index, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise InvalidInputError(
                f"events[{index}] must be a MemoryEvent object, got {type(event).__name__}",
                field=f"events[{index}]",
            )
    conversation_ids = {
        value if isinstance(value := event.get("conversation_id"), str) else None
        for event in events
    }
    first = events[0].get("conversation_id")
    if len(conversation_ids) != 1 or not isinstance(first, str):
        raise InvalidInputError(
            "events must all carry the same conversation_id string", field="events.conversation_id"
        )
    try:  # the ids upsert_vector_records takes: refused here, not after chunking
        conversation_id = check_conversation_id(first)
    except InvalidInputError as exc:
        raise InvalidInputError(
            f"events.{exc}; give every event the same non-blank id", field="events.conversation_id"
        ) from None
    turns: list[Turn] = parse_turns(list(events), max_text_chars=MAX_TEXT_CHARS)
    now = datetime.now(UTC)
    chunk_turns = [
        ChunkTurn(
            seq=turn.seq,
            role=turn.role,
            text=clean_text(turn.text),
            timestamp=turn.timestamp or now,
            name=turn.name,
        )
        for turn in turns
    ]
    policy = ChunkingPolicy()
    plans = plan_chunks(chunk_turns, [], policy)
    chunks = [render_chunk(conversation_id, plan, policy).model_dump(mode="json") for plan in plans]
    return {
        "conversation_id": conversation_id,
        "turn_range": [turns[0].seq, turns[-1].seq],
        "chunks": chunks,
    }


def upsert_vector_records(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Embed and upsert ChunkRecords; the same ``chunk_id`` overwrites (replayable)."""
    result = _get().upsert_chunks(check_list(chunks, "chunks"))
    return {"upserted": result.upserted, "updated": result.updated, "errors": result.errors}


def logical_delete_by_source(
    conversation_id: str,
    turn_range: Sequence[int] | None = None,
    chunk_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Logically delete by ``(conversation_id, turn_range)`` or chunk ids."""
    result = _get().delete(conversation_id, turn_range=turn_range, chunk_ids=chunk_ids)
    return {"deleted": result.deleted, "errors": result.errors}


def embed_db(
    query_text: str,
    top_k: int = 6,
    filters: Mapping[str, Any] | None = None,
    *,
    hints: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Similarity search with metadata filters; deleted chunks are always filtered out.

    Each hit is a ChunkRecord view (seed 001 API 4): one per ``chunk_id``, best first,
    ``text`` the chunk's text with its ``[上下文：…]`` prefix and ``metadata`` the chunk's
    (``turn_range`` spans the chunk). The search ranks turns, so each hit also says which
    turns of the chunk answered: ``metadata["evidence_turns"]`` (best first) and
    ``metadata["evidence_text"]`` (the best one's line). At most ``top_k`` hits;
    ``hints.params.top_k``, when given, is the ``top_k`` used and echoed.

    ``hints`` (retrieval hints from a ``route`` operator) go to the hierarchical memory
    service; each hit then also says its ``tier``.
    """
    used = top_k
    asked, wide_hints = top_k, hints
    if isinstance(hints, Mapping) and isinstance(hints.get("params"), Mapping):
        used = hints["params"].get("top_k", top_k)
        if _count(used):  # widen the service's own top_k; the echoed hints stay as given
            wide_hints = {**hints, "params": {**hints["params"], "top_k": _wider(used)}}
    if _count(top_k):
        asked = _wider(top_k)
    # turns are ranked, and a chunk answers once per turn: ask for more turns than chunks
    hits = _get().search(query_text, top_k=asked, filters=filters, hints=wide_hints)
    result: dict[str, Any] = {
        "query_text": query_text,
        "top_k": used,
        "filters": dict(filters) if filters is not None else {"deleted": False},
        "hits": [
            {
                "chunk_id": hit.chunk_id,
                "score": hit.score,
                "text": hit.context if hit.context is not None else hit.text,
                "metadata": metadata,
                **({"tier": hit.tier} if hints is not None else {}),
            }
            for hit, metadata in _chunk_views(hits)[:used]
        ],
    }
    if hints is not None:
        result["hints"] = dict(hints)
    return result


#: How many turn-level hits embed_db reads per chunk it returns.
_TURNS_PER_CHUNK = 3


def _count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 1 <= value <= 1000


def _wider(top_k: int) -> int:
    return min(1000, top_k * _TURNS_PER_CHUNK)


def _chunk_views(hits: Sequence[Hit]) -> list[tuple[Hit, dict[str, Any]]]:
    """One record per chunk: its best-ranked hit, with the chunk's turn range and every
    evidence turn its hits named (a turn-level search returns a chunk once per turn)."""
    views: dict[str, tuple[Hit, dict[str, Any]]] = {}
    for hit in hits:
        turns = hit.metadata.get("evidence_turns") or []
        if hit.chunk_id in views:
            evidence = views[hit.chunk_id][1].setdefault("evidence_turns", [])
            evidence.extend(turn for turn in turns if turn not in evidence)
            continue
        metadata = dict(hit.metadata)
        if hit.context is not None:  # a turn-level hit: the view is of its chunk
            metadata["evidence_text"] = hit.text
            if "chunk_turn_range" in metadata:
                metadata["turn_range"] = list(metadata["chunk_turn_range"])
        views[hit.chunk_id] = (hit, metadata)
    return list(views.values())


def embed_chunk(query: str) -> list[float]:
    """The normalised vector of a query string."""
    return _get().embed_query(query)
