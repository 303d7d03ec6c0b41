"""A LlamaIndex retriever over convmem (``pip install 'convmem[llamaindex]'``).

>>> retriever = ConvmemRetriever(memory=memory, conversation_id="trip", k=4)  # doctest: +SKIP
>>> retriever.retrieve("护照哪天到期")                                          # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from convmem.integrations.scope import search_scope
from convmem.memory import Memory
from convmem.models import Hit
from convmem.retrieve import DEFAULT_MIN_SCORE

__all__ = ["ConvmemRetriever"]

#: The metadata an LLM prompt or an embedding of a node shows besides its text: when and
#: who, and whether it awaits the user's confirmation. The rest (scores, turn lists, flags)
#: stays in ``node.metadata`` for the application; shown, it was some 25 lines of
#: internals per one-line memory in every prompt.
SHOWN_KEYS = ("conversation_id", "timestamp_range", "participants", "pending")


def _node_id(hit: Hit) -> str:
    """A node id per hit: a turn-level hit is one turn of its chunk."""
    if hit.metadata.get("granularity") == "turn":
        return f"{hit.chunk_id}#turn{hit.metadata['turn_range'][0]}"
    return hit.chunk_id


class ConvmemRetriever(BaseRetriever):
    """Relevant memory as ``NodeWithScore``s (node id = chunk id, metadata kept)."""

    def __init__(
        self,
        *,
        memory: Memory,
        conversation_id: str | None = None,
        k: int = 6,
        filters: dict[str, Any] | None = None,
        granularity: str = "turn",
        min_score: float = DEFAULT_MIN_SCORE,
    ) -> None:
        super().__init__()
        self.memory = memory
        self.conversation_id = conversation_id
        self.k = k
        self.filters = filters
        self.granularity = granularity
        self.min_score = min_score

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=_node(hit), score=hit.score)
            for hit in search_scope(self, query_bundle.query_str)
        ]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the search reads the store: off the event loop, as the LangChain retriever does
        return await asyncio.to_thread(self._retrieve, query_bundle)


def _node(hit: Hit) -> TextNode:
    metadata = {**hit.metadata, "tier": hit.tier, "pending": hit.pending}
    hidden = [key for key in metadata if key not in SHOWN_KEYS]
    return TextNode(
        id_=_node_id(hit),
        text=hit.text,
        metadata=metadata,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=hidden,
    )
