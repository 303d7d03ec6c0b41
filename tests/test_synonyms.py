"""Everyday Chinese synonyms in a Chinese question's lexical search (convmem.text.synonyms)."""

from __future__ import annotations

from convmem import Memory
from convmem.retrieve.evidence import Coverage, idf_table, synonym_alternatives
from convmem.text import tokenize
from convmem.text.synonyms import (
    CATEGORIES,
    GROUPS,
    equivalents,
    reworded,
    spelling,
    synonym_groups,
    synonyms,
    synonyms_in,
)
from helpers import chat_of, make_turns


def test_a_word_has_the_other_words_of_each_of_its_groups() -> None:
    assert "老公" in synonyms("孩子爸爸") and "老婆" in synonyms("孩子妈妈")
    assert "gf" in synonyms("女朋友") and "男朋友" in synonyms("bf")  # chat's Latin shorthand
    assert {"爸妈", "双亲"} <= synonyms("父母")
    # 爱人 is a spouse, and a wife and a husband: its groups' words together
    assert {"老伴", "老婆", "老公"} <= synonyms("爱人")
    assert "父母" not in synonyms("父母")
    assert synonyms("护照") == frozenset()
    # a person's attributes: as a question asks (年纪, 身高) and as chat says (岁数, 个子)
    assert "岁数" in synonyms("年纪") and "个子" in synonyms("身高")
    # no single characters: they occur inside unrelated words
    assert all(len(word) > 1 for group in GROUPS for word in group.split())


def test_a_question_gets_the_synonyms_of_the_words_it_holds_as_written() -> None:
    # jieba cuts 我早晨得服啥药 as 早晨 / 得服 / 啥 / 药: words are found as substrings
    extra = synonyms_in("我早晨得服啥药")
    assert "早上" in extra and "清晨" in extra
    assert "早晨" not in extra  # what the question says already
    assert "吃药" in synonyms_in("我每天服药几次")
    assert synonyms_in("护照什么时候过期") == []


def test_a_chinese_question_finds_a_line_that_names_its_kin_in_other_words(memory: Memory) -> None:
    """The hashing embedder has no semantics: only 爸妈 for 父母 finds the line."""
    texts = [
        "我爸妈在老家开了个小面馆，二十多年了。",
        "好的，记下了。",
        *[f"今天第{n}次开会，讨论新项目的排期。" for n in range(10)],
    ]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    hits = memory.search("我父母是做哪一行的？", top_k=3, filters={"conversation_id": "c"})
    assert hits and hits[0].text.endswith(texts[0])


def test_a_question_word_keeps_its_own_synonyms() -> None:
    groups = synonym_groups("我太太在哪上班")
    assert "老婆" in groups["太太"] and "工作" in groups["上班"]
    assert "老婆" not in groups["上班"]
    assert synonym_groups("护照什么时候过期") == {}
    # what synonyms_in gives is every group's words once
    assert set(synonyms_in("我太太在哪上班")) == {w for ws in groups.values() for w in ws}


def test_a_line_saying_a_synonym_covers_the_questions_word() -> None:
    """Coverage counts a question's word held where a line says one of its synonyms, with
    the word's own weight: one word of the question, not one of its eleven synonyms."""
    question = "我太太在哪个医院"
    weights = {term: 1.0 for term in tokenize(question)}
    lines = [tokenize("我老婆在协和医院当医生"), tokenize("今天开会讨论排期")]
    plain = Coverage(weights, idf_table(weights, lines))
    alternatives = synonym_alternatives(synonym_groups(question))
    grouped = Coverage(weights, idf_table(weights, lines, alternatives), alternatives)
    assert grouped(lines[0]) > plain(lines[0]) > 0.0
    assert grouped(lines[1]) == plain(lines[1]) == 0.0


def _found_first(
    memory: Memory, question: str, line: str
) -> tuple[dict[str, str], dict[str, float]]:
    """A chat "c" of ``line``, a reply and ten meetings; the scope, and the evidence of the
    question's first hit without a threshold, which must be ``line``."""
    scope = chat_of(
        memory, [line, "好的，记下了。"], "今天第{n}次开会，讨论新项目的排期。", count=10
    )
    hits = memory.search(question, top_k=3, filters=scope, min_score=0)
    assert hits and hits[0].text.endswith(line)
    return scope, hits[0].metadata["evidence"]


