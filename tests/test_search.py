"""Read path: hybrid retrieval, filters on every field, deletes, purge, tenants, ANN."""

from __future__ import annotations

import string
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import FilterError, HashingEmbedder, InvalidInputError, Memory
from convmem.governance import KeepAllMarker
from convmem.store import matches, parse_filters
from helpers import BASE_TIME, live_chunks, make_turns

TRIP = [
    "我下个月要去东京出差，大概待五天。",
    "好的。请问您的护照有效期还够吗？",
    "我护照是2025年2月18日过期的，得赶紧去换。",
    "了解，您的护照将于2025年2月18日过期，建议尽快办理换发。",
    "我不吃香菜，坐飞机喜欢靠窗的座位。",
    "好的，记住了：不吃香菜，座位靠窗。",
    "季度报告周五下午五点前要交给王经理。",
    "明白，周五17:00前提交季度报告给王经理。",
    "我家的猫叫年糕，是一只橘猫。",
    "年糕这个名字真可爱！",
    "我最近在学吉他，每天练半小时。",
    "坚持练习进步会很快的。",
]


@pytest.fixture
def trip(memory: Memory) -> Memory:
    memory.add_turns("trip", make_turns(TRIP))
    memory.flush()
    return memory


@pytest.mark.parametrize(
    ("question", "needle"),
    [
        ("护照哪天到期", "护照是2025年2月18日过期"),
        ("飞机上我喜欢坐哪里", "靠窗"),
        ("报告截止时间是什么时候", "王经理"),
        ("我养的宠物叫什么名字", "年糕"),
        ("我在学什么乐器", "吉他"),
    ],
)
def test_paraphrased_chinese_question_finds_the_right_chunk(
    trip: Memory, question: str, needle: str
) -> None:
    hits = trip.search(question, top_k=1)
    assert hits and needle in hits[0].text


def test_hits_have_the_seed_shape(trip: Memory) -> None:
    (hit,) = trip.search("护照", top_k=1)
    assert hit.chunk_id.startswith("chk_")
    assert 0 < hit.score <= 1.0
    assert hit.tier == "MTM"
    for key in (
        "conversation_id",
        "turn_range",
        "timestamp_range",
        "participants",
        "speakers",
        "intent_tag",
        "chunk_version",
        "deleted",
        "tenant",
    ):
        assert key in hit.metadata
    assert hit.metadata["deleted"] is False


