"""Seed 002 contracts: validation rules, kept content, the policy table, the rule marker."""

from __future__ import annotations

from typing import Any

import pytest

from convmem.errors import InvalidInputError
from convmem.governance import (
    DEFAULT_TTL_POLICY,
    GovernancePolicy,
    LLMMarker,
    MarkTurn,
    RuleMarker,
    TurnMark,
    kept_content,
    load_policy,
    parse_marks,
    policy_key,
    save_intent,
    validate_marks,
)
from convmem.governance.policy import DAY

TURNS = [
    {"turn_id": "t0001", "role": "user", "text": "我对花生过敏，以后推荐菜别带花生。"},
    {"turn_id": "t0002", "role": "assistant", "text": "你好世界"},
    {"turn_id": "t0003", "role": "tool", "text": "航班 CA123 17:05 起飞"},
]


def _mark(**changes: Any) -> dict[str, Any]:
    mark: dict[str, Any] = {
        "turn_id": "t0001",
        "keep": True,
        "category": "rule",
        "subtype": "constraint",
        "evidence_level": "S0_user_claim",
        "importance": 0.8,
        "ttl_seconds": 0,
        "forget_policy": "permanent",
        "reason": "用户边界",
    }
    mark.update(changes)
    return {key: value for key, value in mark.items() if value is not ...}


@pytest.mark.parametrize(
    ("mark", "code", "field"),
    [
        (_mark(turn_id="t0099"), "unknown_turn", "marks[0].turn_id"),
        (_mark(turn_id=...), "missing_field", "marks[0].turn_id"),
        (_mark(keep=...), "missing_field", "marks[0].keep"),
        (_mark(keep="true"), "not_boolean", "marks[0].keep"),
        (_mark(keep=1), "not_boolean", "marks[0].keep"),
        (_mark(user_triggered_save="yes"), "not_boolean", "marks[0].user_triggered_save"),
        (_mark(requires_confirmation=0), "not_boolean", "marks[0].requires_confirmation"),
        (_mark(category="fun"), "bad_enum", "marks[0].category"),
        (_mark(subtype="gossip"), "bad_enum", "marks[0].subtype"),
        (_mark(evidence_level="S9"), "bad_enum", "marks[0].evidence_level"),
        (_mark(forget_policy="sometimes"), "bad_enum", "marks[0].forget_policy"),
        (_mark(importance=1.5), "importance_out_of_range", "marks[0].importance"),
        (_mark(importance=-0.1), "importance_out_of_range", "marks[0].importance"),
        (_mark(importance=float("nan")), "importance_out_of_range", "marks[0].importance"),
        (_mark(importance="0.5"), "not_number", "marks[0].importance"),
        (_mark(ttl_seconds=-1), "ttl_negative", "marks[0].ttl_seconds"),
        (_mark(ttl_seconds=1.5), "not_integer", "marks[0].ttl_seconds"),
        (_mark(ttl_seconds=True), "not_integer", "marks[0].ttl_seconds"),
        (_mark(span={"start": 0, "end": 99}), "span_out_of_range", "marks[0].span"),
        (_mark(span={"start": -1, "end": 3}), "span_out_of_range", "marks[0].span"),
        (_mark(span={"start": 3, "end": 3}), "span_out_of_range", "marks[0].span"),
        (_mark(span={"start": 0, "end": "4"}), "not_integer", "marks[0].span"),
        (_mark(span={"begin": 0, "end": 4}), "bad_span", "marks[0].span"),
        (_mark(text_exact="抄写原文"), "unknown_field", "marks[0].text_exact"),
        (_mark(category=None), "missing_label", "marks[0].category"),
        (_mark(evidence_level=None), "missing_label", "marks[0].evidence_level"),
        (_mark(reason=42), "not_string", "marks[0].reason"),
    ],
)
def test_each_validation_rule_has_its_code(mark: dict[str, Any], code: str, field: str) -> None:
    errors = validate_marks(TURNS, [mark])
    assert [(e.code, e.field) for e in errors] == [(code, field)], errors
    assert errors[0].message  # says what is wrong
    assert validate_marks(TURNS, [_mark()]) == []  # the unchanged mark is valid


