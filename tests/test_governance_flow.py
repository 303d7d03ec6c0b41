"""Governance through the write and read paths: pins, confirmation, expiry, delete, LLM."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import HashingEmbedder, Memory
from convmem.cli.main import main
from convmem.clock import ManualClock
from convmem.errors import InvalidInputError, NotFoundError
from convmem.governance import LLMMarker, RuleMarker
from helpers import BASE_TIME, live_chunks, make_turns

TRIP = [
    "我下个月要去东京出差。",
    "东京三月天气偏凉，建议带一件外套。",
    "酒店订在哪里比较方便？",
    "新宿站附近交通最方便，去各个区域都很快。",
    "那签证需要准备什么材料？",
    "需要护照、照片、在职证明和银行流水，一般五个工作日出签。",
    "记住这个",
]


@pytest.fixture
def governed(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(str(tmp_path / "g.db"), embedder=HashingEmbedder(), workers=0) as memory:
        yield memory


def _mark(memory: Memory, conversation_id: str, turn_id: int | str) -> Any:
    (item,) = [m for m in memory.marks(conversation_id) if m.turn_id == turn_id]
    return item.mark


def test_every_turn_is_marked_with_a_reason_and_only_kept_turns_are_indexed(
    governed: Memory,
) -> None:
    governed.add_turns("trip", make_turns(TRIP[:6]))
    governed.flush()
    marks = governed.marks("trip")
    assert [m.turn_id for m in marks] == list(range(6))
    assert all(m.mark.reason for m in marks)
    assert [m.mark.keep for m in marks] == [True, False, False, False, False, False]
    assert marks[1].mark.reason.startswith("assistant suggestion")
    assert marks[2].mark.reason.startswith("question without information")
    indexed = {
        seq for _, (_, (lo, hi)) in live_chunks(governed, "trip").items() for seq in (lo, hi)
    }
    assert not indexed & {1, 3, 5}
    texts = "".join(text for text, _ in live_chunks(governed, "trip").values())
    assert "新宿站" not in texts  # dropped turns are not in the long-term index
    # ... but they stay in the event log (recent-turn tier, audit)
    assert [t.text for t in governed.recent_turns("trip")][3] == TRIP[3]


def test_save_request_pins_the_k4_window_before_it(governed: Memory) -> None:
    governed.add_turns("trip", make_turns(TRIP))
    governed.flush()
    (pin,) = governed.pins("trip")
    assert pin.trigger_turn_id == 6
    assert pin.target_turn_ids == [2, 3, 4, 5]  # K=4, covering the latest assistant turn
    assert pin.requires_confirmation is False and pin.status == "confirmed"
    assert pin.importance_boost >= 0.9 and pin.reason == "user_explicit_save"
    answer = _mark(governed, "trip", 5)
    assert answer.keep and answer.user_triggered_save
    assert answer.evidence_level == "S1_ai_inference"  # saved, but still an AI inference
    assert answer.importance >= 0.9 and answer.ttl_seconds == 0
    assert not _mark(governed, "trip", 1).keep  # outside the window
    (note,) = [n for n in governed.notes("trip") if n.kind == "user_pinned_note"]
    assert note.source_turn_ids == [2, 3, 4, 5] and note.pin_id == pin.pin_id
    assert note.subtype == "user_pinned_note" and note.evidence_level == "S1_ai_inference"
    assert "银行流水" in note.text
    hit = governed.search("签证需要什么材料", top_k=1)[0]
    assert "银行流水" in hit.text and hit.metadata["pinned"]


def test_a_pin_in_a_later_batch_re_cuts_chunks_as_if_sent_at_once(tmp_path: Path) -> None:
    results = []
    for name, batches in (("once", [TRIP]), ("split", [TRIP[:6], TRIP[6:]])):
        with Memory.open(str(tmp_path / f"{name}.db"), embedder=HashingEmbedder(), workers=0) as m:
            start = 0
            for batch in batches:
                m.add_turns("trip", make_turns(batch, start=start))
                start += len(batch)
                m.flush()
            results.append(
                (
                    live_chunks(m, "trip"),
                    [(n.note_id, n.status, n.text) for n in m.notes("trip")],
                    [p.model_dump() for p in m.pins("trip")],
                )
            )
    assert results[0] == results[1]
    assert any("新宿站" in text for text, _ in results[1][0].values())


def _timed(texts: list[str], roles: list[str], minutes: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "turn_id": i,
            "role": role,
            "text": text,
            "timestamp": (BASE_TIME + timedelta(minutes=minute)).isoformat(),
        }
        for i, (text, role, minute) in enumerate(zip(texts, roles, minutes, strict=True))
    ]


@pytest.mark.parametrize(
    ("texts", "roles", "minutes", "targets"),
    [
        # no assistant or tool turn to save: which of the user's lines is "this"?
        (["我最近在学吉他。", "周末想去爬山。", "记住这个"], ["user"] * 3, [0, 1, 2], [0, 1]),
        # the latest assistant turn is older than the window: extended to cover it
        (
            ["推荐你试试番茄工作法，每25分钟休息5分钟。", "嗯", "好", "我试试", "行", "记住这个"],
            ["assistant", "user", "user", "user", "user", "user"],
            [0, 1, 2, 3, 4, 5],
            [0, 1, 2, 3, 4],
        ),
        # the save request comes hours after the turns it would pin
        (
            ["机票怎么订最便宜？", "提前两个月在官网订通常最便宜。", "记住这个"],
            ["user", "assistant", "user"],
            [0, 1, 180],
            [0, 1],
        ),
    ],
)
def test_an_ambiguous_target_needs_confirmation(
    governed: Memory, texts: list[str], roles: list[str], minutes: list[int], targets: list[int]
) -> None:
    governed.add_turns("c", _timed(texts, roles, minutes))
    governed.flush()
    (pin,) = governed.pins("c")
    assert pin.target_turn_ids == targets
    assert pin.requires_confirmation and pin.status == "pending"
    (note,) = governed.notes("c", status="pending")
    assert note.requires_confirmation and note.kind == "user_pinned_note"
    assert all(_mark(governed, "c", t).requires_confirmation for t in targets)
    hits = governed.search(texts[0], top_k=3)
    assert hits and hits[0].pending  # retrieval shows it as awaiting confirmation


def test_a_turn_hit_is_pending_only_when_its_own_turn_awaits_confirmation(governed: Memory) -> None:
    texts = [
        "我对花生过敏。",
        "我喜欢靠窗的座位。",
        "机票怎么订最便宜？",
        "提前两个月在官网订通常最便宜，周二价格最低。",
        "酒店呢？",
        "酒店提前一周订就行。",
        "记住这个",
    ]
    roles = ["user", "user", "user", "assistant", "user", "assistant", "user"]
    governed.add_turns("c", _timed(texts, roles, [0, 1, 2, 3, 4, 5, 180]))
    governed.flush()
    (pin,) = governed.pins("c")
    assert pin.status == "pending" and pin.target_turn_ids == [2, 3, 4, 5]
    # one chunk holds the confirmed preference (turn 1) beside the pending targets 2 and 3
    (chunk,) = [
        hit
        for hit in governed.search("座位 机票", top_k=5, granularity="chunk")
        if {1, 2} <= set(hit.metadata["turn_seqs"])
    ]
    assert chunk.pending and chunk.metadata["pending_seqs"] == [2, 3]

    def turn_flags() -> dict[int, tuple[bool, bool, bool]]:
        return {
            hit.metadata["turn_range"][0]: (
                hit.pending,
                hit.metadata["requires_confirmation"],
                hit.metadata["pinned"],
            )
            for hit in governed.search("座位 机票", top_k=5)
        }

    flags = turn_flags()
    assert flags[1] == (False, False, False)  # not its neighbours' pending pin
    assert flags[2] == (True, True, True)

    def found(**filters: bool) -> list[int]:
        hits = governed.search("座位 机票 花生", top_k=10, filters=filters, min_score=0)
        return sorted(hit.metadata["turn_range"][0] for hit in hits)

    # a filter on these flags is met by each turn's own (a chunk's says "any of its turns")
    assert found(pinned=True) == found(requires_confirmation=True) == [2, 3, 4, 5]
    assert found(pinned=False) == found(requires_confirmation=False) == [0, 1]
    chunks = governed.search("座位", top_k=10, filters={"pinned": False}, granularity="chunk")
    assert chunks == []  # both chunks hold a pinned turn
    (note,) = governed.notes("c", status="pending")
    governed.update_note(note.note_id, confirm=True)
    governed.flush()
    assert turn_flags()[2] == (False, False, True)
    # a chunk cut before the worker listed its pending turns: every turn keeps the chunk's
    # flag, as before
    conn = governed.store._db()
    conn.execute("UPDATE chunks SET metadata = json_remove(metadata, '$.pinned_seqs')")
    assert turn_flags()[1] == (False, False, True)


def test_a_turn_hit_carries_its_own_category_and_importance(governed: Memory) -> None:
    """A turn hit took its chunk's category and importance (its most important turn's), so
    a seat preference beside an allergy came back as a rule, and a filter on category or
    importance returned turns that did not meet it."""
    lines = ["我下个月要去东京出差", "好的", "我喜欢靠窗的座位", "记下了", "我对花生过敏", "好的"]
    governed.add_turns("c", make_turns(lines))
    governed.flush()
    question = "座位 花生 东京"

    def found(**filters: Any) -> dict[str, tuple[str, float]]:
        hits = governed.search(question, top_k=10, filters=filters or None, min_score=0)
        return {
            hit.text.split(": ", 1)[1]: (hit.metadata["category"], hit.metadata["importance"])
            for hit in hits
        }

    everything = found()
    assert everything["我喜欢靠窗的座位"] == ("preference", 0.7)
    assert everything["我对花生过敏"] == ("rule", 0.8)
    assert set(found(category="rule")) == {"我对花生过敏"}
    # the preference's chunk is a rule's (its most important turn), and still holds it
    assert set(found(category="preference")) == {"我喜欢靠窗的座位"}
    assert set(found(category={"$in": ["preference", "x"]})) == {"我喜欢靠窗的座位"}
    assert "我对花生过敏" not in found(category={"$ne": "rule"})
    assert "我喜欢靠窗的座位" in found(category={"$ne": "rule"})
    assert set(found(importance={"$gte": 0.7})) == {"我对花生过敏", "我喜欢靠窗的座位"}
    assert all(value < 0.7 for _, value in found(importance={"$lt": 0.7}).values())
    assert "我下个月要去东京出差" in found(importance={"$lt": 0.7})
    (chunk,) = governed.search("座位", top_k=3, granularity="chunk", min_score=0)
    assert chunk.metadata["category"] == "rule"  # a chunk keeps its most important turn's


def test_a_self_contained_save_pins_itself(governed: Memory) -> None:
    governed.add_turns("c", make_turns(["今天好累。", "早点休息吧。", "记住：我对青霉素过敏"]))
    governed.flush()
    (pin,) = governed.pins("c")
    assert pin.target_turn_ids == [2] and not pin.requires_confirmation
    assert _mark(governed, "c", 2).keep and _mark(governed, "c", 2).user_triggered_save


def test_confirmation_loop_end_to_end(governed: Memory) -> None:
    texts = ["我最近在学吉他。", "周末想去爬山。", "记住这个"]
    governed.add_turns("c", _timed(texts, ["user"] * 3, [0, 1, 2]))
    governed.flush()
    (note,) = governed.notes("c", status="pending")
    confirmed = governed.update_note(note.note_id, confirm=True, evidence_level="S3_user_confirmed")
    assert confirmed.status == "confirmed" and not confirmed.requires_confirmation
    assert confirmed.evidence_level == "S3_user_confirmed"
    governed.flush()
    assert governed.notes("c", status="pending") == []
    assert not _mark(governed, "c", 0).requires_confirmation
    hits = governed.search("吉他", top_k=3)
    assert hits and not hits[0].pending and not hits[0].metadata["requires_confirmation"]
    # the verdict survives re-derivation (more turns arrive and the tail is re-planned)
    governed.add_turns("c", _timed([*texts, "好的。"], ["user"] * 3 + ["assistant"], [0, 1, 2, 3]))
    governed.flush()
    assert governed.note(note.note_id).status == "confirmed"


def test_rejecting_a_pin_unpins_its_targets(governed: Memory) -> None:
    texts = ["机票怎么订最便宜？", "提前两个月在官网订通常最便宜，周二价格最低。", "记住这个"]
    governed.add_turns("c", _timed(texts, ["user", "assistant", "user"], [0, 1, 180]))
    governed.flush()
    assert any("周二价格最低" in hit.text for hit in governed.search("机票 周二", top_k=5))
    (note,) = governed.notes("c", status="pending")
    rejected = governed.update_note(note.note_id, confirm=False)
    assert rejected.status == "rejected"
    governed.flush()
    assert governed.notes("c") == []  # never retrieved again ...
    assert [n.note_id for n in governed.notes("c", status="rejected")] == [note.note_id]  # audit
    assert not _mark(governed, "c", 1).keep  # back to its own mark: speculation, dropped
    assert not any("周二价格最低" in hit.text for hit in governed.search("机票 周二", top_k=5))
    assert governed.pins("c")[0].status == "rejected"


def test_update_note_errors_name_the_field(governed: Memory) -> None:
    with pytest.raises(NotFoundError):
        governed.update_note("note_doesnotexist")
    with pytest.raises(InvalidInputError) as caught:
        governed.update_note("n1")
    assert caught.value.field == "note_id"
    governed.add_turns("c", make_turns(["我喜欢靠窗的座位。"]))
    governed.flush()
    (note,) = governed.notes("c")
    with pytest.raises(InvalidInputError) as caught:
        governed.update_note(note.note_id, confirm="yes")  # type: ignore[arg-type]
    assert caught.value.field == "confirm"
    with pytest.raises(InvalidInputError) as caught:
        governed.update_note(note.note_id, evidence_level="S9")
    assert caught.value.field == "evidence_level"
    other = governed.for_tenant("other")
    with pytest.raises(NotFoundError):
        other.update_note(note.note_id)  # notes never cross tenants
    assert other.notes() == []


def test_a_user_decision_keeps_the_proposal_it_confirms(governed: Memory) -> None:
    governed.add_turns(
        "c",
        make_turns(
            [
                "预算有限，选哪个方案？",
                "建议选B方案：成本低20%，工期两周。",
                "好，就按这个方案定了。",
            ]
        ),
    )
    governed.flush()
    proposal = _mark(governed, "c", 1)
    assert proposal.keep and proposal.subtype == "decision"
    assert proposal.evidence_level == "S3_user_confirmed"
    assert any("B方案" in hit.text for hit in governed.search("选了哪个方案", top_k=3))


def test_tenant_policy_sets_ttls_and_expired_memory_is_never_returned(tmp_path: Path) -> None:
    clock = ManualClock()
    with Memory.open(
        str(tmp_path / "g.db"), embedder=HashingEmbedder(), workers=0, clock=clock
    ) as governed:
        _ttl_flow(governed, clock)


def _ttl_flow(governed: Memory, clock: ManualClock) -> None:
    governed.set_policy({"rules": {"task(open)": {"ttl_seconds": 1}}})
    assert governed.policy().rule("task(open)").ttl_seconds == 1
    assert governed.for_tenant("other").policy().rule("task(open)").ttl_seconds == 30 * 86400
    governed.add_turns(
        "c", make_turns(["提醒我明天给王经理打电话。", "好的。", "我喜欢喝美式咖啡。"])
    )
    governed.flush()
    task = _mark(governed, "c", 0)
    assert task.category == "task" and task.ttl_seconds == 1
    assert any("王经理" in n.text for n in governed.notes("c"))
    assert any("王经理" in hit.text for hit in governed.search("王经理 电话", top_k=5))
    clock.advance(1.5)
    # expired before any sweep: never returned
    assert not any("王经理" in hit.text for hit in governed.search("王经理 电话", top_k=5))
    assert not any("王经理" in n.text for n in governed.notes("c"))
    swept = governed.sweep_expired()
    assert swept == {"turn_marks": 1, "notes": 1}
    governed.flush()
    assert governed.marks("c")[0].expired is True
    assert not _mark(governed, "c", 0).keep
    assert any("美式咖啡" in hit.text for hit in governed.search("咖啡", top_k=3))  # the rest stays
    governed.purge()
    conn = governed.store._db()
    assert conn.execute("SELECT count(*) FROM notes WHERE text LIKE '%王经理%'").fetchone()[0] == 0
    with pytest.raises(InvalidInputError) as caught:
        governed.set_policy({"rules": {"task(open)": {"ttl_seconds": -1}}})
    assert caught.value.field == "policy.rules.task(open).ttl_seconds"


def test_delete_cascades_to_notes_and_pins(governed: Memory) -> None:
    governed.add_turns("trip", make_turns([*TRIP, "好的。", "我喜欢靠窗的座位。"]))
    governed.flush()
    notes = {n.kind: n for n in governed.notes("trip")}
    assert set(notes) == {"turn", "user_pinned_note"}
    governed.delete("trip", turn_range=(6, 6))  # the save request itself
    governed.flush()
    assert governed.pins("trip") == []
    with pytest.raises(NotFoundError):
        governed.note(notes["user_pinned_note"].note_id)
    assert not _mark(governed, "trip", 5).user_triggered_save  # un-pinned
    assert not any("银行流水" in t for t, _ in live_chunks(governed, "trip").values())
    governed.delete("trip", turn_range=(8, 8))
    governed.flush()
    assert governed.notes("trip") == []
    governed.purge()
    conn = governed.store._db()
    assert conn.execute("SELECT count(*) FROM notes").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM marks WHERE seq IN (6, 8)").fetchone()[0] == 0


def test_deleting_some_of_a_pins_targets_keeps_the_pin_its_verdict_and_its_note(
    governed: Memory,
) -> None:
    texts = [
        "我下个月要搬家到杭州西湖区。",
        "我的新地址是文三路88号。",
        "邮编是310000。",
        "记住这个",
    ]
    governed.add_turns("c", _timed(texts, ["user"] * 4, [0, 1, 2, 3]))
    governed.flush()
    (note,) = governed.notes("c", status="pending")
    assert note.source_turn_ids == [0, 1, 2]
    governed.update_note(note.note_id, confirm=True, evidence_level="S3_user_confirmed")
    governed.flush()
    governed.delete("c", turn_range=(2, 2))
    # hidden at once: its text still says the deleted turn until the worker rewrites it
    assert governed.notes("c") == []
    governed.flush()
    (pin,) = governed.pins("c")
    assert pin.status == "confirmed" and pin.target_turn_ids == [0, 1]
    kept = governed.note(note.note_id)
    assert kept.status == "confirmed" and kept.evidence_level == "S3_user_confirmed"
    assert kept.source_turn_ids == [0, 1]
    assert "310000" not in kept.text and "文三路88号" in kept.text
    assert not _mark(governed, "c", 1).requires_confirmation
    hits = governed.search("新地址 文三路", top_k=3, filters={"conversation_id": "c"})
    assert hits and not any(hit.pending for hit in hits)
    assert not any("310000" in hit.text for hit in governed.search("邮编", top_k=5, min_score=0))
    # a pin whose every target is deleted loses its verdict: the save request, alone
    # now, asks again (as one sent with nothing before it does)
    governed.delete("c", turn_range=(0, 1))
    governed.flush()
    (pin,) = governed.pins("c")
    assert pin.status == "pending" and pin.target_turn_ids == [3]
    assert not any("文三路" in n.text or "西湖区" in n.text for n in governed.notes("c"))


def test_an_expired_turn_leaves_every_turn_read_before_any_sweep(tmp_path: Path) -> None:
    clock = ManualClock()
    with Memory.open(
        str(tmp_path / "g.db"), embedder=HashingEmbedder(), workers=0, clock=clock
    ) as governed:
        governed.add_turns("c", make_turns(["我这两天感冒了，嗓子疼得厉害。", "多喝热水。"]))
        governed.flush()
        cold = _mark(governed, "c", 0)
        assert cold.keep and cold.ttl_seconds == 3 * 86400  # fact(transient)
        assert [t.seq for t in governed.recent_turns("c", kept_only=True)] == [0]
        deep = {"strategies": ["deep_search", "temporal_search"]}
        scoped = {"conversation_id": "c"}
        assert any(
            hit.tier == "STM" for hit in governed.search("感冒 嗓子疼", hints=deep, filters=scoped)
        )
        clock.advance(3 * 86400 + 1)  # no sweep has run
        assert governed.recent_turns("c", kept_only=True) == []
        assert [t.seq for t in governed.recent_turns("c")] == [1]
        hits = governed.search("感冒 嗓子疼", hints=deep, filters=scoped, min_score=0)
        assert not any("感冒" in hit.text for hit in hits)


def test_every_tier_of_a_hinted_search_meets_the_filters(governed: Memory) -> None:
    governed.add_turns(
        "c",
        make_turns(
            ["我喜欢喝美式咖啡。", "好的。", "我对花生过敏。", "好的记住了。", "我女儿叫小米。"]
        ),
    )
    governed.flush()
    categories = {m.seq: m.mark.category for m in governed.marks("c")}
    assert categories[0] == "preference" and categories[2] == "rule"
    question = "咖啡 花生 过敏 小米"
    every = {"strategies": ["deep_search", "persona_search", "temporal_search"]}
    unfiltered = governed.search(
        question, hints=every, filters={"conversation_id": "c"}, top_k=20, min_score=0
    )
    assert "LTM" in {hit.tier for hit in unfiltered}
    assert {2, 4} <= {hit.metadata["turn_range"][0] for hit in unfiltered if hit.tier != "LTM"}
    assert {hit.metadata.get("category") for hit in unfiltered} >= {"preference", "rule"}
    filters = {"conversation_id": "c", "category": "preference", "turn_range": [0, 1]}
    hits = governed.search(question, hints=every, filters=filters, top_k=20, min_score=0)
    assert hits and all(hit.metadata["category"] == "preference" for hit in hits)
    assert all(hit.metadata["turn_range"] == [0, 0] for hit in hits)  # notes name no turn range
    # a field a note cannot tell (its turns' places) leaves notes out; one it can, not
    rules = governed.search(
        question, hints=every, filters={"conversation_id": "c", "category": "rule"}, min_score=0
    )
    assert "LTM" in {hit.tier for hit in rules}
    assert {hit.metadata["category"] for hit in rules} == {"rule"}
    high = {"conversation_id": "c", "importance": {"$gte": 0.99}}
    assert governed.search(question, filters=high, min_score=0) == []
    assert governed.search(question, hints=every, filters=high, min_score=0) == []
    users = governed.search(
        question, hints=every, filters={"conversation_id": "c", "speakers": "assistant"}
    )
    assert not any(hit.tier == "STM" for hit in users)  # no assistant line says these words


def test_a_short_term_hit_is_pending_when_its_turn_awaits_confirmation(governed: Memory) -> None:
    texts = ["我下个月要搬家到杭州西湖区。", "我的新地址是文三路88号。", "记住这个"]
    governed.add_turns("c", _timed(texts, ["user"] * 3, [0, 1, 2]))
    governed.flush()
    assert _mark(governed, "c", 1).requires_confirmation
    hints = {"strategies": ["temporal_search"]}
    hits = governed.search("新地址 文三路", hints=hints, filters={"conversation_id": "c"})
    stm = [hit for hit in hits if hit.tier == "STM"]
    assert stm and all(hit.pending for hit in stm if hit.metadata["turn_range"][0] < 2)
    assert any(hit.metadata["turn_range"] == [1, 1] and hit.pending for hit in hits)
    pending = governed.search(
        "新地址 文三路",
        hints=hints,
        filters={"conversation_id": "c", "requires_confirmation": False},
    )
    assert not any(hit.metadata["turn_range"][0] in (0, 1) for hit in pending)


class _ChatHandler(BaseHTTPRequestHandler):
    replies: ClassVar[list[str]] = []
    prompts: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).prompts.append(body)
        content = type(self).replies.pop(0) if type(self).replies else "{}"
        payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat_url() -> Iterator[str]:
    _ChatHandler.replies = []
    _ChatHandler.prompts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_llm_marker_failures_retry_and_store_nothing_partial(tmp_path: Path, chat_url: str) -> None:
    good = [
        {
            "turn_id": 0,
            "keep": True,
            "category": "preference",
            "evidence_level": "S0_user_claim",
            "importance": 0.7,
            "ttl_seconds": 999,
            "forget_policy": "temporary",
            "reason": "偏好",
        },
        {"turn_id": 1, "keep": False, "reason": "寒暄"},
    ]
    wrong_enum = [dict(good[0], category="hobby"), good[1]]
    bad_span = [dict(good[0], span={"start": 0, "end": 500}), good[1]]
    _ChatHandler.replies = [
        "this is not json",
        json.dumps({"marks": wrong_enum}),
        json.dumps({"marks": bad_span}),
        json.dumps({"marks": good}),
    ]
    marker = LLMMarker(chat_url, "test-model")
    with Memory.open(
        str(tmp_path / "llm.db"),
        embedder=HashingEmbedder(),
        workers=0,
        marker=marker,
        retry_base_seconds=0.05,
    ) as memory:
        receipt = memory.add_turns("c", make_turns(["我喜欢靠窗的座位。", "好的。"]))
        assert receipt.job_id is not None
        conn = memory.store._db()
        for attempt, code in enumerate(
            ("marker_bad_json", "marker_invalid_marks", "marker_invalid_marks"), start=1
        ):
            while memory.job(receipt.job_id).attempts < attempt:
                memory.run_pending()
                time.sleep(0.02)
            job = memory.job(receipt.job_id)
            assert job.status == "pending" and job.error_code == code
            if code == "marker_invalid_marks":
                assert "hobby" in job.error_message or "span" in job.error_message
            assert job.next_retry_at is not None and job.error_message
            for table in ("marks", "notes", "pins"):  # nothing half-applied
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
            assert live_chunks(memory, "c") == {}
        memory.flush(timeout=10)
        assert memory.job(receipt.job_id).status == "done"
        mark = _mark(memory, "c", 0)
        assert mark.keep and mark.ttl_seconds == 0 and mark.forget_policy == "until_changed"
        assert [m.marker for m in memory.marks("c")] == ["llm:test-model"] * 2
    marker.close()
    prompt = _ChatHandler.prompts[0]["messages"][0]["content"]
    assert "| task(open) | temporary | 2592000 |" in prompt  # the table is in the prompt
    assert "json" in prompt.lower()


def test_marks_notes_and_policy_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cli.db")
    data = tmp_path / "t.jsonl"
    texts = ["我最近在学吉他。", "周末想去爬山。", "记住这个"]
    data.write_text(
        "\n".join(
            json.dumps({"conversation_id": "c", **turn}, ensure_ascii=False)
            for turn in _timed(texts, ["user"] * 3, [0, 1, 2])
        ),
        encoding="utf-8",
    )
    base = ["--store", store, "--embedder", "hashing"]
    assert main([*base, "ingest", str(data)]) == 0
    capsys.readouterr()
    assert main([*base, "marks", "c"]) == 0
    out = capsys.readouterr().out
    assert "PINNED" in out and "PENDING" in out and "save request" in out
    assert main([*base, "notes", "--status", "pending", "--json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)
    assert main([*base, "note", "confirm", note["note_id"], "--evidence", "S3_user_confirmed"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "confirmed"
    policy = tmp_path / "p.json"
    policy.write_text('{"rules": {"note": {"ttl_seconds": 60}}}')
    assert main([*base, "policy", "set", str(policy)]) == 0
    assert json.loads(capsys.readouterr().out)["rules"]["note"]["ttl_seconds"] == 60
    policy.write_text('{"rules": {"nope": {}}}')
    assert main([*base, "policy", "set", str(policy)]) == 2
    assert "policy.rules.nope" in capsys.readouterr().err


POOL = [
    ("user", "我下周三要去上海开会。"),
    ("assistant", "上海这几天可能会下雨，建议带伞。"),
    ("user", "记住这个"),
    ("user", "我喜欢安静的酒店。"),
    ("assistant", "推荐外滩附近的两家酒店，价格适中。"),
    ("user", "好，就按这个定了。"),
    ("user", "哈哈好的"),
    ("tool", '{"hotel": "外滩酒店", "price": 680}'),
    ("user", "提醒我周二订车票。"),
    ("user", "记住：我的会员号是 88123"),
    ("assistant", "你的护照还有效吗？"),
    ("user", "护照明年三月过期。"),
]


def _pool_turns(picks: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "turn_id": i,
            "role": POOL[p][0],
            "text": POOL[p][1],
            "timestamp": (datetime(2026, 3, 1, tzinfo=UTC) + timedelta(minutes=i)).isoformat(),
        }
        for i, p in enumerate(picks)
    ]


def _state(memory: Memory) -> tuple[Any, ...]:
    """Everything governance and chunking derive, for comparing two stores."""
    return (
        live_chunks(memory, "c"),
        [(m.turn_id, m.mark) for m in memory.marks("c")],
        [p.model_dump() for p in memory.pins("c")],
        sorted((n.note_id, n.status, n.text) for n in memory.notes("c")),
    )


@given(
    picks=st.lists(st.integers(0, len(POOL) - 1), min_size=3, max_size=16),
    cuts=st.lists(st.integers(1, 15), max_size=5),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_split_gives_the_same_marks_chunks_pins_and_notes(
    picks: list[int], cuts: list[int]
) -> None:
    turns = _pool_turns(picks)
    bounds = sorted({c for c in cuts if c < len(turns)})
    batches = [turns[a:b] for a, b in zip([0, *bounds], [*bounds, len(turns)], strict=True)]
    states = []
    with tempfile.TemporaryDirectory() as folder:
        for name, parts in (("once", [turns]), ("split", batches)):
            with Memory.open(
                f"{folder}/{name}.db", embedder=HashingEmbedder(), workers=0, marker=RuleMarker()
            ) as memory:
                for part in parts:
                    memory.add_turns("c", part)
                    memory.flush()
                states.append(_state(memory))
    assert states[0] == states[1]


def test_an_answered_assistant_question_is_kept_as_context(governed: Memory) -> None:
    governed.add_turns(
        "c",
        make_turns(
            [
                "I'm flying to Tokyo next month.",
                "Is your passport still valid?",
                "It expires on 18 February 2025.",
                "Better renew it soon, it usually takes weeks.",
            ]
        ),
    )
    governed.flush()
    assert [m.mark.keep for m in governed.marks("c")] == [True, True, True, False]
    question = _mark(governed, "c", 1)
    assert question.evidence_level == "S1_ai_inference" and "answered by turn 2" in question.reason
    hit = governed.search("when does my passport expire", top_k=1)[0]
    assert "18 February" in hit.text and "passport" in (hit.context or "")


def test_worker_threads_sweep_expired_memory(tmp_path: Path) -> None:
    clock = ManualClock()
    with Memory.open(
        str(tmp_path / "s.db"),
        embedder=HashingEmbedder(),
        workers=1,
        sweep_seconds=60,
        policy={"rules": {"task(open)": {"ttl_seconds": 3600}}},
        clock=clock,
    ) as memory:
        memory.add_turns("c", make_turns(["提醒我明天给王经理打电话。"]))
        memory.flush()
        assert memory.marks("c")[0].mark.ttl_seconds == 3600  # the product policy applies
        assert live_chunks(memory, "c")
        clock.advance(2 * 3600)  # past the TTL and the sweep interval: no sleeping for it
        deadline = time.monotonic() + 15
        while not memory.marks("c")[0].expired and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker thread's next pass
        memory.flush()
        assert memory.marks("c")[0].expired
        assert live_chunks(memory, "c") == {}


@given(
    picks=st.lists(st.integers(0, len(POOL) - 1), min_size=3, max_size=14),
    groups=st.lists(st.integers(0, 3), min_size=14, max_size=14),
    order=st.permutations([0, 1, 2, 3]),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_late_turns_in_any_order_give_the_same_state(
    picks: list[int], groups: list[int], order: list[int]
) -> None:
    turns = _pool_turns(picks)
    batches = [[t for t, g in zip(turns, groups, strict=False) if g == group] for group in order]
    states = []
    with tempfile.TemporaryDirectory() as folder:
        for name, parts in (("once", [turns]), ("late", [b for b in batches if b])):
            with Memory.open(f"{folder}/{name}.db", embedder=HashingEmbedder(), workers=0) as m:
                for part in parts:
                    m.add_turns("c", part)
                    m.flush()
                states.append(_state(m))
    assert states[0] == states[1]
