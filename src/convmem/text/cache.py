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

A generation is full at half the entries or half the characters (keys and string values)
the cache may hold. Counting entries alone bounded nothing for long lines: a 20,000-character
Chinese turn holds some 300,000 characters across the tokenizer's caches, and a process
that ingested and searched such turns grew by 1 MB each, towards 131,072 entries of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["CHARS_PER_ENTRY", "TextCache", "cached_tokens", "pack", "unpack"]

# Between packed tokens: the ASCII unit separator, which no token holds (tokens are words
# and CJK runs of a normalised line; control characters are never part of one).
SEPARATOR = "\x1f"

# Values the collector does not track (a tuple or a list would make the dict tracked).
Value = TypeVar("Value", str, int, float)

#: The characters a cache may hold per entry it may hold, by default: the tokenizer's
#: caches average about 100 (a chat line's tokens and the line), 340 at the 99th percentile.
CHARS_PER_ENTRY = 256


class TextCache(Generic[Value]):
    """``str -> str | int | float``, at most about ``size`` entries and ``chars`` characters
    of keys and string values (default ``size * CHARS_PER_ENTRY``), invisible to the garbage
    collector. An entry of more than half of ``chars`` is not kept. Thread-safe for a
    cache: a lost entry is computed again."""

    __slots__ = ("_chars", "_half", "_half_chars", "_new", "_old", "misses")

    def __init__(self, size: int, chars: int | None = None) -> None:
        if size < 2:
            raise ValueError("size must be at least 2")
        if chars is not None and chars < 2:
            raise ValueError("chars must be at least 2")
        self._half = size // 2
        self._half_chars = (size * CHARS_PER_ENTRY if chars is None else chars) // 2
        self._chars = 0  # the newer generation's characters
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
        size = len(key) + (len(value) if isinstance(value, str) else 0)
        if size > self._half_chars:
            return
        if len(self._new) >= self._half or self._chars + size > self._half_chars:
            self._old, self._new = self._new, {}
            self._chars = 0
        self._new[key] = value
        self._chars += size

    def clear(self) -> None:
        self._new, self._old = {}, {}
        self._chars = 0
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
