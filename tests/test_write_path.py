"""Write path: validation names the field, nothing accepted is lost, acks survive kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from convmem import HashingEmbedder, InvalidInputError, Memory, TurnConflictError
from convmem.governance import KeepAllMarker
from helpers import live_chunks, make_turns


def _stored_texts(memory: Memory, conversation_id: str) -> list[str]:
    return [turn.text for turn in memory.recent_turns(conversation_id, limit=10_000)]


def test_receipt_lists_accepted_turns_and_the_job(memory: Memory) -> None:
    receipt = memory.add_turns("c", make_turns(["你好", "你好，有什么可以帮您？"]))
    assert receipt.accepted_turn_ids == [0, 1]
    assert receipt.duplicate_turn_ids == []
    assert receipt.job_id is not None
    assert memory.job(receipt.job_id).status == "pending"
    memory.flush()
    assert memory.job(receipt.job_id).status == "done"


def test_resending_identical_turns_is_a_noop(memory: Memory) -> None:
    turns = make_turns(["我住在杭州。", "好的，记下了。"])
    memory.add_turns("c", turns)
    memory.flush()
    before = live_chunks(memory, "c")
    again = memory.add_turns("c", turns)
    assert again.accepted_turn_ids == []
    assert again.duplicate_turn_ids == [0, 1]
    assert again.job_id is None
    memory.flush()
    assert live_chunks(memory, "c") == before
    assert len(_stored_texts(memory, "c")) == 2


def test_string_turn_ids_map_to_their_trailing_digits(memory: Memory) -> None:
    turns = [
        {
            "turn_id": "t0007",
            "speaker": "user",
            "text": "第七句",
            "timestamp_iso": "2025-12-21T10:00:00Z",
        },
        {
            "turn_id": "t0012",
            "speaker": "assistant",
            "text": "第十二句",
            "timestamp_iso": "2025-12-21T10:00:05Z",
        },
    ]
    receipt = memory.add_turns("c", turns)
    assert receipt.accepted_turn_ids == ["t0007", "t0012"]
    memory.flush()
    (only,) = live_chunks(memory, "c").values()
    assert only[1] == (7, 12)


@pytest.mark.parametrize(
    ("turn", "field", "words"),
    [
        ({"turn_id": 0, "role": "user", "text": "   "}, "turns[0].text", "empty"),
        ({"turn_id": 0, "role": "robot", "text": "hi"}, "turns[0].role", "user"),
        (
            {"turn_id": 0, "role": "user", "text": "hi", "timestamp": "yesterday"},
            "turns[0].timestamp",
            "",
        ),
        (
            {"turn_id": 0, "role": "user", "text": "hi", "timestamp": "2026-02-02T10:00:00"},
            "turns[0].timestamp",
            "zone",
        ),
        ({"turn_id": "abc", "role": "user", "text": "hi"}, "turns[0].turn_id", "digits"),
        ({"turn_id": -3, "role": "user", "text": "hi"}, "turns[0].turn_id", "0..2**62"),
        ({"turn_id": 10**30, "role": "user", "text": "hi"}, "turns[0].turn_id", "0..2**62"),
        ({"turn_id": "t" + "9" * 30, "role": "user", "text": "hi"}, "turns[0].turn_id", "2**62"),
        ({"turn_id": True, "role": "user", "text": "hi"}, "turns[0].turn_id", "True"),
        ({"turn_id": 0, "role": "user", "text": "bad \ud800 surrogate"}, "turns[0].text", "UTF-8"),
        ({"turn_id": 0, "role": "user", "text": b"\xff\xfe bytes"}, "turns[0]", "UTF-8"),
        ({"turn_id": 0, "role": "user", "text": "x" * 40_000}, "turns[0].text", "limit"),
        ({"turn_id": 0, "role": "user", "text": "hi", "colour": "red"}, "turns[0].colour", ""),
        (
            {"turn_id": 0, "role": "user", "speaker": "assistant", "text": "hi"},
            "turns[0]",
            "disagree",
        ),
    ],
)
def test_bad_turn_is_rejected_with_its_field(
    memory: Memory, turn: dict, field: str, words: str
) -> None:
    memory.add_turns("c", make_turns(["已经接受的一句话"], start=100))
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns("c", [make_turns(["好的一句"], start=200)[0], turn])
    error = caught.value
    shifted = field.replace("turns[0]", "turns[1]")
    assert error.field is not None and error.field.startswith(shifted), error.errors
    assert words in str(error)
    # nothing of the rejected batch was stored, and what was accepted before is intact
    assert _stored_texts(memory, "c") == ["已经接受的一句话"]


def test_a_nul_an_earlier_release_stored_in_sqlite_still_reads_rechunks_and_deletes(
    memory: Memory,
) -> None:
    """SQLite kept a NUL in a turn or a caller's chunk before the entry points refused it;
    such a store still works: the worker re-chunks those turns, reads return them, and they
    delete as any other."""
    memory.add_turns("c", make_turns(["护照下个月过期", "好的，记下了", "我住在杭州"]))
    memory.upsert_chunks(
        [
            {
                "chunk_id": "k1",
                "text": "靠窗的座位",
                "metadata": {"conversation_id": "c", "turn_range": [0, 0]},
            }
        ]
    )
    memory.flush()
    db = memory.store._db()
    db.execute("UPDATE turns SET text = ? WHERE seq = 2", ("我住在\x00杭州",))
    db.execute("UPDATE chunks SET text = ? WHERE chunk_id = 'k1'", ("靠窗\x00的座位",))
    db.commit()
    assert memory.rechunk("c") >= 1
    memory.flush()
    assert _stored_texts(memory, "c")[-1] == "我住在\x00杭州"
    assert [record.text for record in memory.chunks("c")] == ["靠窗\x00的座位"]
    assert any("杭州" in hit.text for hit in memory.search("杭州", min_score=0))
    assert memory.delete("c", turn_range=(2, 2)).turns_deleted == 1
    memory.flush()
    assert not any("杭州" in hit.text for hit in memory.search("杭州", min_score=0))


def test_every_problem_in_a_batch_is_reported(memory: Memory) -> None:
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns(
            "c",
            [
                {"turn_id": 0, "role": "user", "text": ""},
                {"turn_id": 1, "role": "nobody", "text": "x"},
            ],
        )
    fields = [error["field"] for error in caught.value.errors]
    assert fields == ["turns[0].text", "turns[1].role"]


def test_an_order_problem_is_reported_with_the_other_problems(memory: Memory) -> None:
    """docs/quickstart.md: a rejected call lists every problem, so one round mends them."""
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns(
            "c",
            [
                {"turn_id": 9, "role": "user", "text": "a"},
                {"turn_id": 8, "role": "user", "text": "b"},
                {"turn_id": 10, "role": "user", "text": " "},
            ],
        )
    fields = [error["field"] for error in caught.value.errors]
    assert fields == ["turns[1].turn_id", "turns[2].text"]
    assert memory.recent_turns("c") == []  # nothing of a refused batch is stored


def test_out_of_order_ids_within_a_batch_are_rejected(memory: Memory) -> None:
    turns = make_turns(["a", "b", "c"])
    turns[1], turns[2] = turns[2], turns[1]
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns("c", turns)
    assert caught.value.field == "turns[2].turn_id"
    assert "increase" in str(caught.value)


def test_same_turn_id_with_other_text_is_a_conflict_naming_the_turn(memory: Memory) -> None:
    memory.add_turns("c", make_turns(["原来的话", "回答"]))
    changed = make_turns(["改过的话", "回答"])
    with pytest.raises(TurnConflictError) as caught:
        memory.add_turns("c", changed + make_turns(["新的一句"], start=2))
    assert caught.value.field == "turns[0].text"
    assert "turn 0" in str(caught.value)
    # the new turn in the rejected batch was not stored either
    assert _stored_texts(memory, "c") == ["原来的话", "回答"]


@pytest.mark.parametrize("conversation_id", ["", "   ", "x" * 201, 42, None])
def test_bad_conversation_id(memory: Memory, conversation_id: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns(conversation_id, make_turns(["hi"]))  # type: ignore[arg-type]
    assert caught.value.field == "conversation_id"


def test_empty_batch_is_rejected(memory: Memory) -> None:
    with pytest.raises(InvalidInputError) as caught:
        memory.add_turns("c", [])
    assert caught.value.field == "turns"


def test_threaded_worker_indexes_without_flush_calls(threaded_memory: Memory) -> None:
    threaded_memory.add_turns("c", make_turns(["后台线程会自动建立索引。", "是的。"]))
    deadline = time.monotonic() + 10
    while not live_chunks(threaded_memory, "c") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_chunks(threaded_memory, "c")


WRITER = r"""
import json, sys
from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
path, start = sys.argv[1], int(sys.argv[2])
memory = Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=1)
seq = start
while True:
    turns = [{"turn_id": seq + i, "role": "user" if (seq + i) % 2 == 0 else "assistant",
              "text": f"消息 {seq + i}：关于项目进度的讨论", "timestamp": "2026-02-02T10:00:00+08:00"}
             for i in range(3)]
    receipt = memory.add_turns("c", turns)
    print(json.dumps(receipt.accepted_turn_ids), flush=True)
    seq += 3
