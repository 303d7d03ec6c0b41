"""Relations a question names of the user, and "no memory" for one the chat never says."""

from __future__ import annotations

import pytest

from convmem import Memory
from convmem.retrieve import searcher
from convmem.retrieve.unknowns import english_relation_terms, relation_terms, unknown_relation
from convmem.text.kinship import aliases, english_relations, relations, spellings
from helpers import chat_of, make_turns


@pytest.mark.parametrize(
    ("question", "found"),
    [
        ("我岳父今年多大了？", ["岳父"]),
        ("我大学室友结婚要去哪里？", ["室友"]),
        ("外婆比老爸大几岁？", ["老爸", "外婆"]),
        ("我外孙女在哪上学？", ["外孙女"]),  # the longest word, not 外孙 again
        ("孩子奶奶原来干的是哪一行？", []),  # someone else's grandmother (the user's 婆婆)
        ("周文斌的女儿在哪里读书？", []),
        ("我给女朋友买的手链多少钱？", []),  # partners and children: chat names them
        ("我女儿对什么过敏？", []),
        ("我妈今年多大？", ["妈妈"]),  # a spoken form is its relation
        ("我爸妈住在哪？", ["父母"]),  # parents, not 我爸 too
        ("我爸和我妈谁大？", ["爸爸", "妈妈"]),
        ("我妈的爸爸是做什么的？", ["妈妈"]),  # the grandfather is someone else's father
        ("我舅今年多大？", ["舅舅"]),
        ("咱妈的生日是哪天？", ["妈妈"]),
        ("我姑娘今年几岁？", []),  # 我姑 opens 姑娘 (a daughter): no spoken aunt
        ("我奶茶店开在哪条街？", []),
    ],
)
def test_a_question_names_the_users_relations(question: str, found: list[str]) -> None:
    assert sorted(relations(question)) == sorted(found)


def test_a_relation_is_spelled_by_its_synonyms_too() -> None:
    assert spellings("妈妈")[0] == "妈妈" and "我妈" in spellings("妈妈")
    assert relation_terms("我丈母娘住哪？")[0][0] == ("丈母", "母娘")
    assert relation_terms("Where does my mother-in-law live?") == []


def test_a_relation_the_conversation_never_says_is_unknown() -> None:
    kin = relation_terms("我岳父今年多大了？")
    assert unknown_relation(kin, (10, {"我妈": 2})) == 1.0
    assert unknown_relation(kin, (10, {"丈人": 1})) == 0.0  # a synonym says it
    assert unknown_relation(kin, (10, {"老丈": 1, "丈人": 1})) == 0.0  # 老丈人
    # a mother-in-law is not a father-in-law, nor 婆婆 公公 (公婆 is both)
    assert unknown_relation(kin, (10, {"丈母": 1, "母娘": 1})) == 1.0
    assert "公公" not in spellings("婆婆") and "公婆" in spellings("婆婆")
    father = relation_terms("我公公今年多大了？")
    assert unknown_relation(father, (10, {"婆婆": 3})) == 1.0
    assert unknown_relation(father, (10, {"公婆": 1})) == 0.0
    assert unknown_relation(kin, None) == 0.0 and unknown_relation(kin, (0, {})) == 0.0
    assert unknown_relation([], (10, {})) == 0.0
    # parents are said by either of them too
    parents = relation_terms("我爸妈住在哪？")
    assert unknown_relation(parents, (10, {"我妈": 1})) == 0.0
    assert unknown_relation(parents, (10, {"父母": 1})) == 0.0
    assert unknown_relation(parents, (10, {"我哥": 1})) == 1.0
    # a brother the chat calls 我哥 (no synonym group lists it)
    assert unknown_relation(relation_terms("我哥哥在哪上班？"), (10, {"我哥": 1})) == 0.0
    assert unknown_relation(relation_terms("我哥在哪上班？"), (10, {"我哥": 1})) == 0.0
    assert unknown_relation(relation_terms("我舅舅住在哪？"), (10, {"我舅": 2})) == 0.0


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("Where does my mother-in-law live?", {"婆婆", "丈母娘"}),
        ("What date is my aunt's birthday?", {"小姨", "舅妈"}),
        ("What does my older brother do?", {"哥哥", "弟弟"}),
        ("Who is my grandmother?", {"外婆", "奶奶"}),  # not "mother"
        ("Where does my MOM work?", {"我妈", "老妈"}),
        ("What medicine do my parents take?", {"我爸", "我妈"}),
        ("Where is my coworker staying?", {"同事"}),
    ],
)
def test_an_english_question_names_the_users_relations_as_chinese_says_them(
    question: str, said: set[str]
) -> None:
    (words,) = english_relations(question)
    assert said <= set(words)