def _two_conversations(memory: Memory) -> None:
    memory.add_turns("alpha", make_turns(["alpha 讨论 护照 过期", "alpha 回复 护照"]))
    memory.add_turns(
        "beta",
        [
            {
                "turn_id": 0,
                "role": "user",
                "name": "Ann",
                "text": "beta 讨论 护照 签证",
                "timestamp": "2026-05-01T09:00:00+00:00",
            },
            {
                "turn_id": 1,
                "role": "tool",
                "text": "beta 工具 护照 查询结果",
                "timestamp": "2026-05-01T09:01:00+00:00",
            },
        ],
    )
    memory.flush()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (None, {"alpha", "beta"}),
        ({"conversation_id": "alpha"}, {"alpha"}),
        ({"conversation_id": {"$in": ["beta", "zzz"]}}, {"beta"}),
        ({"conversation_id": {"$ne": "alpha"}}, {"beta"}),
        ({"speakers": "tool"}, {"beta"}),
        ({"speakers": ["assistant", "nobody"]}, {"alpha"}),
        ({"speakers": {"$contains_all": ["user", "tool"]}}, {"beta"}),
        ({"participants": "Ann"}, {"beta"}),
        ({"participants": {"$contains": "用户"}}, {"alpha"}),
        ({"timestamp_range": ["2026-04-30T00:00:00+00:00", None]}, {"beta"}),
        ({"timestamp_range": [None, "2026-03-01T00:00:00+00:00"]}, {"alpha"}),
        ({"turn_range": [1, 1]}, {"alpha", "beta"}),
        ({"turn_range": [5, 9]}, set()),
        ({"deleted": False}, {"alpha", "beta"}),
        ({"tenant": "default"}, {"alpha", "beta"}),
        ({"chunk_version": 1}, {"alpha", "beta"}),
        ({"chunk_version": 2}, set()),
        ({"intent_tag": "dialogue"}, {"alpha", "beta"}),
    ],
)
def test_filter_on_every_field(
    memory: Memory, filters: dict[str, Any] | None, expected: set[str]
) -> None:
    _two_conversations(memory)
    hits = memory.search("护照", top_k=10, filters=filters)
    assert {hit.metadata["conversation_id"] for hit in hits} == expected


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"turn_range": [2, 3]}, {2, 3}),
        ({"speakers": "user"}, {0, 2, 4, 6, 8, 10}),
        (
            {"timestamp_range": [(BASE_TIME + timedelta(minutes=4)).isoformat(), None]},
            set(range(4, 12)),
        ),
    ],
)
def test_a_turn_hit_meets_place_speaker_and_time_filters_by_its_own_turn(
    trip: Memory, filters: dict[str, Any], expected: set[int]
) -> None:
    hits = trip.search("护照 香菜 王经理 年糕 吉他", top_k=12, min_score=0, filters=filters)
    found = {hit.metadata["turn_range"][0] for hit in hits}
    assert found <= expected and (found or not expected)
    for hit in hits:  # and says them of its own turn
        (seq,) = set(hit.metadata["turn_range"])
        assert hit.metadata["speakers"] == ["user" if seq % 2 == 0 else "assistant"]
        when = (BASE_TIME + timedelta(minutes=seq)).isoformat()
        assert hit.metadata["timestamp_range"] == [when, when]
    # a chunk-level hit meets them by the chunk: it holds turns outside the filter
    chunks = trip.search(
        "护照 香菜 王经理", top_k=12, min_score=0, filters=filters, granularity="chunk"
    )
    spans = [set(range(lo, hi + 1)) for lo, hi in (h.metadata["turn_range"] for h in chunks)]
    assert chunks and any(span - expected for span in spans)
    assert all(span & expected for span in spans)


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"deleted": True}, "filters.deleted"),
        ({"tenant": "other"}, "filters.tenant"),
        ({"colour": "red"}, "filters.colour"),
        ({"conversation_id": 5}, "filters.conversation_id"),
        ({"conversation_id": {"$regex": ".*"}}, "filters.conversation_id"),
        ({"turn_range": [3, 1]}, "filters.turn_range"),
        ({"turn_range": ["1", 2]}, "filters.turn_range"),
        ({"timestamp_range": ["2026-01-01T00:00:00", None]}, "filters.timestamp_range"),
        ({"importance": float("nan")}, "filters.importance"),
        ({"pinned": "yes"}, "filters.pinned"),
        ("conversation_id = 'x'", "filters"),
    ],
)
def test_bad_filter_is_a_clear_error(memory: Memory, filters: Any, field: str) -> None:
    with pytest.raises(FilterError) as caught:
        memory.search("护照", filters=filters)
    assert caught.value.field == field


@pytest.mark.parametrize(("top_k", "query"), [(0, "x"), (1001, "x"), (True, "x"), (3, "  ")])
def test_bad_search_arguments(memory: Memory, top_k: Any, query: str) -> None:
    with pytest.raises(InvalidInputError):
        memory.search(query, top_k=top_k)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"candidates": 0}, "candidates"),
        ({"candidates": -5}, "candidates"),
        ({"candidates": 10**12}, "candidates"),
        ({"candidates": True}, "candidates"),
        ({"decompose": "yes"}, "decompose"),
        ({"query_vector": "abc"}, "query_vector"),
        ({"query_vector": [float("nan")] * 512}, "query_vector"),
        ({"query_vector": [[0.1] * 512]}, "query_vector"),
        ({"query_vector": [None] * 512}, "query_vector"),
    ],
)
def test_bad_search_options_name_their_field(
    trip: Memory, arguments: dict[str, Any], field: str
) -> None:
    # candidates -5 once reached numpy's partition (ValueError: kth out of bounds), a
    # vector of NaN was searched, and "abc" failed to convert
    with pytest.raises(InvalidInputError) as caught:
        trip.search("吉他", **arguments)
    assert caught.value.field == field
    assert trip.search("吉他", candidates=100, decompose=False)  # the same, well formed