def test_every_problem_is_reported_not_just_the_first() -> None:
    marks = [
        _mark(keep="yes", importance=2, category="fun"),
        {"turn_id": "t0002", "keep": False, "reason": "small talk"},
        {"turn_id": "t0002", "keep": False, "reason": "again"},
        "not an object",
    ]
    codes = sorted(e.code for e in validate_marks(TURNS, marks, require_all=True))
    assert codes == sorted(
        [
            "not_boolean",
            "importance_out_of_range",
            "bad_enum",
            "duplicate_turn",
            "not_object",
            "missing_turn",  # t0003 has no mark
        ]
    )
    missing = [
        e for e in validate_marks(TURNS, marks, require_all=True) if e.code == "missing_turn"
    ]
    assert missing[0].turn_id == "t0003"


def test_span_bounds_are_unicode_code_points_not_bytes() -> None:
    # "你好世界" is 4 code points and 12 UTF-8 bytes
    ok = {"turn_id": "t0002", "keep": False, "span": {"start": 2, "end": 4}}
    assert validate_marks(TURNS, [ok]) == []
    bad = {"turn_id": "t0002", "keep": False, "span": {"start": 2, "end": 5}}
    (error,) = validate_marks(TURNS, [bad])
    assert error.code == "span_out_of_range" and "len(text) = 4" in error.message


def test_kept_content_is_produced_by_code_with_slice_semantics() -> None:
    marks, errors = parse_marks(
        TURNS,
        [
            {
                "turn_id": "t0003",
                "keep": True,
                "category": "fact",
                "subtype": "tool_grounded_fact",
                "evidence_level": "S2_tool_grounded",
                "span": {"start": 3, "end": 8},
            },
            {"turn_id": "t0002", "keep": False, "reason": "寒暄"},
            _mark(),
        ],
    )
    assert errors == []
    assert [m.turn_id for m in marks] == ["t0001", "t0002", "t0003"]  # turn order
    kept = kept_content(TURNS, marks)
    assert kept.kept_turn_ids == ["t0001", "t0003"]
    assert kept.kept_spans == [TURNS[0]["text"], "CA123"]  # "航班 CA123 17:05"[3:8]
    assert kept.filtered_transcript.splitlines() == [
        f"[t0001] user: {TURNS[0]['text']}",
        "[t0003] tool: CA123",
    ]


def test_llm_may_write_an_int_id_as_a_string() -> None:
    turns = [{"turn_id": 7, "text": "hello"}]
    marks, errors = parse_marks(turns, [{"turn_id": "7", "keep": False, "reason": "greeting"}])
    assert errors == [] and marks[0].turn_id == 7


def test_default_ttl_table_is_the_seeds() -> None:
    table = {
        key: (rule.forget_policy, rule.ttl_seconds) for key, rule in DEFAULT_TTL_POLICY.items()
    }
    assert table == {
        "preference": ("until_changed", 0),
        "rule": ("permanent", 0),
        "task(open)": ("temporary", 30 * DAY),
        "task(done)": ("temporary", 7 * DAY),
        "fact(user claim)": ("temporary", 180 * DAY),
        "fact(tool grounded)": ("permanent", 0),
        "fact(transient)": ("temporary", 3 * DAY),
        "note": ("temporary", 30 * DAY),
        "pinned": ("permanent", 0),
    }
    assert policy_key("task", "S0_user_claim") == "task(open)"
    assert policy_key("task", "S0_user_claim", task_done=True) == "task(done)"
    assert policy_key("fact", "S2_tool_grounded") == "fact(tool grounded)"
    assert policy_key("fact", "S0_user_claim") == "fact(user claim)"
    assert policy_key("fact", "S3_user_confirmed") == "fact(user claim)"
    assert policy_key("fact", "S0_user_claim", transient=True) == "fact(transient)"
    assert policy_key("fact", "S2_tool_grounded", transient=True) == "fact(tool grounded)"


