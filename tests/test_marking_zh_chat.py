"""The rule marker on Chinese daily-life chat: small talk, passing states, habits, pins."""

from __future__ import annotations

import pytest

from convmem.governance import GovernancePolicy, MarkTurn, RuleMarker, TurnMark, derive, save_intent
from convmem.governance.chat_zh import small_talk_zh, transient_state_zh
from convmem.governance.policy import DAY


def _one(text: str, role: str = "user", policy: GovernancePolicy | None = None) -> TurnMark:
    return RuleMarker().mark_one(MarkTurn(0, 0, role, text, 0.0), policy or GovernancePolicy())


@pytest.mark.parametrize(
    "text",
    [
        "早上好呀！",
        "好的，谢谢啦",
        "哈哈哈哈",
        "没啥事，就是想跟你打个招呼哈哈",
        "好，我试试",
        "好的，我去网上看看",
        "是啊，最近他天天熬夜",
        "一般般吧，上班嘛",
        "周末好无聊啊",
        "给我讲个笑话吧",
        "晚安",
        "上次你推荐的那家餐厅真不错！",
        "这种天气最适合在家吃火锅了",
    ],
)
def test_chinese_small_talk_is_dropped_with_a_reason(text: str) -> None:
    mark = _one(text)
    assert not mark.keep
    assert mark.reason.startswith("small talk")


@pytest.mark.parametrize(
    "text",
    [
        "我女儿叫朵朵，今年五岁了，在上幼儿园中班。",
        "我换手机号了，新号码是13917264580。",
        "我老婆怀孕了",
        "我有两个孩子",
        "旧的那个号码下个月就停用了。",
        "哦不对，他去年已经跳槽到小米了。",
        "我觉得楼下那家面馆最好吃，每周都去两次。",
        "护照明年过期",
        "日本的机票太贵了，春节改去泰国普吉岛。",  # a judgement, then a changed plan
    ],
)
def test_short_or_casual_turns_with_information_are_kept(text: str) -> None:
    assert small_talk_zh(text) is None
    assert _one(text).keep


@pytest.mark.parametrize(
    ("text", "category", "forget_policy", "ttl"),
    [
        ("九点左右吧。我坐高铁一般都选靠窗的座位。", "preference", "until_changed", 0),
        ("我每天早上都要喝一杯美式，不加糖。", "preference", "until_changed", 0),
        ("我不太喜欢看恐怖片，喜欢看喜剧。", "preference", "until_changed", 0),
        ("她最喜欢艾莎公主。", "preference", "until_changed", 0),
        ("以后回复我的时候别用太多表情符号。", "rule", "permanent", 0),
        ("我现在在吃素，一点肉都不吃。", "rule", "permanent", 0),
        ("这个月的信用卡我已经还完了。", "task", "temporary", 7 * DAY),
        ("快递放门口就行，不用打电话。", "preference", "until_changed", 0),
        ("我是金卡会员，尽量订东航的。", "preference", "until_changed", 0),
        ("他不能吃海鲜，一吃就起疹子。", "rule", "permanent", 0),
        ("我们家不吃猪肉的，我是帮邻居问的。", "rule", "permanent", 0),
        ("要，五点半叫我起床。", "task", "temporary", 30 * DAY),
        ("国庆节我打算回青岛看他们。", "task", "temporary", 30 * DAY),
        ("叫我小林就行。", "rule", "permanent", 0),
        ("那家的辣炒蛤蜊是一绝。", "preference", "until_changed", 0),
        ("他家的锅包肉必点", "preference", "until_changed", 0),
    ],
)
def test_preferences_rules_and_done_tasks_get_their_row(
    text: str, category: str, forget_policy: str, ttl: int
) -> None:
    mark = _one(text)
    assert mark.keep and mark.category == category
    assert (mark.forget_policy, mark.ttl_seconds) == (forget_policy, ttl)


