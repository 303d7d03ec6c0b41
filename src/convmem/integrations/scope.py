"""What the framework retrievers share: one conversation (or the tenant), filters, the
hit budget and the relevance threshold, turned into one ``Memory.search`` call."""

from __future__ import annotations

from typing import Any, Protocol

from convmem.errors import InvalidInputError
from convmem.memory import Memory
from convmem.models import Hit

__all__ = ["RetrieverScope", "search_scope"]


class RetrieverScope(Protocol):
    """The settings every convmem retriever carries (whatever its framework's base class)."""

    memory: Memory
    conversation_id: str | None
    filters: dict[str, Any] | None
    k: int
    granularity: str
    min_score: float


def search_scope(retriever: RetrieverScope, query: str) -> list[Hit]:
    """Hits for ``query`` in the retriever's conversation (the whole tenant when None).

    Raises:
        InvalidInputError: ``filters`` names another conversation than ``conversation_id``.
    """
    scope = dict(retriever.filters or {})
    if retriever.conversation_id is not None:
        named = scope.get("conversation_id", retriever.conversation_id)
        if named != retriever.conversation_id:
            raise InvalidInputError(
                f"conversation_id {retriever.conversation_id!r} and filters' conversation_id "
                f"{named!r} disagree; name the conversation once (drop one of them)",
                field="filters.conversation_id",
            )
        scope["conversation_id"] = retriever.conversation_id
    return retriever.memory.search(
        query,
        top_k=retriever.k,
        filters=scope or None,
        granularity=retriever.granularity,
        min_score=retriever.min_score,
    )
