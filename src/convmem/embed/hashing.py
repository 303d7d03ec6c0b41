"""A deterministic feature-hashing embedder: offline, fast, shipped, Chinese-aware.

Features are the shared search tokens (jieba words for Chinese, words otherwise), the
single characters of Chinese words (so differently segmented paraphrases still meet)
and crude English stems. Each feature is hashed with CRC-32 to a signed dimension;
signed hashing keeps collisions unbiased. Weights are sublinear in term frequency.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from convmem.embed.base import Vectors, normalise_rows
from convmem.text import tokenize

__all__ = ["HashingEmbedder"]

_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "ers", "er", "es", "ed", "ly", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@lru_cache(maxsize=262144)
def _features(token: str) -> tuple[tuple[str, float], ...]:
    if token.isascii():
        stem = _stem(token)
        if stem != token:
            return ((token, 1.0), ("~" + stem, 0.7))
        return ((token, 1.0), ("~" + token, 0.7))
    out: list[tuple[str, float]] = [(token, 1.0 if len(token) > 1 else 0.6)]
    if len(token) > 1:
        out.extend((char, 0.35) for char in token if not char.isascii())
    return tuple(out)


class HashingEmbedder:
    """Signed feature hashing into ``dimension`` dims (default 512)."""

    def __init__(self, dimension: int = 512) -> None:
        if dimension < 8:
            raise ValueError(f"dimension must be >= 8, got {dimension}")
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def _slot(self, feature: str) -> tuple[int, float]:
        digest = zlib.crc32(feature.encode("utf-8"))
        return digest % self._dimension, (1.0 if (digest >> 31) & 1 else -1.0)

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        slot = self._slot
        for row, text in enumerate(texts):
            counts: dict[str, float] = {}
            for token in tokenize(text):
                for feature, weight in _features(token):
                    counts[feature] = counts.get(feature, 0.0) + weight
            vector = out[row]
            for feature, weight in counts.items():
                index, sign = slot(feature)
                vector[index] += sign * (1.0 + math.log(weight)) if weight >= 1 else sign * weight
        return normalise_rows(out)
