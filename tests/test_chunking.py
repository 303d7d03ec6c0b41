"""Chunking: stable ids, context prefix, and incremental == batch."""

from __future__ import annotations

import itertools
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import HashingEmbedder, Memory, chunk_id
from convmem.governance import KeepAllMarker
from convmem.ingest import (
    ChunkingPolicy,
    ChunkTurn,
    chunk_pieces,
    plan_chunks,
    render_chunk,
    turn_lines,
)
from helpers import live_chunks, make_turns

BASE = datetime(2026, 2, 2, 10, 0, tzinfo=UTC)

turn_shapes = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "tool"]), st.integers(min_value=1, max_value=260)
    ),
    min_size=1,
    max_size=30,
)


def _turns(shapes: list[tuple[str, int]]) -> list[ChunkTurn]:
    return [
        ChunkTurn(seq, role, "字" * size, BASE + timedelta(minutes=seq))
        for seq, (role, size) in enumerate(shapes)
    ]


def _incremental(
    turns: list[ChunkTurn], cuts: list[int], policy: ChunkingPolicy
) -> list[tuple[int, int]]:
    """Feed turns in batches the way the worker does: keep final chunks, re-plan from the frontier."""
    final: list[tuple[int, int]] = []
    frontier_turns: tuple[ChunkTurn, ...] = ()
    after = -1
    provisional: list[tuple[int, int]] = []
    bounds = [*sorted(set(cuts)), len(turns)]
    seen = 0
    for bound in bounds:
        if bound <= seen:
            continue
        seen = bound
        available = [t for t in turns[:bound] if t.seq > after]
        plans = plan_chunks(available, frontier_turns[-policy.overlap_turns :], policy)
        provisional = []
        for plan in plans:
            if plan.final:
                final.append((plan.start, plan.end))
                frontier_turns = plan.turns
                after = plan.end
            else:
                provisional.append((plan.start, plan.end))
    return final + provisional


@settings(max_examples=300, deadline=None)
@given(turn_shapes, st.lists(st.integers(min_value=0, max_value=30), max_size=6))
def test_incremental_planning_equals_batch(shapes: list[tuple[str, int]], cuts: list[int]) -> None:
    policy = ChunkingPolicy(max_chars=400, max_turns=4, overlap_turns=1)
    turns = _turns(shapes)
    batch = [(p.start, p.end) for p in plan_chunks(turns, [], policy)]
    assert _incremental(turns, cuts, policy) == batch


@settings(max_examples=200, deadline=None)
@given(turn_shapes)
def test_every_turn_is_covered_and_limits_hold(shapes: list[tuple[str, int]]) -> None:
    policy = ChunkingPolicy(max_chars=400, max_turns=4, overlap_turns=1)
    turns = _turns(shapes)
    plans = plan_chunks(turns, [], policy)
    # the turns each plan adds (its turns after the carried overlap) partition the input
    added: list[int] = []
    for previous, current in itertools.pairwise([None, *plans]):
        seqs = [t.seq for t in current.turns]
        if previous is not None and seqs[0] <= previous.end:
            # the carry is exactly the previous chunk's last overlap_turns turns
            carried = [t.seq for t in previous.turns[-policy.overlap_turns :]]
            assert seqs[: len(carried)] == carried
            seqs = seqs[len(carried) :]
        elif previous is not None:
            assert seqs[0] == previous.end + 1  # carry dropped: no gap either
        added.extend(seqs)
    assert added == [t.seq for t in turns]
    for plan in plans:
        assert len(plan.turns) <= policy.max_turns
        # over the character budget only as a lone oversized turn
        if sum(len(t.text) for t in plan.turns) > policy.max_chars:
            assert len(plan.turns) == 1 and len(plan.turns[0].text) > policy.max_chars
    # every chunk but the newest is final
    assert [plan.final for plan in plans[:-1]] == [True] * (len(plans) - 1)


def test_user_turn_stays_with_its_reply() -> None:
    policy = ChunkingPolicy(max_chars=1000, max_turns=3, overlap_turns=1)
    roles = ["user", "assistant", "user", "assistant", "user", "assistant"]
    turns = [ChunkTurn(i, role, f"text {i}", BASE) for i, role in enumerate(roles)]
    plans = plan_chunks(turns, [], policy)
    for plan in plans:
        seqs = [t.seq for t in plan.turns]
        for seq in seqs:
            if roles[seq] == "user" and seq + 1 < len(roles) and plan.final:
                assert seq + 1 in seqs or (seq == plan.end and seq == plan.start)


def test_chunk_id_is_stable_and_unambiguous() -> None:
    assert chunk_id("conv_abc", 18, 19, 1) == chunk_id("conv_abc", 18, 19, 1)
    assert chunk_id("conv_abc", 18, 19, 1).startswith("chk_")
    # concatenation-based ids would collide on these
    assert chunk_id("a1", 2, 3, 1) != chunk_id("a", 12, 3, 1)
    assert chunk_id("a", 1, 23, 1) != chunk_id("a", 12, 3, 1)
    assert chunk_id("conv", 1, 2, 1) != chunk_id("conv", 1, 2, 2)