@pytest.mark.parametrize(
    "question",
    [
        "When is my daughter's birthday?",  # a child and a partner: chat names them
        "What does my husband do?",
        "Who is my daughter's teacher?",  # a teacher of someone else's
        "What is the capital of Peru?",
        "我婆婆住在哪里？",  # a Chinese question has relation_terms
        "Where does my motherboard come from?",  # a relation word inside another word
    ],
)
def test_an_english_question_without_a_relation_of_the_users_names_none(question: str) -> None:
    assert english_relation_terms(question) == []


def test_an_english_relation_the_chinese_chat_never_says_is_unknown() -> None:
    kin = english_relation_terms("Where does my mother-in-law live?")
    assert unknown_relation(kin, (10, {"我妈": 2})) == 1.0
    assert unknown_relation(kin, (10, {"婆婆": 1})) == 0.0  # a husband's mother
    assert unknown_relation(kin, (10, {"丈母": 1, "母娘": 1})) == 0.0  # or a wife's
    cousin = english_relation_terms("What does my cousin do?")
    assert unknown_relation(cousin, (10, {"表妹": 1})) == 0.0
    assert unknown_relation(cousin, (10, {"表哥": 0, "哥哥": 1})) == 1.0


def test_asking_about_a_relative_the_chat_never_mentions_finds_nothing(memory: Memory) -> None:
    scope = chat_of(
        memory,
        ["我妈今年六十二岁了，身体还挺硬朗。", "我表哥张伟在华为做硬件工程师。"],
        "今天第{n}次加班，好累啊。",
    )
    mother = memory.search("我妈妈今年多大了？", top_k=3, filters=scope)
    assert mother and "六十二" in mother[0].text
    assert "unknown_name" not in mother[0].metadata["evidence"]
    # the same question about a father-in-law: the age line is still the closest one
    unscored = memory.search("我岳父今年多大了？", top_k=3, filters=scope, min_score=0)
    assert "六十二" in unscored[0].text
    assert unscored[0].metadata["evidence"]["unknown_name"] == 1.0
    assert unscored[0].score < mother[0].score
    assert memory.search("我岳父今年多大了？", top_k=3, filters=scope) == []


def test_a_name_after_a_relation_in_latin_shorthand_is_found() -> None:
    assert aliases("女朋友在哪个城市上班？", ["刚跟我gf林萱打完视频 她在上海做咨询"]) == ["林萱"]


def test_a_relation_in_its_spoken_form_finds_the_name_either_way() -> None:
    line = ["我舅钱斌在南京江宁开了家驾校。"]
    assert aliases("我舅舅是做什么的？", line) == ["钱斌"]
    assert aliases("我舅是做什么的？", line) == ["钱斌"]
    assert aliases("我舅是做什么的？", ["我舅舅钱斌在南京开驾校。"]) == ["钱斌"]


def test_the_names_a_chat_gives_a_relation_are_found() -> None:
    lines = [
        "我未婚夫叫顾晨，我们上个月刚订婚。",
        "我女儿小名叫朵朵，大名陈可馨。",
        "女儿欣欣打电话问爷爷",
        "我儿子李明哲今年三十三",
        "我弟刘建军在深圳开网约车",
        "我妈高兴坏了",
    ]
    assert aliases("我未婚夫多高？", lines) == ["顾晨"]
    assert sorted(aliases("我女儿几岁了", lines)) == ["朵朵", "欣欣"]
    assert aliases("我儿子在哪上班", lines) == ["李明"]  # the bigram every mention holds
    assert aliases("我弟现在在哪个城市？", lines) == ["刘建军"]
    assert aliases("我妈住哪？", lines) == []  # 高兴 is a word, not a name
    assert aliases("顾晨多高？", lines) == []  # no relation asked
    assert aliases("周文斌的女儿在哪读书？", lines) == []  # someone else's daughter
    # the children's father is the user's husband: 孩子她爸 is spelled 老公 too
    assert aliases("孩子她爸多大年纪？", ["我老公陈磊在海康威视做算法工程师。"]) == ["陈磊"]


def test_a_question_by_relation_finds_the_lines_that_only_say_the_name(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [
        "我未婚夫叫顾晨，我们上个月刚订婚。",
        *[f"今天第{n}次加班，好累啊。" for n in range(6)],
        "顾晨在德勤做审计，忙季天天加班到半夜。",
        *[f"周末第{n}次去爬山，风景不错。" for n in range(6)],
    ]
    memory.add_turns("c", make_turns(texts, roles=["user"] * len(texts)))
    memory.flush()

    def rank() -> int:
        """Where the line that only says 顾晨 comes (99: not in the first ten)."""
        hits = memory.search(
            "我未婚夫在哪家公司上班？", top_k=10, filters={"conversation_id": "c"}, min_score=0
        )
        return next((i for i, hit in enumerate(hits) if "德勤" in hit.text), 99)

    with_names = rank()
    monkeypatch.setattr(searcher, "aliases", lambda question, texts: [])
    assert with_names <= 3 < rank()
