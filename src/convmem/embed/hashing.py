"""A deterministic feature-hashing embedder: offline, fast, shipped, Chinese-aware.

Features are the shared search tokens (jieba words for Chinese, words otherwise), the
single characters of Chinese words (so differently segmented paraphrases still meet)
and crude English stems. Each feature is hashed with CRC-32 to a signed dimension;
signed hashing keeps collisions unbiased. Weights are sublinear in term frequency.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

import numpy as np

from convmem.embed.base import Vectors, normalise_rows
from convmem.text import words

__all__ = ["HashingEmbedder"]

_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "ers", "er", "es", "ed", "ly", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


# A token's features as packed (index * 2 + positive sign, weight) records: bytes, which the
# garbage collector never tracks. A cache of tuples was walked by every full collection
# (200k distinct words made a full collection 33 -> 69 ms), and each new entry put the whole
# dict back in the youngest generation.
_SLOT = struct.Struct("<id")


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

    # Its vectors mostly repeat the lexical signal, so hybrid fusion gives them little weight.
    fusion_weight = 0.15
    # Hashing a line costs microseconds: search may embed candidate turns.
    embeds_turns = True

    def __init__(self, dimension: int = 512) -> None:
        if dimension < 8:
            raise ValueError(f"dimension must be >= 8, got {dimension}")
        self._dimension = dimension
        self._slots: dict[str, bytes] = {}

    @property
    def model_id(self) -> str:
        return f"hashing-v1-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def _token_slots(self, token: str) -> bytes:
        """Each feature of a token as a packed ``(index * 2 + positive, weight)`` record
        (``_SLOT``), cached per embedder."""
        slots = self._slots.get(token)
        if slots is None:
            packed = bytearray()
            for feature, weight in _features(token):
                digest = zlib.crc32(feature.encode("utf-8"))
                packed += _SLOT.pack((digest % self._dimension) * 2 + ((digest >> 31) & 1), weight)
            slots = bytes(packed)
            # words recur; a long token (a pasted key, a base64 blob) hardly does, and
            # 500,000 of them had held gigabytes
            if len(self._slots) < 500_000 and len(token) <= 64:
                self._slots[token] = slots
        return slots

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            weights: dict[int, float] = {}
            for token in words(text):
                for key, weight in _SLOT.iter_unpack(self._token_slots(token)):
                    weights[key] = weights.get(key, 0.0) + weight
            vector = out[row]
            for key, weight in weights.items():
                index, positive = divmod(key, 2)
                sign = 1.0 if positive else -1.0
                vector[index] += sign * (1.0 + math.log(weight) if weight >= 1 else weight)
        return normalise_rows(out)
