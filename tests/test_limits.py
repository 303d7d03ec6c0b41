"""Limits a long-running process meets: what stays bounded, and what a large scope still finds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from convmem.governance import Note
from convmem.models import Hit
from convmem.retrieve.hierarchy import HierarchicalMemoryService, VisibleTurn
from convmem.retrieve.request import SearchRequest
from convmem.text.cache import CHARS_PER_ENTRY, TextCache, cached_tokens, unpack


def _held(cache: TextCache[str]) -> int:
    return sum(
        len(key) + len(value) for part in (cache._new, cache._old) for key, value in part.items()
    )


def test_a_text_cache_bounds_the_characters_it_holds_not_only_its_entries() -> None:
    # 64 entries of long lines held 64 of them (a long Chinese turn's tokens are some
    # 300,000 characters: a process grew by a megabyte per turn); the default budget is
    # CHARS_PER_ENTRY characters an entry
    cache: TextCache[str] = TextCache(64)
    for i in range(64):
        cache.put(f"{i:04d}" + "长" * 4000, "x")
    assert _held(cache) <= 64 * CHARS_PER_ENTRY
    assert cache.get("0063" + "长" * 4000) == "x"  # the newest is still there
    small: TextCache[str] = TextCache(1000, chars=100)
    for i in range(50):
        small.put(f"line {i}", "token")
    assert _held(small) <= 100 and len(small) > 2


def test_an_entry_past_half_the_budget_is_computed_but_not_kept() -> None:
    cache: TextCache[str] = TextCache(16, chars=40)
    calls: list[str] = []

    def split(line: str) -> Sequence[str]:
        calls.append(line)
        return line.split()

    line = "a long line of many words past the budget"
    assert cached_tokens(cache, line, split) == line.split()
    assert cached_tokens(cache, line, split) == line.split()
    assert len(calls) == 2 and len(cache) == 0
    assert cached_tokens(cache, "two words", split) == ["two", "words"]
    assert unpack(cache.get("two words") or "") == ["two", "words"]
    cache.clear()
    assert cache._chars == 0 and len(cache) == 0


class _NoDialogue:
    def search(self, request: SearchRequest) -> list[Hit]:
        return []


class _Notes:
    """A tenant's notes as the store lists them: by conversation id, then turn."""

    def __init__(self, notes: list[Note]) -> None:
        self._notes = notes

    def recent_turns(
        self, conversation_id: str, limit: int = 20, *, kept_only: bool = False
    ) -> Sequence[VisibleTurn]:
        return []

    def notes(
        self, conversation_id: str | None = None, status: str | None = None, *, limit: int = 1000
    ) -> list[Note]:
        return [n for n in self._notes if conversation_id in (None, n.conversation_id)][:limit]


def _note(note_id: str, conversation_id: str, text: str) -> Note:
    return Note.model_construct(
        note_id=note_id,
        conversation_id=conversation_id,
        kind="turn",
        category="preference",
        subtype=None,
        evidence_level="explicit",
        importance=0.7,
        ttl_seconds=0,
        forget_policy="keep",
        expires_at=None,
        text=text,
        source_turn_ids=[1],
        requires_confirmation=False,
        status="confirmed",
        created_at="2026-01-01T00:00:00+00:00",
        updated_at="2026-01-01T00:00:00+00:00",
    )


def test_the_ltm_tier_reads_every_note_of_a_large_tenant() -> None:
    # it read the first 5,000 in conversation-id order: a note of a conversation whose id
    # sorts after them was never found, tenant-wide
    notes = [_note(f"n{i:05d}", "a-chat", "记住：我每天写日记") for i in range(5001)]
    notes.append(_note("allergy", "z-chat", "记住：我对青霉素过敏"))
    service = HierarchicalMemoryService(_NoDialogue(), _Notes(notes), "default")
    for strategy in ("persona_search", "semantic_search"):
        hits = service.retrieve("我对什么过敏？", hints={"strategies": [strategy]}).hits
        assert hits and hits[0].chunk_id == "allergy", strategy


def test_small_tenants_searched_tenant_wide_keep_no_hnsw_index(tmp_path: Path) -> None:
    """Every tenant ever searched tenant-wide kept an index of its vectors in memory for
    the life of the process (about 60 KB each, native) and wrote files at close, though a
    tenant under ``ann_min_rows`` is scanned exactly."""
    from convmem import HashingEmbedder, Memory

    path = tmp_path / "m.db"
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        for number in range(5):
            tenant = memory.for_tenant(f"t{number}")
            tenant.add_turns(
                "c", [{"turn_id": 0, "role": "user", "text": f"第{number}个租户的周末计划"}]
            )
            tenant.flush()
            assert tenant.search("周末计划", min_score=0)  # tenant-wide: no conversation filter
        assert memory.searcher._ann == {}
    assert not list(tmp_path.glob("m.db.*usearch*"))


def test_the_hashing_embedder_keeps_no_long_token_in_its_cache() -> None:
    from convmem import HashingEmbedder

    embedder = HashingEmbedder()
    blob = "QmFzZTY0" * 2500  # a pasted key or base64 blob: one 20,000-character token
    first = embedder.embed([f"key {blob}"])
    assert max(len(token) for token in embedder._slots) <= 64 and "key" in embedder._slots
    assert (embedder.embed([f"key {blob}"]) == first).all()  # computed again, the same


def test_batch_sizes_past_what_a_store_takes_are_refused_naming_the_field(tmp_path: Path) -> None:
    from convmem import HashingEmbedder, InvalidInputError, Memory

    with pytest.raises(InvalidInputError) as caught:
        Memory.open(str(tmp_path / "a.db"), embedder=HashingEmbedder(), job_batch=2**63)
    assert caught.value.field == "job_batch"
    with Memory.open(str(tmp_path / "b.db"), embedder=HashingEmbedder(), workers=0) as memory:
        with pytest.raises(InvalidInputError) as caught:
            memory.reindex(batch_size=2**63)
        assert caught.value.field == "batch_size"