hostile_text = st.one_of(
    st.text(
        alphabet=st.sampled_from([*string.printable, "护", "照", "\u0000", "é", "\u2028"]),
        max_size=12,
    ),
    st.sampled_from(
        ["--", "'; DROP TABLE chunks; --", "$.metadata", "json_each(", '" OR 1=1 --', "user"]
    ),
)
hostile_filters = st.dictionaries(
    keys=st.one_of(
        st.sampled_from(
            ["conversation_id", "speakers", "participants", "intent_tag", "turn_range"]
        ),
        hostile_text,
    ),
    values=st.one_of(
        hostile_text,
        st.lists(hostile_text, min_size=1, max_size=3),
        st.dictionaries(
            st.sampled_from(["$eq", "$in", "$ne", "$contains", "$x", "'; DROP"]),
            hostile_text,
            max_size=1,
        ),
        st.integers(),
        st.none(),
    ),
    max_size=3,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hostile_filters)
def test_hostile_filters_give_correct_results_or_a_clear_error(
    memory: Memory, filters: dict[str, Any]
) -> None:
    if not live_chunks(memory):
        memory.add_turns('it\'s -- "quoted"', make_turns(["护照 quoted 'x' -- y", "reply 护照"]))
        memory.add_turns("plain", make_turns(["护照 plain", "reply plain 护照"]))
        memory.flush()
    try:
        spec = parse_filters(filters, tenant=memory.tenant)
    except FilterError:
        with pytest.raises(FilterError) as caught:
            memory.search("护照", top_k=20, filters=filters)
        assert caught.value.field is not None
        assert caught.value.field.startswith("filters")
        return
    hits = memory.search("护照", top_k=20, filters=filters)
    got = {hit.chunk_id for hit in hits}
    conn = memory.store._db()
    rows = conn.execute("SELECT chunk_id, metadata FROM chunks WHERE deleted=0").fetchall()
    import json

    expected = {chunk for chunk, meta in rows if matches(json.loads(meta), spec)}
    assert got == expected  # the query matches every chunk, so the filter alone decides
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == len(rows)  # nothing dropped


def test_deleted_turns_never_come_back_through_search(trip: Memory) -> None:
    assert any("年糕" in hit.text for hit in trip.search("猫的名字", top_k=10))
    result = trip.delete("trip", turn_range=(8, 9))
    assert result.turns_deleted == 2 and result.deleted >= 1
    for query in ("年糕", "猫", "橘猫 名字"):
        assert not any("年糕" in hit.text for hit in trip.search(query, top_k=50))
    trip.flush()  # the re-cut of surviving turns must not bring them back either
    assert not any("年糕" in hit.text for hit in trip.search("年糕", top_k=50))
    # surviving neighbours are still searchable
    assert any("吉他" in hit.text for hit in trip.search("吉他", top_k=5))
    # re-sending the deleted turns does not resurrect them
    receipt = trip.add_turns("trip", make_turns(TRIP)[8:10])
    assert receipt.accepted_turn_ids == []
    trip.flush()
    assert not any("年糕" in hit.text for hit in trip.search("年糕", top_k=50))


def test_delete_by_chunk_id_deletes_its_turns_and_overlapping_chunks(trip: Memory) -> None:
    target = trip.search("护照 过期", top_k=1)[0]
    low, high = target.metadata["turn_range"]
    result = trip.delete("trip", chunk_ids=[target.chunk_id])
    assert result.deleted >= 1 and not result.errors
    trip.flush()
    for _, (_, (start, end)) in live_chunks(trip, "trip").items():
        assert end < low or start > high
    assert all(hit.chunk_id != target.chunk_id for hit in trip.search("护照", top_k=50))


