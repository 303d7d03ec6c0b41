"""Write path audit: chunk time spans, and marking of everyday chat a user writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmem import Memory
from convmem.governance import GovernancePolicy, MarkTurn, RuleMarker, save_intent


def _mark(text: str) -> tuple[bool, str | None]:
    mark = RuleMarker().mark_one(MarkTurn(1, 1, "user", text, 0.0), GovernancePolicy())
    return mark.keep, mark.category


def test_turns_out_of_time_order_give_a_forward_span_that_time_filters_meet(tmp_path: Path) -> None:
    with Memory.open(f"sqlite:///{tmp_path}/m.db", embedder="hashing") as memory:
        memory.add_turns(
            "c1",
            [
                {"turn_id": 1, "role": "user", "text": "我对花生过敏",
                 "timestamp": "2026-03-02T10:00:00+08:00"},
                {"turn_id": 2, "role": "user", "text": "我住在北京朝阳区",
                 "timestamp": "2026-03-01T10:00:00+08:00"},
            ],
        )  # fmt: skip
        memory.flush()
        day = {"timestamp_range": ["2026-03-02T00:00:00+08:00", "2026-03-02T23:59:59+08:00"]}
        for granularity in ("chunk", "turn"):
            hits = memory.search("花生过敏", min_score=0, granularity=granularity, filters=day)
            assert hits, granularity
        (chunk,) = memory.search("花生过敏", min_score=0, granularity="chunk")
        assert chunk.metadata["timestamp_range"] == [
            "2026-03-01T10:00:00+08:00",
            "2026-03-02T10:00:00+08:00",
        ]
        assert chunk.text.startswith("[上下文：2026-03-01 至 2026-03-02 ")


@pytest.mark.parametrize(
    "text",
    [
        "我对什么过敏？",
        "我有什么忌口吗？",
        "我叫什么名字？",
        "我住在哪里？",
        "我喜欢吃什么？",
        "What do I like to eat?",
        "What's my phone number?",
        "你还记得我对什么过敏吗？",
    ],
)
def test_asking_memory_for_a_fact_does_not_store_the_question_as_one(text: str) -> None:
    assert _mark(text) == (False, None)


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("我对花生过敏，你能推荐个零食吗？", "rule"),
        ("I'm allergic to peanuts, what snacks can I eat?", "rule"),
        ("我是程序员，你有什么推荐吗？", "fact"),
        ("以后别叫我全名好吗？", "rule"),
        ("能提醒我明天开会吗？", "task"),
    ],
)
def test_a_fact_or_request_beside_a_question_is_kept(text: str, category: str) -> None:
    assert _mark(text) == (True, category)


@pytest.mark.parametrize("text", ["Hi, I'm Tom.", "my name's Anna"])
def test_an_english_introduction_keeps_the_name(text: str) -> None:
    assert _mark(text) == (True, "fact")


@pytest.mark.parametrize(
    "text", ["ok thanks, I'll try that", "I will.", "I'll think about it.",
             "Thanks for the advice! I'll definitely keep that in mind."],
)  # fmt: skip
def test_an_acknowledgement_is_not_an_open_task(text: str) -> None:
    assert _mark(text)[1] != "task"


@pytest.mark.parametrize(
    "text", ["I'll go to the dentist on Friday.", "I'll keep my passport in the safe."]
)
def test_a_plan_is_still_a_task(text: str) -> None:
    assert _mark(text) == (True, "task")


@pytest.mark.parametrize(
    "text",
    [
        "Please remember my son's school pickup is at 3:30.",
        "Remember my wife is vegetarian.",
        "我家wifi密码是abc12345，记一下",
    ],
)
def test_everyday_save_requests_pin_what_they_say(text: str) -> None:
    intent = save_intent(text)
    assert intent is not None and intent.self_contained


@pytest.mark.parametrize(
    "text",
    [
        "Remember that time we went skiing in Aspen?",
        "Remember this photo from elementary school? [shares a photo: kids]",
        "Do you remember my dog's name?",
        "我记一下",
    ],
)
def test_recalling_the_past_is_no_save_request(text: str) -> None:
    assert save_intent(text) is None


def test_a_reminiscence_writes_no_pinned_note(tmp_path: Path) -> None:
    with Memory.open(f"sqlite:///{tmp_path}/m.db", embedder="hashing") as memory:
        memory.add_turns(
            "c1",
            [
                {"turn_id": 1, "role": "user", "text": "我对什么过敏？"},
                {"turn_id": 2, "role": "user", "text": "Remember that time we went skiing?"},
            ],
        )
        memory.flush()
        assert memory.notes() == []
        assert memory.pins("c1") == []
