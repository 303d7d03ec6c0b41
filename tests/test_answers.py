"""The kind of value a question asks for, and the Chinese lines that state one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from convmem import Memory
from convmem.retrieve.evidence import LineFeatures, turn_hits
from convmem.text import tokenize
from convmem.text.answers import (
    KINDS,
    answer_kind,
    asks_current,
    changes,
    english_answer_kind,
    states,
)
from helpers import chat_of, spy
from test_evidence import _hit


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("张伟多大了？", "age"),
        ("孩子她爸多大年纪？", "age"),
        ("店里现在晚上几点关门？", "time"),
        ("我给女朋友买的手链多少钱？", "money"),
        ("华东区销售额是多少", "money"),  # an amount: 销售额, 金额, 收入, 押金
        ("住院押金交了多少？", "money"),
        ("我的联系电话是多少？", "phone"),
        ("我表哥多高？", "height"),
        ("胃镜现在约的是哪天？", "date"),
        ("林峰的生日是什么时候", "date"),
        ("婚宴最后定了多少桌？", "count"),
        ("顾晨是哪里人？", "place"),
        ("我表哥住在哪？", "place"),
        ("我在哪上班？", None),  # a workplace is a company's name, not a place
        ("我最喜欢的菜是什么？", None),  # a preference: no kind of value
        ("How old is my cousin?", None),  # English questions are not read
        ("用户: 我今天好累\n助手: 怎么了\n用户: 明天几点开会来着", None),  # a window
    ],
)
def test_a_question_names_the_kind_of_value_it_asks_for(question: str, kind: str | None) -> None:
    assert answer_kind(question) == kind


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When is my daughter's birthday?", "date"),
        ("What day is the dentist appointment", "date"),
        ("What time does my yoga class start?", "time"),
        ("How much did I pay for my gym membership?", "money"),
        ("How much money does Xiaowen owe me?", "money"),
        ("How old is my cousin?", "age"),
        ("What's my cell number again", "phone"),
        ("What's the wifi password?", "phone"),
        ("What's the ending number on my license plate", "phone"),
        ("How tall is my fiance?", "height"),
        ("How much does my dad weigh now?", "height"),
        ("How many tables did we book for the wedding?", "count"),
        ("What did I buy for my daughter's birthday?", None),  # a thing, not a date
        ("Which school does Lele go to?", None),
        ("Where do I work?", None),
        ("张伟多大了？", None),  # a Chinese question reads answer_kind
        ("User: I'm tired\nAssistant: why?\nUser: when is the meeting", None),  # a window
    ],
)
def test_an_english_question_names_the_kind_of_value_it_asks_for(
    question: str, kind: str | None
) -> None:
    assert english_answer_kind(question) == kind
    assert kind is None or kind in KINDS


@pytest.mark.parametrize(
    ("kind", "line", "holds"),
    [
        ("age", "陈磊比我大三岁，今年三十五。", True),
        ("age", "他三十五岁了", True),
        ("age", "张伟特别爱打羽毛球，每周末都去。", False),
        ("time", "改到明天早上八点半", True),
        ("money", "那块表一万八，我平时舍不得戴。", True),
        ("money", "花了1280", False),  # a bare number is no price
        ("phone", "外婆的手机号是13908161235", True),
        ("height", "顾晨一米八二，穿什么都好看。", True),
        ("date", "胃镜改到4月13号早上八点半", True),
        ("date", "思雨十月五号过生日", True),
        ("date", "他在华为做硬件工程师", False),
        ("count", "从30桌砍到26桌", True),
        ("place", "他老家是江苏南通的，今年三十。", True),  # 江苏: a place in jieba's dictionary
        ("place", "家住汉口区", True),
        ("place", "他业余就爱打羽毛球。", False),
    ],
)
def test_a_line_states_a_value_of_a_kind(kind: str, line: str, holds: bool) -> None:
    assert kind in KINDS
    assert states(kind, line, tokenize(line)) is holds


def test_the_line_holding_the_asked_kind_of_value_wins_a_tie() -> None:
    """Two lines about one person share only the name with the question; the one that
    holds an age answers "多大了", and only the answer weight decides it."""
    chunk = _hit("a", 1.0, ["用户: 张伟特别爱打羽毛球。", "用户: 张伟今年三十五岁。"], [0, 1])

    def first(query: str, weight: float) -> str:
        return turn_hits([chunk], query, 2, answer_weight=weight)[0].text

    assert first("张伟多大了？", 0.1).endswith("三十五岁。")
    assert first("张伟多大了？", 0.0).endswith("羽毛球。")
    assert first("张伟喜欢什么？", 0.1).endswith("羽毛球。")  # no kind: the text decides


def test_a_search_finds_the_age_among_lines_about_the_same_person(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the store: the age line is the longest of four about 张伟, so BM25 alone
    ranks it last of them; the answer weight brings it first."""
    facts = [
        "张伟在华为上班。",
        "张伟爱打羽毛球。",
        "张伟今年三十五了，还没结婚，家里催得紧，过年回家又要被念叨个没完。",
        "张伟住在杭州滨江。",
    ]
    chat_of(memory, facts, "今天第{n}次加班，好累啊。")

    def first() -> str:
        hits = memory.search("张伟多大了？", top_k=1, filters={"conversation_id": "c"}, min_score=0)
        return hits[0].text

    assert "三十五" in first()
    monkeypatch.setitem(turn_hits.__kwdefaults__, "answer_weight", 0.0)
    assert "三十五" not in first()


