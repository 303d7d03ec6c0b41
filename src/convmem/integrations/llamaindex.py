"""A LlamaIndex retriever over convmem (``pip install 'convmem[llamaindex]'``).

>>> retriever = ConvmemRetriever(memory=memory, conversation_id="trip", k=4)  # doctest: +SKIP
>>> retriever.retrieve("护照哪天到期")                                          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from convmem.integrations.scope import search_scope
from convmem.memory import Memory
from convmem.models import Hit
from convmem.retrieve import DEFAULT_MIN_SCORE

__all__ = ["ConvmemRetriever"]


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
        hits = search_scope(self, query_bundle.query_str)
        return [
            NodeWithScore(
                node=TextNode(
                    id_=_node_id(hit),
                    text=hit.text,
                    metadata={**hit.metadata, "tier": hit.tier, "pending": hit.pending},
                ),
                score=hit.score,
            )
            for hit in hits
        ]