"""


@pytest.mark.slow
def test_acknowledged_turns_survive_kill_9_and_get_indexed(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    rng = random.Random(7)
    acknowledged: list[int] = []
    start = 0
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, str(script), path, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        # let it acknowledge some batches, then kill it at a random moment
        wanted = rng.randint(3, 40)
        lines = []
        while len(lines) < wanted:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        time.sleep(rng.random() * 0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lines.extend(proc.stdout.readlines())  # acks printed before the kill landed
        proc.stdout.close()
        for line in lines:
            acknowledged.extend(json.loads(line))
        start = max(acknowledged) + 1000  # the next writer starts on fresh ids
    with Memory.open(path, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=1) as memory:
        memory.flush(timeout=60)
        stored = {turn.seq for turn in memory.recent_turns("c", limit=100_000)}
        assert set(acknowledged) <= stored
        covered: set[int] = set()
        for _, (_, (low, high)) in live_chunks(memory, "c").items():
            covered.update(seq for seq in stored if low <= seq <= high)
        assert covered == stored  # every stored turn is in a live chunk once flushed
        # exactly once: no duplicate stored rows for a sequence number
        count = (
            memory.store._db()
            .execute("SELECT count(*) FROM turns WHERE conversation_id='c'")
            .fetchone()[0]
        )
        assert count == len(stored)


def test_a_deleted_turn_id_is_retired(memory: Memory) -> None:
    memory.add_turns("c", make_turns(["秘密内容", "好的"]))
    memory.flush()
    memory.delete("c", turn_range=(0, 0))
    again = memory.add_turns("c", make_turns(["秘密内容"]))
    assert again.accepted_turn_ids == [] and again.duplicate_turn_ids == [0]
    with pytest.raises(TurnConflictError) as caught:
        memory.add_turns("c", make_turns(["新的内容"]))
    assert "retired" in str(caught.value) and caught.value.field == "turns[0].turn_id"
    memory.purge()  # the hash survives purge, so the rule holds afterwards too
    assert memory.add_turns("c", make_turns(["秘密内容"])).duplicate_turn_ids == [0]