def test_delete_reports_unknown_chunk_ids(trip: Memory) -> None:
    result = trip.delete("trip", chunk_ids=["chk_doesnotexist"])
    assert result.deleted == 0
    assert result.errors and "chk_doesnotexist" in result.errors[0]


def test_delete_whole_conversation(trip: Memory) -> None:
    trip.delete("trip")
    trip.flush()
    assert trip.search("护照", top_k=10) == []
    assert live_chunks(trip, "trip") == {}


def test_purge_removes_deleted_text_physically(tmp_path: Path) -> None:
    path = tmp_path / "purge.db"
    marker = "独一无二的秘密口令ZQX"
    with Memory.open(
        str(path), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as memory:
        memory.add_turns("c", make_turns([f"我的密码是{marker}", "好的", "今天天气很好", "是的"]))
        memory.flush()
        memory.delete("c", turn_range=(0, 1))
        memory.flush()
        memory.purge()
        assert not any(marker in hit.text for hit in memory.search(marker, top_k=10))
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("purge.db"))
    assert marker.encode("utf-8") not in blob
    assert "今天天气很好".encode() in blob  # live text is still there


def test_tenants_never_see_each_other(memory: Memory) -> None:
    other = memory.for_tenant("acme")
    memory.add_turns("shared-id", make_turns(["默认租户的秘密：护照号码E123", "好的"]))
    other.add_turns("shared-id", make_turns(["acme 租户的秘密：护照号码A999", "好的"]))
    memory.flush()
    other.flush()
    mine = memory.search("护照号码", top_k=20)
    theirs = other.search("护照号码", top_k=20, filters={"conversation_id": "shared-id"})
    assert mine and all(
        "E123" in (hit.context or hit.text) and hit.metadata["tenant"] == "default" for hit in mine
    )
    assert theirs and all(
        "A999" in (hit.context or hit.text) and hit.metadata["tenant"] == "acme" for hit in theirs
    )
    with pytest.raises(FilterError):
        memory.search("护照", filters={"tenant": "acme"})
    # deleting in one tenant leaves the other alone
    other.delete("shared-id")
    other.flush()
    assert other.search("护照号码", top_k=5) == []
    assert memory.search("护照号码", top_k=5)


def test_tenant_wide_search_through_ann_matches_exact_and_hides_deleted(tmp_path: Path) -> None:
    texts = [
        f"第{i}号记录：{'护照签证酒店机票行程预算会议报告'[i % 16]}相关的内容{i}"
        for i in range(240)
    ]
    exact_path, ann_path = tmp_path / "exact.db", tmp_path / "ann.db"
    results = {}
    for path, min_rows in ((exact_path, 10**9), (ann_path, 0)):
        with Memory.open(
            str(path),
            embedder=HashingEmbedder(),
            marker=KeepAllMarker(),
            workers=0,
            ann_min_rows=min_rows,
        ) as memory:
            for conv in range(4):
                memory.add_turns(f"c{conv}", make_turns(texts[conv * 60 : conv * 60 + 60]))
            memory.flush()
            results[path] = [
                hit.chunk_id
                for hit in memory.search("护照 签证", top_k=10, granularity="chunk", min_score=0)
            ]
            if min_rows == 0:
                victim = results[path][0]
                conv = memory.search("护照 签证", top_k=1, min_score=0)[0].metadata[
                    "conversation_id"
                ]
                memory.delete(conv, chunk_ids=[victim])
                assert victim not in [
                    hit.chunk_id for hit in memory.search("护照 签证", top_k=50, min_score=0)
                ]
                memory.flush()
                assert victim not in [
                    hit.chunk_id for hit in memory.search("护照 签证", top_k=50, min_score=0)
                ]
    assert len(set(results[exact_path]) & set(results[ann_path])) >= 9
    assert any(p.name.endswith(".usearch") for p in tmp_path.iterdir())
    # a reopened store reuses the saved index and stays consistent
    with Memory.open(
        str(ann_path), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, ann_min_rows=0
    ) as memory:
        assert memory.search("护照 签证", top_k=5, min_score=0)