def test_context_prefix_carries_date_participants_and_topic() -> None:
    policy = ChunkingPolicy()
    turns = [
        ChunkTurn(
            18, "user", "我护照是2025-02-18过期。", datetime(2026, 2, 2, 10, 15, 30, tzinfo=UTC)
        ),
        ChunkTurn(
            19,
            "assistant",
            "了解，您的护照将于2025年2月18日过期。",
            datetime(2026, 2, 2, 10, 15, 32, tzinfo=UTC),
        ),
    ]
    (plan,) = plan_chunks(turns, [], policy)
    record = render_chunk("conv_abc", plan, policy)
    first_line = record.text.splitlines()[0]
    assert first_line.startswith("[上下文：2026-02-02 用户")
    assert "护照" in first_line
    assert record.metadata.turn_range == (18, 19)
    assert record.metadata.speakers == ["user", "assistant"]
    assert record.metadata.participants == ["用户"]
    assert record.metadata.timestamp_range == (
        "2026-02-02T10:15:30+00:00",
        "2026-02-02T10:15:32+00:00",
    )
    assert record.chunk_id == chunk_id("conv_abc", 18, 19, 1)


def test_same_input_twice_gives_same_chunk_ids(tmp_path: Path) -> None:
    texts = [f"第{i}句话，讨论项目进度和预算安排。" * (1 + i % 3) for i in range(14)]
    ids = []
    for name in ("a.db", "b.db"):
        with Memory.open(
            str(tmp_path / name), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
        ) as memory:
            memory.add_turns("c", make_turns(texts))
            memory.flush()
            ids.append(live_chunks(memory, "c"))
    assert ids[0] == ids[1]
    assert len(ids[0]) >= 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(min_value=1, max_value=300), min_size=2, max_size=24),
    st.lists(st.integers(min_value=1, max_value=23), max_size=5),
)
def test_any_split_into_batches_gives_the_same_live_chunks(
    sizes: list[int], cuts: list[int]
) -> None:
    texts = [("护照签证酒店行程" * 40)[:size] + f"#{i}" for i, size in enumerate(sizes)]
    turns = make_turns(texts)
    bounds = [0, *sorted({c for c in cuts if c < len(turns)}), len(turns)]
    with tempfile.TemporaryDirectory() as folder:
        with Memory.open(
            f"{folder}/one.db", embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
        ) as one:
            one.add_turns("c", turns)
            one.flush()
            expected = live_chunks(one, "c")
        with Memory.open(
            f"{folder}/many.db", embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
        ) as many:
            for start, end in itertools.pairwise(bounds):
                if end > start:
                    many.add_turns("c", turns[start:end])
                    many.flush()  # index between batches, so provisional tails really exist
            assert live_chunks(many, "c") == expected


def test_late_turn_fills_a_gap_and_rechunks(memory: Memory, tmp_path: Path) -> None:
    texts = [
        f"turn number {i} about the quarterly budget review and hiring plan" for i in range(12)
    ]
    turns = make_turns(texts)
    memory.add_turns("c", turns[:5] + turns[6:])
    memory.flush()
    memory.add_turns("c", [turns[5]])  # older than the indexed tail: accepted, re-chunked
    memory.flush()
    with Memory.open(
        str(tmp_path / "ref.db"), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as ref:
        ref.add_turns("c", turns)
        ref.flush()
        assert live_chunks(memory, "c") == live_chunks(ref, "c")


def test_a_new_chunk_version_rebuilds_every_chunk(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    texts = [f"第{i}句：关于搬家、装修和预算的讨论。" for i in range(12)]
    with Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0) as memory:
        memory.add_turns("c", make_turns(texts))
        memory.flush()
        memory.delete("c", turn_range=(5, 5))
        memory.flush()
        old = live_chunks(memory, "c")
    policy = ChunkingPolicy(max_chars=600, max_turns=2, overlap_turns=0, version=2)
    with Memory.open(
        path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, chunking=policy
    ) as memory:
        assert memory.rechunk() == 1
        memory.flush()
        new = live_chunks(memory, "c")
        assert not set(old) & set(new)
        assert all(len(text.splitlines()) <= 3 for text, _ in new.values())  # prefix + 2 turns
        versions = {hit.metadata["chunk_version"] for hit in memory.search("预算", top_k=20)}
        assert versions == {2}
        assert not any("第5句" in text for text, _ in new.values())  # deleted stays deleted
        assert all(chunk_id("c", s, e, 2) == cid for cid, (_, (s, e)) in new.items())
    # a process that opens the store without a policy of its own (the CLI, the service)
    # cuts new turns as the rechunk does, instead of going back to the default
    more = [f"第{i}句：关于搬家、装修和预算的讨论。" for i in range(12, 16)]
    with Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0) as memory:
        memory.add_turns("c", make_turns(more, start=12))
        memory.flush()
        versions = {hit.metadata["chunk_version"] for hit in memory.search("预算", top_k=50)}
        assert versions == {2}
        assert all(len(text.splitlines()) <= 3 for text, _ in live_chunks(memory, "c").values())


def test_chunk_pieces_join_back_into_the_text_and_hold_each_turns_words() -> None:
    policy = ChunkingPolicy()
    turns = [
        ChunkTurn(0, "user", "对了，我不吃香菜: 一点都不行", BASE),
        ChunkTurn(1, "assistant", "好的，记住了。", BASE + timedelta(seconds=5), name="小助"),
        ChunkTurn(2, "user", "", BASE + timedelta(seconds=9)),
    ]
    (plan,) = plan_chunks(turns, [], policy)
    record = render_chunk("c", plan, policy)
    offsets = record.metadata.turn_offsets
    pieces = chunk_pieces(record.text, offsets)
    assert "".join(pieces) == record.text
    # each turn's words are a piece of their own (the worker reads them once), labels apart
    lines = turn_lines(record.text, offsets)
    assert lines[0] == "对了，我不吃香菜: 一点都不行"  # a colon inside the words stays in them
    assert all(line in pieces for line in lines)
    assert pieces[0].startswith("[上下文：") and pieces[0].endswith("\n用户: ")
    assert pieces[2] == "\n小助: "
    assert chunk_pieces("caller-made text", []) == ["caller-made text"]
