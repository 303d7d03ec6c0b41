"""Everyday Chinese synonyms in a Chinese question's lexical search (convmem.text.synonyms)."""

from __future__ import annotations

from convmem import Memory
from convmem.text.synonyms import GROUPS, synonyms, synonyms_in
from helpers import make_turns


def test_a_word_has_the_other_words_of_each_of_its_groups() -> None:
    assert {"爸妈", "双亲"} <= synonyms("父母")
    # 爱人 is a spouse, and a wife and a husband: its groups' words together
    assert {"老伴", "老婆", "老公"} <= synonyms("爱人")
    assert "父母" not in synonyms("父母")
    assert synonyms("护照") == frozenset()
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
