"""Embedders and the seed's EmbeddingService."""

from convmem.embed.base import (
    DEFAULT_FUSION_WEIGHT,
    AsymmetricEmbedder,
    Embedder,
    Vectors,
    embed_documents,
    embed_joined,
    embed_query,
    embeds_turns,
    fusion_weight,
    normalise_rows,
    window_boost,
)
from convmem.embed.hashing import HashingEmbedder
from convmem.embed.openai import OpenAIEmbedder
from convmem.embed.resolve import DEFAULT_MODEL, resolve_embedder
from convmem.embed.service import EmbeddingService
from convmem.embed.transformer import TransformerEmbedder, find_cached_model
from convmem.embed.usem import UsemEmbedder

__all__ = [
    "DEFAULT_FUSION_WEIGHT",
    "DEFAULT_MODEL",
    "AsymmetricEmbedder",
    "Embedder",
    "EmbeddingService",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "TransformerEmbedder",
    "UsemEmbedder",
    "Vectors",
    "embed_documents",
    "embed_joined",
    "embed_query",
    "embeds_turns",
    "find_cached_model",
    "fusion_weight",
    "normalise_rows",
    "resolve_embedder",
    "window_boost",
]
