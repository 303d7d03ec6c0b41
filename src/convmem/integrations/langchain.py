"""A LangChain retriever over convmem (``pip install 'convmem[langchain]'``).

>>> retriever = ConvmemRetriever(memory=memory, conversation_id="trip", k=4)  # doctest: +SKIP
>>> retriever.invoke("护照哪天到期")                                            # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from convmem.integrations.scope import search_scope
from convmem.memory import Memory
from convmem.retrieve import DEFAULT_MIN_SCORE

__all__ = ["ConvmemRetriever"]


class ConvmemRetriever(BaseRetriever):
    """Relevant memory as ``Document``s: the hit's text, its metadata with ``chunk_id``,
    ``score``, ``tier`` and ``pending`` added. ``conversation_id`` None searches the tenant."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    conversation_id: str | None = None
    k: int = 6
    filters: dict[str, Any] | None = None
    granularity: str = "turn"
    min_score: float = DEFAULT_MIN_SCORE

    def _search(self, query: str) -> list[Document]:
        hits = search_scope(self, query)
        return [
            Document(
                page_content=hit.text,
                metadata={
                    **hit.metadata,
                    "chunk_id": hit.chunk_id,
                    "score": hit.score,
                    "tier": hit.tier,
                    "pending": hit.pending,
                },
            )
            for hit in hits
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._search(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await asyncio.to_thread(self._search, query)
