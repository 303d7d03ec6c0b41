"""Random sequences of writes, resends, deletes, re-chunks and purges, run on SQLite and on
PostgreSQL side by side and on a plain model of which turns are live: both backends
answer every step alike, keep exactly the model's live turns, and no search, in either
granularity, returns a deleted turn. SQLite's tenant-wide vector search runs both ways:
exact, and through its HNSW sidecar (which once failed on a tenant whose every vector was
deleted).

The model: a turn is live once accepted, until a range delete covers it; a delete only
deletes what exists (a later turn with that id is accepted), and a deleted turn never
comes back, whatever is resent (duplicates of live turns are skipped, other text for an
id is a conflict that rejects the whole batch).
"""

from __future__ import annotations

import random
import re
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from conftest import drop_schema, postgres_base_url
from convmem import HashingEmbedder, Memory
from convmem.errors import ConvmemError
from convmem.governance import KeepAllMarker

WORDS = ["护照", "杭州", "吉他", "咖啡", "lighthouse", "ferry", "harbor", "西湖", "生日"]
CONVERSATIONS = ("c1", "c2")


@pytest.fixture(params=["scan", "hnsw"])
def stores(request: pytest.FixtureRequest) -> Iterator[dict[str, Memory]]:
    """Both stores; ``hnsw``: SQLite's tenant-wide vector search goes through its HNSW
    sidecar from the first row on (``scan``: it scans exactly while the tenant is small)."""
    base = postgres_base_url()
    schema = "r_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    options: dict[str, Any] = {"ann_min_rows": 0} if request.param == "hnsw" else {}
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        urls = {"sqlite": f"sqlite:///{folder}/m.db", "postgres": f"{base}{joiner}schema={schema}"}
        yield {
            name: stack.enter_context(
                Memory.open(
                    url, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, **options
                )
            )
            for name, url in urls.items()
        }
    drop_schema(base, schema)


def _alike(stores: dict[str, Memory], call: Any) -> Any:
    """``call`` on each store; the answers (or error types) must agree."""
    answers = {}
    for name, memory in stores.items():
        try:
            answers[name] = ("ok", call(memory))
        except ConvmemError as exc:
            answers[name] = ("error", type(exc).__name__)
    first, *others = answers.values()
    assert all(answer == first for answer in others), answers
    return first


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_agree_on_both_backends_and_never_return_deleted_turns(
    stores: dict[str, Memory], seed: int
) -> None:
    rng = random.Random(seed)
    live: dict[tuple[str, int], str] = {}
    deleted: set[tuple[str, int]] = set()
    frontier = dict.fromkeys(CONVERSATIONS, 0)
    for _ in range(rng.randint(8, 20)):
        conversation, roll = rng.choice(CONVERSATIONS), rng.random()
        if roll < 0.5:
            start = frontier[conversation] + rng.choice([0, 0, 1, 3])
            if frontier[conversation] and rng.random() < 0.3:  # resend over known ids
                start = rng.randrange(frontier[conversation])
            turns = []
            for seq in range(start, start + rng.randint(1, 5)):
                key = (conversation, seq)
                same = key in live and rng.random() < 0.7
                text = live[key] if same else f"{rng.choice(WORDS)} {conversation}x{seq}"
                turns.append(
                    {
                        "turn_id": seq,
                        "role": rng.choice(["user", "assistant"]),
                        "text": text,
                        "timestamp": f"2026-01-{1 + seq % 27:02d}T10:00:00Z",
                    }
                )
            outcome, _ = _alike(
                stores, lambda m, c=conversation, t=turns: m.add_turns(c, t).accepted_turn_ids
            )
            if outcome == "ok":
                for turn in turns:
                    key = (conversation, turn["turn_id"])
                    if key not in live and key not in deleted:
                        live[key] = turn["text"]
                frontier[conversation] = max(frontier[conversation], turns[-1]["turn_id"] + 1)
        elif roll < 0.75 and frontier[conversation]:
            low = rng.randrange(frontier[conversation])
            high = min(frontier[conversation] - 1, low + rng.randint(0, 3))
            _alike(
                stores,
                lambda m, c=conversation, r=(low, high): m.delete(c, turn_range=r).turns_deleted,
            )
            for seq in range(low, high + 1):
                if live.pop((conversation, seq), None) is not None:
                    deleted.add((conversation, seq))
        elif roll < 0.87:
            for memory in stores.values():
                memory.run_pending()
            _alike(stores, lambda m, c=conversation: m.rechunk(c))
        else:
            for memory in stores.values():
                memory.run_pending()
            _alike(stores, lambda m: m.purge())
    for memory in stores.values():
        memory.run_pending()
    for conversation in CONVERSATIONS:
        want = {seq: text for (conv, seq), text in live.items() if conv == conversation}
        for memory in stores.values():
            assert {t.seq: t.text for t in memory.recent_turns(conversation, limit=500)} == want
    for word in [*WORDS, *(f"c1x{seq}" for seq in range(0, 30, 2))]:
        found = {}
        for name, memory in stores.items():
            hits = memory.search(word, top_k=50, min_score=0)
            for hit in hits:
                conversation = hit.metadata["conversation_id"]
                (seq, _) = hit.metadata["turn_range"]
                assert (conversation, seq) not in deleted, (name, word, hit.metadata)
                assert hit.text.endswith(live[(conversation, seq)])  # after a role label
            for hit in memory.search(word, top_k=50, min_score=0, granularity="chunk"):
                for conversation, seq in deleted:
                    # nor in its context prefix (topics), read from the turns it holds
                    said = re.search(rf"\b{conversation}x{seq}\b", hit.text)
                    assert said is None, (name, word, seq, hit.text)
            found[name] = sorted(
                (hit.metadata["conversation_id"], *hit.metadata["turn_range"]) for hit in hits
            )
        assert found["sqlite"] == found["postgres"], word