@pytest.mark.parametrize(
    "text", ["昨晚没睡好，今天有点困。", "我这两天有点感冒，嗓子疼。", "今天加班到十点，累死了。"]
)
def test_passing_states_are_kept_for_days_not_half_a_year(text: str) -> None:
    assert transient_state_zh(text)
    mark = _one(text)
    assert mark.keep and mark.category == "fact"
    assert (mark.forget_policy, mark.ttl_seconds) == ("temporary", 3 * DAY)
    assert mark.reason.startswith("passing state")


def test_transient_ttl_is_a_policy_row() -> None:
    policy = GovernancePolicy().merged({"rules": {"fact(transient)": {"ttl_seconds": DAY}}})
    assert _one("今天有点累，昨晚加班到两点。", policy=policy).ttl_seconds == DAY


def test_a_lasting_fact_with_a_date_is_not_transient() -> None:
    mark = _one("我们结婚纪念日是10月18号。")
    assert mark.keep and mark.ttl_seconds == 180 * DAY


def test_saying_a_save_is_done_is_not_a_commitment() -> None:
    assert not _one("好的，已经帮你记下了。", role="assistant").keep
    assert _one("好的，已为你预约周三上午的疫苗。", role="assistant").keep


@pytest.mark.parametrize("text", ["记住这个方案，我以后按这个来。", "这个结构挺清楚的，记下来吧。"])
def test_a_save_request_that_points_back_pins_the_turns_before_it(text: str) -> None:
    intent = save_intent(text)
    assert intent is not None and not intent.self_contained
    texts = [
        "每个月工资一万二，怎么分配？",
        "可以试试50/30/20法则：6000必要开支，2400存起来。",
        text,
    ]
    roles = ["user", "assistant", "user"]
    turns = [
        MarkTurn(seq, seq, role, body, 60.0 * seq)
        for seq, (role, body) in enumerate(zip(roles, texts, strict=True))
    ]
    policy = GovernancePolicy()
    base = {turn.seq: RuleMarker().mark_one(turn, policy) for turn in turns}
    derived = derive("c", turns, base, policy, new_from=0, accepted_at={0: 0.0, 1: 0.0, 2: 0.0})
    assert [pin.target_seqs for pin in derived.pins] == [(0, 1)]
    assert derived.effective[1].keep and derived.effective[1].user_triggered_save


def test_a_save_request_with_its_own_content_stays_self_contained() -> None:
    intent = save_intent("记住，我家的WiFi密码是lin20180808。")
    assert intent is not None and intent.self_contained


def test_asking_about_vegetarian_food_is_not_a_diet_rule() -> None:
    assert _one("你知道附近有素食餐厅吗？").category != "rule"
    assert _one("我现在在吃素。").category == "rule"


def test_a_question_without_a_question_mark_is_not_information() -> None:
    assert not _one("今天的快递怎么还没到").keep


@pytest.mark.parametrize(
    "text",
    [
        # chat types a space where writing puts a full stop: only the last clause asks
        "在改英文简历 education那栏写 RWTH Aachen University, PhD in Mechanical Engineering, "
        "2021-2026 这样ok吗",
        "闺女说今年六月份带孩子回来 待一个月 我跟老伴都盼着呢",
    ],
)
def test_information_before_a_closing_question_clause_is_kept(text: str) -> None:
    mark = _one(text)
    assert mark.keep, mark.reason


@pytest.mark.parametrize("text", ["在吗 有空吗", "你说 这样写可以吗", "hello 在不在呢"])
def test_questions_of_several_clauses_without_information_are_dropped(text: str) -> None:
    assert not _one(text).keep


@pytest.mark.parametrize(
    "text",
    ["房东姓赵，电话是18621009876。", "前台座机010-62751234", "发到 lin.xiao@example.com 就行"],
)
def test_contact_details_are_kept_as_facts(text: str) -> None:
    mark = _one(text)
    assert mark.keep and mark.category == "fact"
    assert mark.ttl_seconds == 180 * DAY