def test_a_question_about_the_current_value_prefers_the_line_that_says_it_changed() -> None:
    assert asks_current("我现在住在哪个区？") and asks_current("我未婚夫的新东家是哪家？")
    assert not asks_current("我住在哪个区？") and not asks_current("Where do I live now?")
    assert changes("又搬家了，这次搬到了滨江") and changes("胃镜改到4月13号")
    assert not changes("我住在西湖区，离公司很近")
    chunk = _hit(
        "a", 1.0, ["用户: 我住在西湖区，离公司很近。", "用户: 又搬家了，这次搬到了滨江区。"], [0, 1]
    )

    def first(query: str, weight: float) -> str:
        return turn_hits([chunk], query, 2, update_weight=weight)[0].text

    assert "滨江" in first("我现在住在哪个区？", 0.3)
    assert "西湖" in first("我现在住在哪个区？", 0.0)
    assert "西湖" in first("我住在哪个区？", 0.3)  # not asked as of now: the text decides


def test_the_update_of_the_best_line_ranks_just_above_it() -> None:
    # the update names the pool (西乡), not the question's words (游泳课, 星期几)
    lines = [
        "用户: 送乐乐去游泳 每周六早上九点在西乡体育中心上课",
        "用户: 开会改到周五了",  # a change, but of something else
        "用户: 今天不用去西乡了 教练说以后都改成周日下午三点",
    ]
    chunk = _hit("a", 1.0, lines, [0, 1, 2])

    def order(query: str) -> list[str]:
        hits = turn_hits([chunk], query, 3, update_weight=0.0, answer_weight=0.0)
        return [hit.text for hit in hits]

    now = order("乐乐的游泳课现在是星期几？")
    assert now[0] == lines[2] and now[1] == lines[0]
    assert now[2] == lines[1]  # sharing no rare word with the best line, it stays below
    assert order("乐乐的游泳课是星期几？")[0] == lines[0]  # not asked as of now

    earlier = _hit("b", 1.0, [lines[2], lines[0]], [0, 1])  # the change came first
    hits = turn_hits([earlier], "乐乐的游泳课现在是星期几？", 2, update_weight=0.0)
    assert hits[0].text == lines[0]


def test_an_update_shares_a_rare_word_and_only_the_lines_that_can_matter_are_segmented(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """西乡 said by more candidate turns than UPDATE_SHARED is no rare word: the change that
    shares only it stays where it ranks. Segmenting is for the best lines, the later lines
    that say a change and the lines that hold a best line's word as a substring, until the
    word is known not to be rare: not for every candidate line (each new to the process is
    a jieba call)."""
    from convmem.retrieve import evidence

    best = "用户: 送乐乐去游泳 每周六早上九点在西乡体育中心上课"
    update = "用户: 今天不用去西乡了 教练说以后都改成周日下午三点"
    fillers = [f"用户: 今天第{n}次吃了碗面条" for n in range(30)]
    segmented = spy(monkeypatch, evidence, "words")
    chunk = _hit("a", 1.0, [best, *fillers, update], list(range(32)))
    hits = turn_hits([chunk], "乐乐的游泳课现在是星期几？", 3, update_weight=0.0, answer_weight=0.0)
    assert hits[0].text == update
    # the best line and the second best (a filler: its words are in every filler, so
    # counting their holders stops at the fourth), the update, a few fillers
    assert len(set(segmented)) <= 8 < len(fillers)

    crowded = [f"用户: 西乡今天第{n}次下雨" for n in range(4)]  # 西乡 in four more turns
    chunk = _hit("b", 1.0, [best, *crowded, update], list(range(6)))
    hits = turn_hits([chunk], "乐乐的游泳课现在是星期几？", 2, update_weight=0.0, answer_weight=0.0)
    assert hits[0].text == best


def test_a_ranker_reads_whether_a_line_answers_and_whether_it_says_a_change() -> None:
    lines = [
        "用户: 我住在西湖区，离公司很近。",
        "用户: 又搬家了，这次搬到了滨江区。",
        "用户: 今天好累",
    ]
    chunk = _hit("a", 1.0, lines, [0, 1, 2])
    seen: dict[str, list[LineFeatures]] = {}

    def features(query: str) -> list[tuple[float, float]]:
        def recorder(found: Sequence[LineFeatures]) -> list[float]:
            seen[query] = list(found)
            return [0.0] * len(found)

        turn_hits([chunk], query, 3, ranker=recorder)
        return [(line.answers, line.changes) for line in seen[query]]

    # a place asked for: the two lines naming a district hold one; only the move changes
    assert features("我现在住在哪个区？") == [(1.0, 0.0), (1.0, 1.0), (0.0, 0.0)]
    assert features("我住在哪个区？") == [(1.0, 0.0), (1.0, 0.0), (0.0, 0.0)]  # not as of now
    assert features("我最喜欢什么？") == [(0.0, 0.0)] * 3  # no kind of value asked