def test_caller_upserts_are_replayable_without_duplicates(memory: Memory) -> None:
    record = {
        "chunk_id": "chk_custom_1",
        "text": "[上下文：2026-02-02 用户在讨论护照] 用户: 我护照明年过期。",
        "metadata": {"conversation_id": "ext", "turn_range": [3, 4]},
    }
    first = memory.upsert_chunks([record, record | {"chunk_id": "chk_custom_2"}])
    assert (first.upserted, first.updated) == (2, 0)
    again = memory.upsert_chunks([record])
    assert (again.upserted, again.updated) == (0, 1)
    changed = memory.update(record | {"text": "[上下文：更新] 用户: 护照已经换新。"})
    assert (changed.upserted, changed.updated) == (0, 1)
    hits = memory.search("护照", top_k=10, filters={"conversation_id": "ext"})
    assert sorted(hit.chunk_id for hit in hits) == ["chk_custom_1", "chk_custom_2"]
    assert any("换新" in hit.text for hit in hits)
    bad = memory.upsert_chunks([{"chunk_id": "x", "text": "", "metadata": {}}])
    assert bad.upserted == 0 and len(bad.errors) == 1


@pytest.mark.parametrize("query", ["\u200b\u200b", "\ufeff", " \u200d\t"])
def test_a_question_of_invisible_characters_is_empty(trip: Memory, query: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        trip.search(query, min_score=0)
    assert caught.value.field == "query_text" and "empty" in str(caught.value)


def test_a_hints_time_window_never_widens_the_callers_time_filter(trip: Memory) -> None:
    recent = {"strategies": ["temporal_search"], "params": {"time_range": "recent"}}
    early = {"conversation_id": "trip", "timestamp_range": [None, BASE_TIME.isoformat()]}
    hits = trip.search("护照 香菜 王经理", hints=recent, filters=early, min_score=0, top_k=10)
    assert hits and {hit.metadata["turn_range"][0] for hit in hits} == {0}
    before = {"conversation_id": "trip", "timestamp_range": [None, "2026-01-01T00:00:00Z"]}
    assert trip.search("护照 香菜", hints=recent, filters=before, min_score=0) == []


def test_every_part_of_a_long_question_is_searched(trip: Memory) -> None:
    question = "护照哪天过期？我不吃什么？报告交给谁？我的猫叫什么？我在学什么乐器？"
    hits = trip.search(question, top_k=10)
    # the fifth part, asked with the fourth (it was dropped)
    assert any("吉他" in hit.text and "乐器" in hit.metadata["sub_query"] for hit in hits)
    assert len({hit.metadata["sub_query"] for hit in hits}) == 4


def test_file_bytes_count_the_write_ahead_log(trip: Memory) -> None:
    path = Path(trip.store.url.removeprefix("sqlite:///"))
    wal = path.with_name(path.name + "-wal")
    assert wal.exists() and wal.stat().st_size > 0  # rows since the last checkpoint
    assert trip.stats()["file_bytes"] == path.stat().st_size + wal.stat().st_size


def test_a_caller_chunk_that_no_delete_could_reach_is_refused(memory: Memory) -> None:
    base = {"text": "护照 签证 材料", "metadata": {"conversation_id": "c", "turn_range": [0, 0]}}
    result = memory.upsert_chunks(
        [
            {
                **base,
                "chunk_id": "blank-conversation",
                "metadata": {**base["metadata"], "conversation_id": "  "},
            },
            {
                **base,
                "chunk_id": "long-conversation",
                "metadata": {**base["metadata"], "conversation_id": "c" * 201},
            },
            {**base, "chunk_id": " "},
            {**base, "chunk_id": "x" * 201},
            {
                **base,
                "chunk_id": "backwards",
                "metadata": {
                    **base["metadata"],
                    "timestamp_range": ["2026-01-02T00:00:00+00:00", "2026-01-01T00:00:00+00:00"],
                },
            },
            {**base, "chunk_id": "fine"},
        ]
    )
    assert result.upserted == 1 and len(result.errors) == 5
    fields = [error.split(" ")[0] for error in result.errors]
    assert fields == [
        "chunks[0].metadata.conversation_id",
        "chunks[1].metadata.conversation_id",
        "chunks[2].chunk_id",
        "chunks[3].chunk_id",
        "chunks[4].metadata.timestamp_range",
    ]
    assert [hit.chunk_id for hit in memory.search("护照", granularity="chunk", min_score=0)] == [
        "fine"
    ]
    assert memory.delete("c", chunk_ids=["fine"]).deleted == 1


def test_caller_chunks_are_listed_under_the_search_filters(memory: Memory) -> None:
    records = [
        {
            "chunk_id": f"chk_{i}",
            "text": f"记录{i}：护照",
            "metadata": {
                "conversation_id": f"ext{i % 2}",
                "turn_range": [i, i],
                "intent_tag": "draft" if i == 3 else "note",
                "tags": ["a", f"t{i % 3}"],
            },
        }
        for i in range(6)
    ]
    assert memory.upsert_chunks(records).errors == []
    listed = memory.chunks(filters={"tags": "t0"})
    assert [record.chunk_id for record in listed] == ["chk_0", "chk_3"]
    assert [
        record.chunk_id
        for record in memory.chunks(filters={"tags": "a", "intent_tag": {"$ne": "draft"}})
    ] == ["chk_0", "chk_1", "chk_2", "chk_4", "chk_5"]
    assert [r.chunk_id for r in memory.chunks("ext1", filters={"tags": "t0"})] == ["chk_3"]
    assert [r.chunk_id for r in memory.chunks(filters={"tags": "a"}, limit=2, offset=2)] == [
        "chk_2",
        "chk_3",
    ]
    memory.delete("ext0", chunk_ids=["chk_0"])
    assert [record.chunk_id for record in memory.chunks(filters={"tags": "t0"})] == ["chk_3"]
    with pytest.raises(FilterError) as caught:
        memory.chunks(filters={"colour": "red"})
    assert caught.value.field == "filters.colour"


def test_expired_chunks_are_never_returned(memory: Memory) -> None:
    memory.upsert_chunks(
        [
            {
                "chunk_id": "chk_old",
                "text": "过期的记忆：护照",
                "metadata": {
                    "conversation_id": "e",
                    "turn_range": [0, 0],
                    "expires_at": "2000-01-01T00:00:00+00:00",
                },
            },
            {
                "chunk_id": "chk_new",
                "text": "有效的记忆：护照",
                "metadata": {
                    "conversation_id": "e",
                    "turn_range": [1, 1],
                    "expires_at": "2999-01-01T00:00:00+00:00",
                },
            },
        ]
    )
    for filters in (None, {"conversation_id": "e"}):
        assert [hit.chunk_id for hit in memory.search("护照", filters=filters)] == ["chk_new"]


def test_filter_reference_semantics_on_generated_metadata() -> None:
    meta = {
        "conversation_id": "c",
        "turn_range": [2, 5],
        "speakers": ["user"],
        "participants": [],
        "timestamp_range": ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"],
    }
    spec = parse_filters({"turn_range": [5, None], "speakers": "user"}, tenant="t")
    assert matches(meta, spec)
    spec = parse_filters({"timestamp_range": ["2026-01-03T00:00:00+00:00", None]}, tenant="t")
    assert not matches(meta, spec)


def test_search_in_a_fresh_temporary_store_returns_nothing() -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        Memory.open(
            f"{folder}/empty.db", embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
        ) as memory,
    ):
        assert memory.search("anything") == []


