"""Bounded in-process caches that the garbage collector never walks.

A long-running process (the HTTP service, an agent) tokenizes the same lines again and
again, so the tokenizer caches its results. ``functools.lru_cache`` keeps its entries on a
linked list that every full collection of Python's garbage collector visits, key and
result, however long the entries have been there: with 86k lines cached, a full
collection took 97 ms instead of 27 (bench/README.md, stop 36), and it lands inside
whichever search allocated last. A ``dict`` whose keys and values are all strings or
numbers is not tracked by the collector at all, so :class:`TextCache` holds only those
(token lists are packed into one string), in two generations: when the newer one is full
it becomes the older one and the oldest entries go, and an entry read from the older one
moves to the newer one (least recently used, approximately, at O(1) a call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["TextCache", "cached_tokens", "pack", "unpack"]

# Between packed tokens: the ASCII unit separator, which no token holds (tokens are words
# and CJK runs of a normalised line; control characters are never part of one).
SEPARATOR = "\x1f"

# Values the collector does not track (a tuple or a list would make the dict tracked).
Value = TypeVar("Value", str, int, float)


class TextCache(Generic[Value]):
    """``str -> str | int | float``, at most about ``size`` entries, invisible to the
    garbage collector. Thread-safe for a cache: a lost entry is computed again."""

    __slots__ = ("_half", "_new", "_old", "misses")

    def __init__(self, size: int) -> None:
        if size < 2:
            raise ValueError("size must be at least 2")
        self._half = size // 2
        self._new: dict[str, Value] = {}
        self._old: dict[str, Value] = {}
        self.misses = 0

    def get(self, key: str) -> Value | None:
        """The cached value, or None (counted in ``misses``)."""
        value = self._new.get(key)
        if value is None:
            value = self._old.get(key)
            if value is None:
                self.misses += 1
                return None
            self.put(key, value)
        return value

    def fetch(self, key: str, make: Callable[[str], Value]) -> Value:
        """The cached value of ``key``; when there is none, ``make(key)``, kept."""
        value = self.get(key)
        if value is None:
            value = make(key)
            self.put(key, value)
        return value

    def put(self, key: str, value: Value) -> None:
        if len(self._new) >= self._half:
            self._old, self._new = self._new, {}
        self._new[key] = value

    def clear(self) -> None:
        self._new, self._old = {}, {}
        self.misses = 0

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def cached_tokens(
    cache: TextCache[str], key: str, make: Callable[[str], Sequence[str]]
) -> list[str]:
    """The tokens ``make(key)`` gives, kept packed in ``cache``, as a new list."""
    packed = cache.get(key)
    if packed is None:
        packed = pack(make(key))
        cache.put(key, packed)
    return unpack(packed)


def pack(tokens: Sequence[str]) -> str:
    """``tokens`` as one string for a :class:`TextCache` (:func:`unpack` gives them back)."""
    return SEPARATOR.join(tokens)


def unpack(packed: str) -> list[str]:
    """The tokens :func:`pack` joined, as a new list (the caller may change it)."""
    return packed.split(SEPARATOR) if packed else []
