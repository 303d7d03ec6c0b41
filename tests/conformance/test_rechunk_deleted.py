"""A re-cut never leaves a chunk pointing at deleted turns (issue 18, item 11).

After ``delete(turn_range=...)`` and ``rechunk()`` every live chunk's ``turn_range``
(stored and in metadata) and ``metadata.turn_seqs`` name only live turns, and a search
filtered to the deleted range finds nothing, at chunk and at turn granularity.
"""

from __future__ import annotations

import pytest

from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.ingest import ChunkingPolicy
from helpers import make_turns

TEXTS = [f"第{i}句：关于搬家、装修和预算的讨论，还有 budget review {i}。" for i in range(24)]
QUERIES = ["预算", "搬家", "budget review", "装修"]


def _open(url: str, version: int, max_turns: int) -> Memory:
    policy = ChunkingPolicy(max_chars=2000, max_turns=max_turns, overlap_turns=1, version=version)
    return Memory.open(
        url, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, chunking=policy
    )


def _check_no_deleted_turn_is_named(memory: Memory, deleted: set[int]) -> None:
    live = set(range(len(TEXTS))) - deleted
    chunks = [metadata for rows in memory.store.iter_live_chunks() for _, _, _, metadata in rows]
    assert chunks
    for metadata in chunks:
        seqs, (start, end) = set(metadata["turn_seqs"]), metadata["turn_range"]
        assert seqs <= live, (metadata, sorted(seqs & deleted))
        assert start in live and end in live, metadata
        assert (min(seqs), max(seqs)) == (start, end), metadata
    for first, last in _runs(deleted):
        for query in QUERIES:
            for granularity in ("chunk", "turn"):
                hits = memory.search(
                    query,
                    top_k=20,
                    filters={"conversation_id": "c", "turn_range": [first, last]},
                    granularity=granularity,
                )
                named = [(hit.chunk_id, hit.metadata.get("turn_range")) for hit in hits]
                assert not hits, (granularity, first, last, named)


def _runs(seqs: set[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


@pytest.mark.parametrize(
    ("ranges", "max_turns"),
    [
        ([(5, 5)], 4),
        ([(0, 2)], 4),  # the head
        ([(21, 23)], 4),  # the tail
        ([(3, 4), (9, 13)], 3),
        ([(1, 1), (7, 8), (16, 16)], 6),
    ],
)
def test_rechunk_after_delete_names_only_live_turns(
    backend_url: str, ranges: list[tuple[int, int]], max_turns: int
) -> None:
    path = backend_url
    deleted = {seq for first, last in ranges for seq in range(first, last + 1)}
    with _open(path, 1, 4) as memory:
        memory.add_turns("c", make_turns(TEXTS))
        memory.flush()
        for first, last in ranges:
            memory.delete("c", turn_range=(first, last))
        memory.flush()
        _check_no_deleted_turn_is_named(memory, deleted)
    # a new cut (other chunk sizes) from the stored turns
    with _open(path, 2, max_turns) as memory:
        assert memory.rechunk("c") == 1
        memory.flush()
        _check_no_deleted_turn_is_named(memory, deleted)
    # and a re-cut under the same policy, then a late delete after it
    with _open(path, 2, max_turns) as memory:
        memory.rechunk()
        memory.flush()
        memory.delete("c", turn_range=(18, 18))
        memory.flush()
        _check_no_deleted_turn_is_named(memory, deleted | {18})