def test_a_tenant_whose_every_vector_is_deleted_searches_to_nothing(tmp_path: Path) -> None:
    # with the HNSW sidecar from the first row on, an emptied index was asked for 0
    # neighbours (usearch: "count must be a positive integer")
    with Memory.open(
        str(tmp_path / "m.db"),
        embedder=HashingEmbedder(),
        marker=KeepAllMarker(),
        workers=0,
        ann_min_rows=0,
    ) as memory:
        memory.add_turns("trip", make_turns(TRIP))
        memory.flush()
        assert memory.search("吉他", mode="vector", min_score=0)
        memory.delete("trip")
        memory.flush()
        for mode in ("vector", "hybrid"):
            assert memory.search("吉他", mode=mode, min_score=0) == []


def test_search_modes_and_precomputed_vectors(trip: Memory) -> None:
    lexical = trip.search("吉他", top_k=1, mode="lexical")
    vector = trip.search("吉他", top_k=1, mode="vector")
    assert "吉他" in lexical[0].text and "吉他" in vector[0].text
    precomputed = trip.embed_query("吉他")
    assert trip.search("吉他", top_k=3, query_vector=precomputed) == trip.search("吉他", top_k=3)
    with pytest.raises(InvalidInputError) as caught:
        trip.search("吉他", query_vector=[0.1, 0.2])
    assert caught.value.field == "query_vector"
    with pytest.raises(InvalidInputError):
        trip.search("吉他", mode="fuzzy")


