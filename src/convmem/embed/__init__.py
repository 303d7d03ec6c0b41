"""Embedders and the seed's EmbeddingService."""

from convmem.embed.base import Embedder, Vectors, normalise_rows
from convmem.embed.hashing import HashingEmbedder
from convmem.embed.openai import OpenAIEmbedder
from convmem.embed.resolve import DEFAULT_MODEL, resolve_embedder
from convmem.embed.service import EmbeddingService
from convmem.embed.transformer import TransformerEmbedder, find_cached_model

__all__ = [
    "DEFAULT_MODEL",
    "Embedder",
    "EmbeddingService",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "TransformerEmbedder",
    "Vectors",
    "find_cached_model",
    "normalise_rows",
    "resolve_embedder",
]