def test_policy_overrides_are_explicit_and_checked(tmp_path: Any) -> None:
    policy = GovernancePolicy().merged({"rules": {"task(open)": {"ttl_seconds": 3600}}})
    assert policy.rule("task(open)").ttl_seconds == 3600
    assert policy.rule("task(open)").forget_policy == "temporary"  # untouched half kept
    assert policy.rule("rule").ttl_seconds == 0  # other rows keep their defaults
    for bad, field in [
        ({"rules": {"gossip": {"ttl_seconds": 1}}}, "policy.rules.gossip"),
        ({"rules": {"note": {"ttl_seconds": -5}}}, "policy.rules.note.ttl_seconds"),
        ({"rules": {"note": {"forget_policy": "never"}}}, "policy.rules.note.forget_policy"),
        ({"pin_window": 0}, "policy.pin_window"),
        ({"keep_treshold": 1}, "policy.keep_treshold"),
    ]:
        with pytest.raises(InvalidInputError) as caught:
            GovernancePolicy().merged(bad)
        assert caught.value.field == field
    path = tmp_path / "policy.json"
    path.write_text('{"rules": {"note": {"ttl_seconds": 60}}}')
    assert load_policy(path).rule("note").ttl_seconds == 60
    path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="cannot read policy file"):
        load_policy(path)
    with pytest.raises(InvalidInputError, match="cannot read policy file"):
        load_policy(str(tmp_path / "a\x00b.json"))  # a NUL in the path: a ValueError before


def _one(text: str, role: str = "user", policy: GovernancePolicy | None = None) -> TurnMark:
    return RuleMarker().mark_one(MarkTurn(0, 0, role, text, 0.0), policy or GovernancePolicy())


@pytest.mark.parametrize(
    ("text", "role", "category", "subtype", "evidence", "ttl"),
    [
        (
            "我对花生过敏，以后别给我推荐带花生的菜。",
            "user",
            "rule",
            "constraint",
            "S0_user_claim",
            0,
        ),
        ("Please never call me before 9am.", "user", "rule", "constraint", "S0_user_claim", 0),
        ("我比较喜欢靠窗的座位。", "user", "preference", None, "S0_user_claim", 0),
        ("I prefer green tea over coffee.", "user", "preference", None, "S0_user_claim", 0),
        ("我在杭州一家医院工作，是护士。", "user", "fact", "profile", "S0_user_claim", 180 * DAY),
        (
            "My name is Lin and I live in Shenzhen.",
            "user",
            "fact",
            "profile",
            "S0_user_claim",
            180 * DAY,
        ),
        ("提醒我周五之前交季度报告。", "user", "task", "commitment", "S0_user_claim", 30 * DAY),
        (
            "Remind me to renew my passport next month.",
            "user",
            "task",
            "commitment",
            "S0_user_claim",
            30 * DAY,
        ),
        ("季度报告我已经提交了。", "user", "task", "commitment", "S0_user_claim", 7 * DAY),
        (
            "I've finished the slides for Monday.",
            "user",
            "task",
            "commitment",
            "S0_user_claim",
            7 * DAY,
        ),
        ("好，就按第二个方案定了。", "user", "fact", "decision", "S3_user_confirmed", 180 * DAY),
        (
            "Let's go with the cheaper hotel.",
            "user",
            "fact",
            "decision",
            "S3_user_confirmed",
            180 * DAY,
        ),
        (
            '{"flight": "CA123", "depart": "17:05"}',
            "tool",
            "fact",
            "tool_grounded_fact",
            "S2_tool_grounded",
            0,
        ),
        (
            "我会在周四提醒你带护照。",
            "assistant",
            "task",
            "commitment",
            "S1_ai_inference",
            30 * DAY,
        ),
    ],
)
def test_rule_marker_keeps_what_the_seed_says_is_worth_remembering(
    text: str, role: str, category: str, subtype: str | None, evidence: str, ttl: int
) -> None:
    mark = _one(text, role)
    assert mark.keep, mark.reason
    assert (mark.category, mark.subtype, mark.evidence_level, mark.ttl_seconds) == (
        category,
        subtype,
        evidence,
        ttl,
    ), mark
    assert mark.reason and mark.forget_policy