def test_convex_fusion_keeps_score_gaps_that_rank_fusion_loses() -> None:
    from convmem.retrieve.fusion import convex as _convex
    from convmem.retrieve.fusion import rrf as _rrf

    # BM25 barely prefers row 1 over row 2; the vector side strongly prefers row 2
    lexical = [(1, 10.0), (2, 9.9), (3, 1.0)]
    vector = [(2, 0.9), (1, 0.2), (3, 0.1)]
    ranked_by_rank = [rowid for rowid, _ in _rrf([(1.0, vector), (1.0, lexical)])]
    ranked_by_score = _convex([(1.0, vector), (1.0, lexical)])
    assert ranked_by_rank[0] == 1  # a tie in ranks, broken by row order
    assert [rowid for rowid, _ in ranked_by_score] == [2, 1, 3]
    assert ranked_by_score[0][1] == pytest.approx((1.0 + 8.9 / 9.0) / 2)
    # weights tilt it back, and a row missing from one list scores 0 there
    tilted = _convex([(0.01, vector), (1.0, [*lexical, (4, 0.5)])])
    assert [rowid for rowid, _ in tilted][:2] == [1, 2] and tilted[-1][0] == 4


def test_convex_fusion_searches_and_bad_fusion_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        Memory.open(str(tmp_path / "x.db"), embedder=HashingEmbedder(), fusion="max")
    assert caught.value.field == "fusion"
    with Memory.open(
        str(tmp_path / "c.db"), embedder=HashingEmbedder(), fusion="convex", workers=0
    ) as memory:
        memory.add_turns("trip", make_turns(TRIP))
        memory.run_pending()
        hits = memory.search("我在学什么乐器", top_k=3)
        assert "吉他" in hits[0].text and hits[0].score <= 1.0
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_overlapping_chunks_are_not_repeated(memory: Memory) -> None:
    def record(chunk_id: str, start: int, end: int, text: str) -> dict[str, Any]:
        return {
            "chunk_id": chunk_id,
            "text": text,
            "metadata": {"conversation_id": "c", "turn_range": [start, end]},
        }

    memory.upsert_chunks(
        [
            record("wide", 0, 3, "护照 过期 换发 护照 过期 出入境"),
            record("inside", 1, 3, "护照 过期 换发 护照 出入境"),
            record("elsewhere", 10, 12, "护照 过期 办理"),
        ]
    )
    ranked = [hit.chunk_id for hit in memory.search("护照 过期 换发", top_k=3, mode="lexical")]
    assert ranked[:2] == ["wide", "elsewhere"] and ranked[2] == "inside"
    assert [hit.chunk_id for hit in memory.search("护照 过期 换发", top_k=2, mode="lexical")] == [
        "wide",
        "elsewhere",
    ]
