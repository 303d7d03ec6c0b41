"""Turn-level evidence (small-to-big): a hit names one turn and keeps its chunk as context."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from convmem import HashingEmbedder, InvalidInputError, Memory
from convmem.governance import KeepAllMarker
from convmem.ingest import MAX_CLAUSES, line_clauses, vector_rows
from convmem.models import Hit
from convmem.retrieve import evidence as evidence_module
from convmem.retrieve.evidence import (
    FEATURES,
    RANKER_WEIGHT,
    LineFeatures,
    named,
    turn_hits,
    without_names,
)
from convmem.retrieve.ranker import RANKERS, Ranker, ranker_for
from helpers import live_chunks, make_turns, strip_clause_vectors

NOISE = [
    "今天天气不错，适合出去走走。",
    "是的，阳光很好。",
    "周末你有什么安排吗？",
    "可能去公园散步。",
]


def test_a_turn_hit_names_its_evidence_turn_and_carries_the_chunk(memory: Memory) -> None:
    texts = [*NOISE, "我的车停在地下二层B区17号车位。", "好的，已经记下了。", *NOISE]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    hits = memory.search("车停在哪个车位", top_k=3, granularity="turn")
    top = hits[0]
    assert "B区17号" in top.text and top.metadata["turn_range"] == [4, 4]
    assert top.metadata["evidence_turns"] == [4] and top.metadata["granularity"] == "turn"
    # the chunk it came from is the context, and its full range is kept
    assert top.context is not None and "B区17号" in top.context and top.context != top.text
    low, high = top.metadata["chunk_turn_range"]
    assert low <= 4 <= high and high > low
    assert (top.context, (low, high)) in live_chunks(memory, "c").values()
    # at most one hit per turn, even though overlapping chunks hold some turns twice
    seqs = [
        hit.metadata["turn_range"][0]
        for hit in memory.search("天气 公园", top_k=10, granularity="turn")
    ]
    assert len(seqs) == len(set(seqs))


def test_turn_granularity_is_the_default_and_chunks_stay_available(memory: Memory) -> None:
    memory.add_turns("c", make_turns(["我的车停在地下二层B区17号车位。", "好的，已经记下了。"]))
    memory.flush()
    (hit,) = memory.search("车位", top_k=1)
    assert hit.text.endswith("我的车停在地下二层B区17号车位。") and hit.metadata["turn_range"] == [
        0,
        0,
    ]
    assert hit.context is not None and hit.context.startswith("[上下文")
    (whole,) = memory.search("车位", top_k=1, granularity="chunk")
    assert whole.context is None and whole.text == hit.context
    with pytest.raises(InvalidInputError) as caught:
        memory.search("车位", granularity="sentence")
    assert caught.value.field == "granularity"


def _hit(chunk_id: str, score: float, lines: list[str], seqs: list[int] | None) -> Hit:
    text = "\n".join(["[prefix]", *lines])
    offsets = []
    position = len("[prefix]") + 1
    for line in lines:
        offsets.append((position, position + len(line)))
        position += len(line) + 1
    metadata = {"conversation_id": "c", "turn_range": [0, 0]}
    if seqs is not None:
        metadata |= {"turn_seqs": seqs, "turn_offsets": offsets, "turn_range": [seqs[0], seqs[-1]]}
    return Hit(chunk_id=chunk_id, score=score, text=text, metadata=metadata)


def test_turns_are_capped_per_chunk_and_whole_chunks_stay_whole() -> None:
    first = _hit(
        "a", 1.0, ["u: alpha one", "a: alpha two", "u: alpha three", "a: alpha four"], [0, 1, 2, 3]
    )
    second = _hit("b", 0.5, ["u: beta", "a: alpha five"], [4, 5])
    whole = _hit("m", 0.4, ["a memory of alpha"], None)
    hits = turn_hits([first, second, whole], "alpha", 10, per_chunk=3)
    order = [(hit.chunk_id, hit.metadata["turn_range"][0]) for hit in hits]
    # three turns of the best chunk, then the next chunk's best turn, before the fourth
    assert [chunk for chunk, _ in order[:4]] == ["a", "a", "a", "b"]
    assert [chunk for chunk, _ in order[4:]].count("a") == 1  # the fourth waits
    memory_hit = next(hit for hit in hits if hit.chunk_id == "m")
    assert memory_hit.text == whole.text and memory_hit.context is None
    assert len(hits) == 7


def test_a_turns_calibrated_relevance_counts_in_its_rank() -> None:
    first = _hit("a", 1.0, ["u: alpha"], [0])
    second = _hit("b", 0.9, ["u: beta"], [1])
    query = np.array([1.0, 0.0], dtype=np.float32)
    lines = {
        "a": np.array([[0.1, 0.995]], dtype=np.float32),
        "b": np.array([[0.9, 0.436]], dtype=np.float32),
    }
    kwargs: dict[str, Any] = {"query_vector": query, "line_vectors": lines}
    plain = turn_hits([first, second], "gamma", 2, **kwargs)
    assert [hit.chunk_id for hit in plain] == ["a", "b"]  # the fused order
    ranked = turn_hits(
        [first, second], "gamma", 2, relevance=lambda evidence: evidence.similarity or 0.0, **kwargs
    )
    # b's line is far more relevant (.9 against .1): at weight 0.3 it overtakes a
    assert [hit.chunk_id for hit in ranked] == ["b", "a"]
    assert ranked[0].metadata["evidence"]["similarity"] == pytest.approx(0.9, abs=1e-3)
    # its fused score (no word of the question matched: the line's BM25 weight only divides)
    # and its relevance, weighted 1 : 0.3
    assert ranked[0].score == pytest.approx((0.9 / 1.1 + 0.3 * 0.9) / 1.3, abs=1e-4)


def test_a_ranker_reads_each_lines_features_and_counts_in_its_rank() -> None:
    first = _hit("a", 1.0, ["u: alpha here", "a: is that so?"], [0, 1])
    second = _hit("b", 0.9, ["u: beta", "a: gamma"], [2, 3])
    query = np.array([1.0, 0.0], dtype=np.float32)
    lines = {
        "a": np.array([[0.1, 0.995], [0.2, 0.98]], dtype=np.float32),
        "b": np.array([[0.3, 0.954], [0.9, 0.436]], dtype=np.float32),
    }
    kwargs: dict[str, Any] = {"query_vector": query, "line_vectors": lines}
    seen: list[LineFeatures] = []

    def ranker(lines: Sequence[LineFeatures]) -> list[float]:
        seen.extend(lines)
        return [line.similarity for line in lines]  # prefers the closest line

    plain = turn_hits([first, second], "alpha", 4, **kwargs)
    ranked = turn_hits([first, second], "alpha", 4, ranker=ranker, **kwargs)
    assert plain[0].chunk_id == "a"
    # b's second line (cosine .9) overtakes a's first, which matched the question's word
    assert (ranked[0].chunk_id, ranked[0].metadata["turn_range"]) == ("b", [3, 3])
    by_seq = {features.seq: features for features in seen}
    assert set(by_seq) == {0, 1, 2, 3} and by_seq[3].chunk_id == "b"
    # neighbours are the lines next to it in its chunk (its own cosine at the edge)
    assert by_seq[3].previous == pytest.approx(0.3, abs=1e-3)
    assert by_seq[3].following == pytest.approx(0.9, abs=1e-3)
    assert by_seq[0].previous == pytest.approx(0.1, abs=1e-3)
    assert by_seq[0].following == pytest.approx(0.2, abs=1e-3)
    assert (by_seq[0].first, by_seq[1].first, by_seq[1].asks, by_seq[0].asks) == (1, 0, 1, 0)
    assert by_seq[0].lexical == pytest.approx(1.0) and by_seq[2].lexical == 0.0
    assert by_seq[0].length == pytest.approx(math.log(2))  # alpha, here
    assert len(by_seq[0].vector()) == len(FEATURES)
    # the score is the hand score and the ranker's value, weighted 1 : RANKER_WEIGHT
    hand = next(hit for hit in plain if hit.metadata["turn_range"] == [3, 3]).score
    assert ranked[0].score == pytest.approx(
        (hand + RANKER_WEIGHT * 0.9) / (1 + RANKER_WEIGHT), abs=1e-4
    )


def test_lines_said_on_the_day_the_question_names_are_dated() -> None:
    may8 = _hit("a", 1.0, ["u: we went hiking", "a: sounds fun"], [0, 1])
    may8.metadata["timestamp_range"] = ["2023-05-08T13:56:00+00:00", "2023-05-08T14:01:00+00:00"]
    june = _hit("b", 0.9, ["u: we went hiking again"], [2])
    june.metadata["timestamp_range"] = ["2023-06-20T09:00:00+00:00", "2023-06-20T09:00:00+00:00"]
    seen: list[LineFeatures] = []

    def ranker(lines: Sequence[LineFeatures]) -> list[float]:
        seen.extend(lines)
        return [line.dated for line in lines]

    ranked = turn_hits([june, may8], "Where did we go hiking on 8 May, 2023?", 3, ranker=ranker)
    assert {line.seq: line.dated for line in seen} == {0: 1.0, 1: 1.0, 2: 0.0}
    assert ranked[0].chunk_id == "a"  # the ranker's value lifts it over the better-fused one
    seen.clear()
    turn_hits([june, may8], "Where did we go hiking in June 2023?", 3, ranker=ranker)
    assert {line.seq: line.dated for line in seen} == {0: 0.0, 1: 0.0, 2: 1.0}
    seen.clear()
    turn_hits([june, may8], "Where did we go hiking?", 3, ranker=ranker)
    assert all(line.dated == 0.0 for line in seen)


def test_a_fitted_ranker_is_a_logistic_model_of_the_features() -> None:
    ranker = Ranker("m", -1.0, tuple(0.5 for _ in FEATURES))
    features = LineFeatures(3, "c", *(0.2 for _ in FEATURES))
    other = features._replace(similarity=1.2)
    expected = [-1.0 + 0.1 * len(FEATURES), -1.0 + 0.1 * len(FEATURES) + 0.5]
    assert list(ranker([features, other])) == pytest.approx(
        [1 / (1 + math.exp(-z)) for z in expected]
    )
    assert len(ranker([])) == 0
    with pytest.raises(ValueError, match="fused, lexical"):
        Ranker("m", 0.0, (1.0, 2.0))
    assert ranker_for("usem3") is RANKERS["usem3",]
    # a language's own ranker where the model has one, else the model's
    assert ranker_for("usem3", "zh") is RANKERS["usem3", "zh"]
    assert ranker_for("usem3", "en") is RANKERS["usem3",]
    # the hashing embedder (a fitted ranker did not beat its hand score) and models
    # without a fit of their own keep the hand score
    assert ranker_for("hashing-v1-512") is None and ranker_for("all-MiniLM-L6-v2") is None


def test_the_searcher_ranks_one_line_questions_with_a_vector_side_only(memory: Memory) -> None:
    texts = [*NOISE, "我的车停在地下二层B区17号车位。", "好的，已经记下了。", *NOISE]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    searcher = memory._engine.searcher
    seen: list[LineFeatures] = []

    def recorder(lines: Sequence[LineFeatures]) -> list[float]:
        seen.extend(lines)
        return [0.0] * len(lines)

    searcher.rankers = dict.fromkeys(searcher.rankers, recorder)
    memory.search("车停在哪个车位", top_k=3, min_score=0)
    assert seen and any(features.seq == 4 for features in seen)
    seen.clear()
    memory.search("车停在哪个车位", top_k=3, min_score=0, mode="lexical")
    memory.search("用户: 我出门了\n助手: 好的\n用户: 车停在哪个车位", top_k=3, min_score=0)
    assert seen == []  # lexical mode and dialogue windows keep the hand score


def test_a_chinese_question_of_chinese_memory_reads_the_chinese_ranker(memory: Memory) -> None:
    memory.add_turns("zh", make_turns([*NOISE, "我的车停在地下二层B区17号车位。", *NOISE]))
    english = ["I parked the car on level two, bay 17.", "Lunch was great today."]
    memory.add_turns("en", make_turns(english * 4))
    memory.flush()
    searcher = memory._engine.searcher
    asked: dict[str | None, int] = {None: 0, "zh": 0}

    def recorder(language: str | None) -> Any:
        def rank(lines: Sequence[LineFeatures]) -> list[float]:
            asked[language] += 1
            return [0.0] * len(lines)

        return rank

    searcher.rankers = {language: recorder(language) for language in asked}

    def ranked_by(query: str, conversation: str) -> str | None:
        before = dict(asked)
        memory.search(query, top_k=3, filters={"conversation_id": conversation}, min_score=0)
        return next(language for language in asked if asked[language] > before[language])

    assert ranked_by("车停在哪个车位", "zh") == "zh"
    assert ranked_by("Where did I park the car?", "zh") is None  # an English question
    assert ranked_by("我的车停在哪里", "en") is None  # Chinese, of English memory


def test_chunks_without_stored_turn_vectors_still_score_their_turns(memory: Memory) -> None:
    """A store indexed before turn vectors were kept: its lines are embedded at query time."""
    texts = [*NOISE, "我的车停在地下二层B区17号车位。", "好的，已经记下了。", *NOISE]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    stored = memory.search("车停在哪个车位", top_k=3, min_score=0)
    with memory.store._write() as conn:
        conn.execute("UPDATE chunks SET turn_vectors=NULL")
    fallback = memory.search("车停在哪个车位", top_k=3, min_score=0)
    assert [h.metadata["turn_range"] for h in fallback] == [
        h.metadata["turn_range"] for h in stored
    ]
    # the stored vectors are float16 (a cosine moves by < 1e-4), the evidence rounds to 1e-4
    assert fallback[0].metadata["evidence"]["similarity"] == pytest.approx(
        stored[0].metadata["evidence"]["similarity"], abs=2e-4
    )


def test_a_search_reads_the_line_tokens_the_worker_stored_instead_of_tokenizing(
    memory: Memory,
) -> None:
    """No candidate line is tokenized by a search when the worker stored its tokens (only
    the conversation's participant names are); a store without them (indexed before they
    were kept) tokenizes every candidate line and finds the same hits."""
    texts = [*NOISE, "我的车停在地下二层B区17号车位。", "好的，已经记下了。", *NOISE]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    cache = evidence_module._LINE_TOKENS
    cache.clear()
    stored = memory.search("车停在哪个车位", top_k=3, min_score=0)
    assert cache.misses <= 2  # 用户, 助手
    with memory.store._write() as conn:
        conn.execute("UPDATE chunks SET turn_tokens=NULL")
    cache.clear()
    fallback = memory.search("车停在哪个车位", top_k=3, min_score=0)
    assert cache.misses > 2 * len(NOISE)
    assert [(h.chunk_id, h.text, h.score) for h in fallback] == [
        (h.chunk_id, h.text, h.score) for h in stored
    ]


def test_a_chinese_line_that_says_several_things_has_clauses() -> None:
    # fillers ("对了") are no clause; a clause says four characters or more
    assert line_clauses("对了，我不吃香菜，坐飞机喜欢靠窗的座位。") == [
        "我不吃香菜，",
        "坐飞机喜欢靠窗的座位。",
    ]
    # an ASCII comma straight after a Chinese character divides as the full-width one does
    assert line_clauses("我不吃香菜,坐飞机喜欢靠窗的座位") == [
        "我不吃香菜,",
        "坐飞机喜欢靠窗的座位",
    ]
    # one thing said: the line's own vector is enough
    assert line_clauses("我的车停在地下二层B区17号车位。") == []
    assert line_clauses("好的，没问题") == []
    # English lines keep one vector (sentence vectors moved nothing on LoCoMo)
    assert line_clauses("I don't eat cilantro, and I like window seats. Remember that.") == []
    many = "，".join(f"第{n}件事情要记住" for n in range(MAX_CLAUSES + 3))
    assert len(line_clauses(many)) == MAX_CLAUSES


def test_chat_that_writes_spaces_for_commas_has_clauses_too() -> None:
    spaced = "客户寄了一箱芒果到公司 我全分给同事了 乐乐吃不了 他对芒果过敏 吓死"
    assert line_clauses(spaced) == [
        "客户寄了一箱芒果到公司",
        "我全分给同事了",
        "乐乐吃不了",
        "他对芒果过敏",
    ]
    # the punctuation's clauses come first, as before, then what spaces part off inside
    # them: a line keeps every row it had, so an older store never reads a wrong clause
    mixed = "我老公说好这周末回来的。他在东莞松山湖的厂里做工程师 一个月能回来两次"
    assert line_clauses(mixed) == [
        "我老公说好这周末回来的。",
        "他在东莞松山湖的厂里做工程师 一个月能回来两次",
        "他在东莞松山湖的厂里做工程师",
        "一个月能回来两次",
    ]
    # a space beside a Latin word or a number parts nothing; one clause is no clause
    assert line_clauses("戒指是I Do家的 50分") == []
    assert line_clauses("好的 我知道了") == []


def test_vector_rows_read_the_workers_layout_and_older_stores() -> None:
    lines = [
        "对了，我不吃香菜，坐飞机喜欢靠窗的座位。",
        "好的，记下了。",
        "我下个月要去东京出差，大概待五天。",
    ]
    # every line's row in turn order, then each line's clauses in the same order
    assert vector_rows(lines, 3 + 2 + 2) == [[0, 3, 4], [1], [2, 5, 6]]
    # written before clause vectors: one row per line
    assert vector_rows(lines, 3) == [[0], [1], [2]]
    # rows that match no layout this code knows: the lines' rows only, never a wrong clause
    assert vector_rows(lines, 5) == [[0], [1], [2]]


def test_a_turn_is_as_similar_to_the_question_as_its_closest_clause(memory: Memory) -> None:
    line = "对了，我不吃香菜，坐飞机喜欢靠窗的座位。"
    memory.add_turns("c", make_turns([*NOISE, line, "好的，已经记下了。"]))
    memory.flush()
    question = "香菜"
    embedder = memory.embedding
    query = embedder.embed_query_array([question])[0]
    whole = float(embedder.embed_array([line])[0] @ query)
    parts = embedder.embed_array(line_clauses(line)) @ query
    hits = memory.search(question, top_k=3, min_score=0, filters={"conversation_id": "c"})
    top = hits[0]
    assert top.text.endswith(line)
    similarity = top.metadata["evidence"]["similarity"]
    assert similarity == pytest.approx(float(parts.max()), abs=1e-4)
    assert similarity > whole + 0.05  # the clause is closer than the whole line
    # a store indexed before clause vectors (one row per line) reads its lines' rows only
    strip_clause_vectors(memory)
    older = memory.search(question, top_k=3, min_score=0, filters={"conversation_id": "c"})
    assert older[0].metadata["evidence"]["similarity"] == pytest.approx(whole, abs=1e-4)


def test_a_question_naming_one_participant_prefers_what_that_participant_said() -> None:
    chunk = _hit(
        "a",
        1.0,
        ["Gina: I opened a new bakery downtown.", "Jon: I opened a new bakery downtown."],
        [0, 1],
    )

    def first(query: str, weight: float) -> str:
        return turn_hits([chunk], query, 2, speaker_weight=weight)[0].text

    # both say the same; the name decides, and only with the weight
    assert first("What did Jon open downtown?", 0.05).startswith("Jon:")
    assert first("What did Gina open downtown?", 0.05).startswith("Gina:")
    assert first("What did Jon open downtown?", 0.0).startswith("Gina:")
    # naming both (or nobody) leaves the ranking to the text
    assert first("What did Jon and Gina open downtown?", 0.05).startswith("Gina:")


def test_names_are_found_whole_and_left_out_with_their_possessive() -> None:
    assert named("What did Caroline tell Mel?", ["Caroline", "Melanie"]) == ["Caroline"]
    assert named("小王的生日是哪天", ["小王", "用户"]) == ["小王"]
    assert without_names("What did Caroline's mom tell Caroline?", ["Caroline"]) == (
        "What did mom tell ?"
    )
    assert without_names("Carolineville is not Caroline", ["Caroline"]) == "Carolineville is not"
    assert without_names("小王的生日是哪天", ["小王"]) == "的生日是哪天"


def test_a_question_of_one_conversation_is_embedded_without_its_participants_names(
    tmp_path: Path,
) -> None:
    base = "2026-02-02T10:00:00+08:00"
    lines = [
        ("Caroline", "I researched adoption agencies last week."),
        ("Melanie", "That is a big step, how did it feel?"),
        ("Caroline", "Exciting, I painted a sunrise to celebrate."),
    ]
    with Memory.open(
        str(tmp_path / "names.db"), embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    ) as memory:
        memory.add_turns(
            "c1",
            [
                {"turn_id": i, "role": "user", "name": name, "text": text, "timestamp": base}
                for i, (name, text) in enumerate(lines)
            ],
        )
        memory.flush()
        question = "What did Caroline research?"
        scope = {"conversation_id": "c1"}

        def vector_hits(vector: list[float] | None, filters: dict[str, str] | None) -> list[Any]:
            found = memory.search(
                question, top_k=3, filters=filters, mode="vector", query_vector=vector
            )
            return [(hit.chunk_id, hit.text, hit.score) for hit in found]

        stripped = memory.embed_query("What did research?")
        whole = memory.embed_query(question)
        assert stripped != whole
        assert vector_hits(None, scope) == vector_hits(stripped, scope)
        # tenant-wide the names of everyone who speaks in the tenant are left out
        assert vector_hits(None, None) == vector_hits(stripped, None)
        assert vector_hits(None, None) != vector_hits(whole, None)
        # someone who speaks only in a conversation added since, and only there
        memory.add_turns(
            "c2",
            [
                {
                    "turn_id": 0,
                    "role": "user",
                    "name": "Jon",
                    "text": "I researched dance studios downtown.",
                    "timestamp": base,
                }
            ],
        )
        memory.for_tenant("other").add_turns(
            "c3", [{"turn_id": 0, "role": "user", "name": "Gina", "text": "Hi.", "timestamp": base}]
        )
        memory.flush()
        memory.for_tenant("other").flush()
        asked, left = "What did Jon research?", "What did research?"
        for _ in range(2):  # caught up with the new chunks, then from the kept names
            found = memory.search(asked, top_k=3, mode="vector")
            expected = memory.search(
                asked, top_k=3, mode="vector", query_vector=memory.embed_query(left)
            )
            assert [(h.chunk_id, h.score) for h in found] == [
                (h.chunk_id, h.score) for h in expected
            ]
        # another tenant's speaker is no participant of this one
        gina = memory.search("What did Gina research?", top_k=3, mode="vector")
        kept = memory.search(
            "What did Gina research?",
            top_k=3,
            mode="vector",
            query_vector=memory.embed_query("What did Gina research?"),
        )
        assert [(h.chunk_id, h.score) for h in gina] == [(h.chunk_id, h.score) for h in kept]


def test_a_question_about_the_user_or_about_what_the_assistant_said_prefers_its_lines(
    memory: Memory,
) -> None:
    """In a user-assistant chat the assistant often repeats what the user said. A question
    in the first person prefers the user's line; one about what the assistant said ("你说")
    prefers the assistant's, as a question that names a participant prefers theirs."""
    texts = [
        "周六下午三点去看牙医。",
        "周六下午三点去看牙医，记得提前刷牙。",
        *[f"今天第{n}次开会，讨论新项目的排期。" for n in range(8)],
    ]
    memory.add_turns("c", make_turns(texts))
    memory.flush()
    scope = {"conversation_id": "c"}
    mine = memory.search("我周六几点看牙医？", top_k=2, filters=scope, min_score=0)
    assert [hit.text[:2] for hit in mine] == ["用户", "助手"]
    yours = memory.search("你说周六几点看牙医？", top_k=2, filters=scope, min_score=0)
    assert [hit.text[:2] for hit in yours] == ["助手", "用户"]