@pytest.mark.parametrize(
    ("text", "role"),
    [
        ("根据一般经验，你可能更适合早上锻炼，也许效果会更好。", "assistant"),
        ("I think you might enjoy hiking; many people find it relaxing.", "assistant"),
        ("哈哈，好的，谢谢！", "user"),
        ("Wow, that sounds awesome!", "user"),
        ("你觉得呢？", "user"),
        ("You are a helpful assistant.", "system"),
        ("", "user"),
    ],
)
def test_rule_marker_drops_speculation_and_small_talk(text: str, role: str) -> None:
    mark = _one(text, role)
    assert not mark.keep and mark.reason


def test_keep_threshold_is_a_policy_knob() -> None:
    text = "We went to the lake with the kids, the water was freezing."
    assert _one(text).keep
    assert not _one(text, policy=GovernancePolicy(keep_threshold=5.0)).keep


def test_tenant_ttl_override_reaches_the_rule_marker() -> None:
    policy = GovernancePolicy().merged(
        {"rules": {"preference": {"forget_policy": "temporary", "ttl_seconds": 600}}}
    )
    mark = _one("我喜欢喝美式咖啡。", policy=policy)
    assert (mark.ttl_seconds, mark.forget_policy) == (600, "temporary")


@pytest.mark.parametrize(
    ("text", "self_contained"),
    [
        ("记住这个", False),
        ("这很重要，请保存这段分析。", False),
        ("帮我记下来", False),
        ("remember this", False),
        ("Please save this.", False),
        ("记住：我对青霉素过敏", True),
        # the cue's own 这个 is no reference back: a short fact beside it is what to save
        ("我对花生过敏，记住这个。", True),
        ("记住这个方案，我以后按这个来", False),
        ("这个很重要，我女儿对芒果过敏", True),
        ("Remember that my passport number ends in 4821.", True),
    ],
)
def test_save_intents(text: str, self_contained: bool) -> None:
    intent = save_intent(text)
    assert intent is not None and intent.self_contained is self_contained


@pytest.mark.parametrize(
    "text",
    [
        "我记住了，谢谢。",
        "Thanks for the advice! I'll definitely keep that in mind.",
        "今天天气不错",
    ],
)
def test_not_save_intents(text: str) -> None:
    assert save_intent(text) is None


def test_llm_retention_comes_from_the_table_not_the_model() -> None:
    policy = GovernancePolicy()
    model_says = TurnMark.model_validate(
        {
            "turn_id": 1,
            "keep": True,
            "category": "preference",
            "evidence_level": "S0_user_claim",
            "ttl_seconds": 999,
            "forget_policy": "temporary",
            "user_triggered_save": True,
        }
    )
    enforced = LLMMarker._enforce(model_says, policy)
    assert (enforced.ttl_seconds, enforced.forget_policy) == (0, "until_changed")
    assert enforced.user_triggered_save is False  # pins come from code
    done = model_says.model_copy(update={"category": "task", "ttl_seconds": 7 * DAY})
    assert LLMMarker._enforce(done, policy).ttl_seconds == 7 * DAY
    other = model_says.model_copy(update={"category": "task", "ttl_seconds": 12345})
    assert LLMMarker._enforce(other, policy).ttl_seconds == 30 * DAY