def test_a_chinese_questions_hit_by_a_synonym_carries_its_coverage(memory: Memory) -> None:
    """ "我太太在哪个医院上班" of a chat that says 老婆 and 工作: the line is covered by the
    question's own words through their synonyms, and the question's specific words are
    not absent, so the line is found and kept at the default min_score."""
    line = "我老婆在协和医院儿科工作，一忙起来连饭都顾不上吃。"
    scope, evidence = _found_first(memory, "我太太在哪个医院上班？", line)
    # 太太 and 上班 are held through 老婆 and 工作, 医院 as written: most of the question's
    # weight (counted against the eleven synonyms as words of the question, it was .10)
    assert evidence["coverage"] > 0.25
    # neither specific word (太太, 上班) is absent from the chat
    assert evidence.get("absent", 0.0) == 0.0
    kept = memory.search("我太太在哪个医院上班？", top_k=3, filters=scope)
    assert kept and kept[0].text.endswith(line)


def test_a_kind_widens_to_its_members_and_never_back() -> None:
    """宠物 is asked, 柴犬 is said: a kind's words widen a question to the things of that
    kind, but a thing widens to neither its kind nor the other things of it."""
    assert {"柴犬", "狗", "猫"} <= synonyms("宠物")
    assert {"头孢", "胰岛素"} <= synonyms("用药")
    assert "宠物" not in synonyms("柴犬") and "猫" not in synonyms("柴犬")
    assert synonyms("头孢") == frozenset()
    # a kind is found in a question as written, and its members are its synonyms there
    assert "柴犬" in synonym_groups("我养的那只小动物叫啥？")["小动物"]
    # kinds are words of two characters or more (found as substrings of a question) that
    # have search tokens (coverage reads a kind's word through them)
    for kinds, _ in CATEGORIES:
        assert all(len(kind) > 1 for kind in kinds.split())
        assert all(spelling(kind) for kind in kinds.split())


def test_a_question_that_names_a_kind_finds_the_thing_the_chat_names(memory: Memory) -> None:
    """ "我养的宠物叫什么" of a chat that says 柴犬, never 宠物: the hashing embedder has no
    semantics, so only the kind's members find the line; they cover the question's word,
    and the word is not absent from the chat (its other specific word, 我养, is)."""
    line = "救命 豆包昨晚趁我加班把沙发咬了个洞 柴犬真的是拆家"
    _, evidence = _found_first(memory, "我养的宠物叫什么名字？", line)
    assert evidence["coverage"] > 0.0
    assert evidence["absent"] == 0.5  # 1.0 without the kind's members
    # and a chat that names no animal has nothing for it
    other = {"conversation_id": "d"}
    memory.add_turns("d", make_turns([f"今天第{n}次开会，讨论新项目的排期。" for n in range(10)]))
    memory.flush()
    assert memory.search("我养的宠物叫什么名字？", top_k=3, filters=other) == []


def test_a_question_is_reworded_in_the_words_its_candidates_say() -> None:
    question = "我太太做哪块工作？"
    groups = synonym_groups(question)
    lines = ["我老婆梁美玲在我们公司管财务。", "老婆生日是4月6号。", "我爱人喜欢爬山。"]
    # each word none of the lines says, as the equivalent they say most
    assert reworded(question, groups, lines) == "我老婆做哪块工作？"
    # a word a line says as itself stays
    assert reworded(question, groups, [*lines, "我太太的工作很忙。"]) is None
    assert reworded(question, groups, ["今天天气不错。"]) is None
    # a kind is no equivalent of its members: "what colour" is not "white"
    colour = "我那辆自行车是什么颜色的？"
    assert "白色" in synonym_groups(colour)["颜色"] and not equivalents("颜色")
    assert reworded(colour, synonym_groups(colour), ["我买了台白色的钢琴。"]) is None
