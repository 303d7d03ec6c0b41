"""The tokenizer's caches stay bounded and out of the garbage collector's sight."""

from __future__ import annotations

import gc

import pytest

from convmem.text import segment, tokenize, words
from convmem.text.cache import TextCache, pack, unpack


def test_a_text_cache_is_never_tracked_by_the_garbage_collector() -> None:
    cache: TextCache[str] = TextCache(64)
    for i in range(1000):
        cache.put(f"line {i}", pack([f"w{i}", "x"]))
        assert cache.get(f"line {i}") == f"w{i}\x1fx"
    assert not any(gc.is_tracked(part) for part in (cache._new, cache._old))
    assert len(cache) <= 64


def test_an_entry_read_again_outlives_the_entries_left_alone() -> None:
    cache: TextCache[int] = TextCache(4)  # two generations of two
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)  # the newer generation was full: a and b are the older one now
    assert cache.get("a") == 1  # read: moves to the newer one
    cache.put("d", 4)  # newer (c, a) full again: the older (a, b) goes
    assert cache.get("b") is None and cache.misses == 1
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (1, 3, 4)
    cache.clear()
    assert cache.get("a") is None and len(cache) == 0 and cache.misses == 1
    with pytest.raises(ValueError, match="size"):
        TextCache(1)


def test_packed_tokens_come_back_as_a_new_list() -> None:
    assert unpack(pack([])) == []
    tokens = ["护照", "paint", "过期"]
    first = unpack(pack(tokens))
    assert first == tokens
    first.append("x")  # the caller owns its list: the cache is not changed
    assert unpack(pack(tokens)) == tokens


def test_the_tokenizer_answers_the_same_from_its_caches() -> None:
    line = "我上周在杭州 painted the harbour"
    segment._WORDS.clear()
    segment._TOKENS.clear()
    first = tokenize(line)
    again = tokenize(line)
    assert first == again and first is not again
    assert "paint" in first and "杭州" in words(line)
    assert segment._TOKENS.misses == 1 and len(segment._TOKENS) == 1
