"""Seed 004: PreRetrieval operators, routing hints, the hierarchical service, pipelines."""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import convmem.retrieve.preretrieval as preretrieval_module
import convmem.retrieve.routing as routing_module
from convmem import HashingEmbedder, Memory
from convmem.errors import InvalidInputError
from convmem.models import Hit
from convmem.retrieve import PreRetrieval, Router, build_pipeline
from convmem.retrieve.hierarchy import RetrievalResult, merge_results
from convmem.text import asked_part, split_questions, without_recall_frame
from helpers import make_turns


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(str(tmp_path / "r.db"), embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns(
            "c",
            make_turns(
                [
                    "我喜欢靠窗的座位。",
                    "好的，已记下。",
                    "我下个月要去东京出差。",
                    "需要准备签证吗？",
                    "要的，护照明年三月过期。",
                    "建议尽快换发护照。",
                    "记住：我对花生过敏",
                    "好的。",
                ]
            ),
        )
        memory.flush()
        yield memory


def test_operators_cannot_reach_storage() -> None:
    for module in (preretrieval_module, routing_module):
        tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not any(
            name.startswith(("convmem.store", "convmem.memory", "convmem.retrieve.hierarchy"))
            for name in imported
        ), imported
    # and they run with no memory at all
    data = PreRetrieval({"actions": [{"action": "route"}, {"action": "embedding"}]}).execute(
        {"question": "你还记得我喜欢什么吗"}
    )
    assert data["retrieval_hints"]["strategies"] == ["deep_search", "persona_search"]


def test_none_and_embedding() -> None:
    data = {"question": "护照什么时候过期", "extra": 1}
    assert PreRetrieval({"action": "none"}).execute(dict(data)) == data
    out = PreRetrieval({"action": "embedding", "embedder": HashingEmbedder(64)}).execute(dict(data))
    vector = np.asarray(out["query_embedding"])
    assert vector.shape == (64,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    prefixed = PreRetrieval(
        {"action": "embedding", "embedder": HashingEmbedder(64), "instruction": "检索："}
    ).execute(dict(data))
    assert prefixed["query_embedding"] != out["query_embedding"]


def test_optimize_rewrites_extracts_expands_and_prefixes() -> None:
    out = PreRetrieval(
        {
            "action": "optimize",
            "operations": ["rewrite", "keywords", "expand", "instruction"],
            "synonyms": {"护照": ["passport"]},
            "instruction": "为这个句子生成表示以用于检索：",
        }
    ).execute({"question": "你还记得我的护照什么时候过期吗"})
    assert out["original_question"] == "你还记得我的护照什么时候过期吗"
    assert out["question"] == "我的护照什么时候过期"  # the frame's closing 吗 goes with it
    assert "护照" in out["keywords"]
    assert out["expanded_queries"] == ["我的护照什么时候过期", "我的passport什么时候过期"]
    assert out["embedding_text"].startswith("为这个句子生成表示以用于检索：")


def test_multi_embed_and_decompose() -> None:
    out = PreRetrieval(
        {
            "action": "multi_embed",
            "embedder": HashingEmbedder(32),
            "views": ["full", "keywords", "last_line", "lines"],
        }
    ).execute({"question": "我下个月去东京。\n护照明年过期。"})
    views = out["query_embeddings"]
    assert set(views) == {"full", "keywords", "last_line", "lines"} and len(views["lines"]) == 2
    assert out["query_embedding"] == views["full"]
    parts = PreRetrieval({"action": "decompose"}).execute(
        {"question": "我的护照什么时候过期？还有酒店订在哪里"}
    )["sub_queries"]
    assert parts == ["我的护照什么时候过期", "酒店订在哪里"]
    english = PreRetrieval({"action": "decompose"}).execute(
        {"question": "When does my passport expire and also where is the hotel?"}
    )["sub_queries"]
    assert english == ["When does my passport expire", "where is the hotel"]
    # a conjunction inside a clause is an ordinary word: the question stays whole
    for whole in (
        "我还有几天假？",
        "还有什么要准备的",
        "How does Andrew suggest helping the planet while also training the body?",
    ):
        assert PreRetrieval({"action": "decompose"}).execute({"question": whole})[
            "sub_queries"
        ] == [whole]
    after_comma = PreRetrieval({"action": "decompose"}).execute(
        {"question": "护照什么时候过期，以及我对什么过敏"}
    )["sub_queries"]
    assert after_comma == ["护照什么时候过期", "我对什么过敏"]


def test_multi_embed_dialogue_view_pools_lines_towards_the_newest() -> None:
    embedder = HashingEmbedder(64)
    lines = ["Bart: 我喜欢画画", "Assistant: 你画过什么？", "Bart: 我画了一只小狗"]
    out = PreRetrieval(
        {"action": "multi_embed", "embedder": embedder, "views": ["full", "dialogue"]}
    ).execute({"question": "\n".join(lines)})
    rows = embedder.embed(["我喜欢画画", "你画过什么？", "我画了一只小狗"])
    rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    # newest line 1, each earlier line 0.8 of the next; the assistant's line at half weight
    pooled = 0.64 * rows[0] + 0.8 * 0.5 * rows[1] + rows[2]
    assert np.allclose(out["query_embedding"], pooled / np.linalg.norm(pooled), atol=1e-6)
    assert out["query_embeddings"]["dialogue"] == out["query_embedding"]
    assert out["query_embeddings"]["full"] != out["query_embedding"]
    # roles given as turns win over parsing; recency 1 and equal roles give the plain mean
    flat = PreRetrieval(
        {
            "action": "multi_embed",
            "embedder": embedder,
            "views": ["dialogue"],
            "recency": 1.0,
            "role_weights": {"assistant": 1.0},
        }
    ).execute(
        {
            "question": "ignored for roles",
            "dialogue": [
                {"role": "user", "text": "我喜欢画画"},
                {"role": "assistant", "text": "你画过什么？"},
                {"role": "user", "text": "我画了一只小狗"},
            ],
        }
    )
    mean = rows.sum(axis=0)
    assert np.allclose(flat["query_embedding"], mean / np.linalg.norm(mean), atol=1e-6)
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval(
            {
                "action": "multi_embed",
                "embedder": embedder,
                "views": ["full"],
                "query_view": "lines",
            }
        ).execute({"question": "x"})
    assert caught.value.field == "actions[0].query_view"
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval(
            {"action": "multi_embed", "embedder": embedder, "views": ["dialogue"], "recency": 0}
        )
    assert caught.value.field == "actions[0].recency"


def test_validate() -> None:
    ok = PreRetrieval({"action": "validate"}).execute({"question": "  护照\u3000过期  "})
    assert ok["valid"] and ok["question"] == "护照 过期"
    bad = PreRetrieval({"action": "validate", "max_chars": 5}).execute({"question": "x" * 6})
    assert not bad["valid"] and bad["validation_errors"][0]["field"] == "question"
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval({"action": "validate", "strict": True}).execute({"question": "  "})
    assert caught.value.field == "question"
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval({"action": "teleport"})
    assert caught.value.field == "actions[0].action"


@pytest.mark.parametrize(
    ("question", "strategies", "params"),
    [
        ("昨天我们聊了什么", ["temporal_search"], {"time_range": "recent"}),
        ("What did I say about Tokyo last week?", ["temporal_search", "deep_search"], None),
        ("你还记得我之前说过的餐厅吗", ["deep_search"], {"candidates_multiplier": 3}),
        ("我喜欢什么样的座位", ["persona_search"], {"include_persona": True}),
        ("东京的天气怎么样", ["semantic_search"], {}),
    ],
)
def test_keyword_routing_gives_hints_not_routes(
    question: str, strategies: list[str], params: dict[str, Any] | None
) -> None:
    data = PreRetrieval({"action": "route"}).execute({"question": question})
    hints = data["retrieval_hints"]
    assert "retrieval_routes" not in data
    assert hints["strategies"] == strategies and hints["route_strategy"] == "keyword"
    if params is not None:
        assert hints["params"] == params


def test_classifier_routing_uses_time_expressions() -> None:
    router = Router({"route_strategy": "classifier"})
    assert router.route("我3月5号几点去的医院")["strategies"][0] == "temporal_search"
    assert router.route("东京好玩吗")["strategies"] == ["semantic_search"]
    assert "scores" in router.route("我最近喜欢什么")


def test_old_route_key_still_loads_with_a_warning() -> None:
    config = {
        "action": "route",
        "keyword_rules": [
            {"keywords": ["remember"], "route": "deep_search", "params": {"top_k": 9}}
        ],
        "default_strategy": "semantic_search",
    }
    with pytest.warns(DeprecationWarning, match="'route' is deprecated"):
        operator = PreRetrieval(config)
    hints = operator.execute({"question": "Do you remember my dog?"})["retrieval_hints"]
    assert hints["strategies"] == ["deep_search"] and hints["params"] == {"top_k": 9}
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval({"action": "route", "keyword_rules": [{"keywords": [], "strategy": "x"}]})
    assert caught.value.field == "actions[0].keyword_rules[0].keywords"


class _ChatHandler(BaseHTTPRequestHandler):
    replies: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        payload = json.dumps({"choices": [{"message": {"content": type(self).replies.pop(0)}}]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload.encode())))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_llm_variants_validate_and_fall_back() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    llm = {"base_url": f"http://127.0.0.1:{server.server_port}/v1", "model": "m"}
    try:
        _ChatHandler.replies = [
            json.dumps({"strategies": ["persona_search"], "params": {"top_k": 3, "evil": 1}}),
            json.dumps({"strategies": ["summon_service"]}),
            json.dumps({"query": "护照过期日期"}),
            "not json",
            json.dumps({"sub_queries": ["护照何时过期", "酒店在哪"]}),
        ]
        router = PreRetrieval({"action": "route", "route_strategy": "llm", "llm": llm})
        hints = router.execute({"question": "随便问问"})["retrieval_hints"]
        assert hints["strategies"] == ["persona_search"] and hints["params"] == {"top_k": 3}
        fallback = router.execute({"question": "昨天说了什么"})["retrieval_hints"]
        assert fallback["strategies"] == ["temporal_search"] and "fallback" in fallback
        optimize = PreRetrieval({"action": "optimize", "operations": ["rewrite"], "llm": llm})
        assert optimize.execute({"question": "你还记得护照吗"})["question"] == "护照过期日期"
        failed = optimize.execute({"question": "你还记得护照吗"})
        assert failed["question"] == "护照" and failed["pre_retrieval_errors"]
        decompose = PreRetrieval({"action": "decompose", "llm": llm})
        assert decompose.execute({"question": "x"})["sub_queries"] == ["护照何时过期", "酒店在哪"]
    finally:
        server.shutdown()
        server.server_close()


def test_the_same_query_routed_differently_reads_different_tiers(filled: Memory) -> None:
    service = filled.hierarchy()
    filters = {"conversation_id": "c"}
    semantic = service.retrieve("护照", filters=filters)
    temporal = service.retrieve(
        "护照", filters=filters, hints={"strategies": ["temporal_search"]}, granularity="chunk"
    )
    persona = service.retrieve("护照", filters=filters, hints={"strategies": ["persona_search"]})
    assert {hit.tier for hit in semantic.hits} <= {"MTM", "LTM"}
    assert "STM" in {hit.tier for hit in temporal.hits}
    assert temporal.hits[0].tier in ("STM", "MTM")
    assert persona.hits[0].tier == "LTM"
    assert semantic.hints["tiers"] == ["MTM", "LTM"] and temporal.hints["tiers"] == ["STM", "MTM"]
    few = service.retrieve(
        "护照", filters=filters, hints={"strategies": ["deep_search"], "params": {"top_k": 2}}
    )
    assert len(few.hits) == 2 and few.hints["tiers"] == ["STM", "MTM", "LTM"]
    # evidence turns by default: each turn once, whichever tier found it
    turns = service.retrieve("护照", filters=filters, hints={"strategies": ["deep_search"]})
    spans = [
        (hit.metadata["conversation_id"], tuple(hit.metadata["turn_range"]))
        for hit in turns.hits
        if hit.tier != "LTM"
    ]
    assert spans and len(spans) == len(set(spans))
    assert all(hit.metadata.get("granularity") == "turn" for hit in turns.hits if hit.tier == "MTM")
    # time_range: a window that ended before the conversation leaves MTM empty
    old = service.retrieve(
        "护照",
        filters=filters,
        hints={
            "strategies": ["semantic_search"],
            "params": {"time_range": ["2020-01-01T00:00:00Z", "2020-02-01T00:00:00Z"]},
        },
    )
    assert not [hit for hit in old.hits if hit.tier == "MTM"]
    with pytest.raises(InvalidInputError) as caught:
        service.retrieve("护照", hints={"strategies": ["teleport"]})
    assert caught.value.field == "hints.strategies"
    via_search = filled.search("护照", hints={"strategies": ["persona_search"]}, filters=filters)
    assert via_search and via_search[0].tier == "LTM"


def test_tiers_never_return_deleted_or_other_tenant_memory(filled: Memory) -> None:
    hints = {"strategies": ["deep_search", "persona_search", "temporal_search"]}
    service = filled.hierarchy()
    assert any(
        "花生" in hit.text
        for hit in service.retrieve("花生 过敏", filters={"conversation_id": "c"}, hints=hints).hits
    )
    other = filled.for_tenant("other").hierarchy()
    assert other.retrieve("花生 过敏", filters={"conversation_id": "c"}, hints=hints).hits == []
    filled.delete("c", turn_range=(6, 6))
    for _ in range(2):  # before and after the worker re-cuts the conversation
        result = service.retrieve("花生 过敏", filters={"conversation_id": "c"}, hints=hints)
        assert not any("花生" in hit.text for hit in result.hits), result.hits
        filled.flush()


def test_pipeline_from_yaml_and_toml(filled: Memory, tmp_path: Path) -> None:
    yaml_config = """
operators:
  pre_retrieval:
    actions:
      - {action: validate}
      - {action: optimize, operations: [rewrite, keywords]}
      - action: route
        route_strategy: keyword
        keyword_rules:
          - {keywords: ["喜欢"], strategy: persona_search, params: {top_k: 2}}
        default_strategy: semantic_search
      - {action: embedding}
  memory_retrieval:
    top_k: 5
"""
    data = build_pipeline(yaml_config, memory=filled).run(
        "你还记得我喜欢什么吗", filters={"conversation_id": "c"}
    )
    assert data["retrieval_hints"]["strategies"] == ["persona_search"]
    memory_data = data["memory_data"]
    assert len(memory_data["hits"]) == 2 and memory_data["hits"][0]["tier"] == "LTM"
    assert memory_data["hints"]["params"] == {"top_k": 2}
    toml_path = tmp_path / "pipeline.toml"
    toml_path.write_text(
        '[operators.pre_retrieval]\naction = "route"\n[operators.memory_retrieval]\ntop_k = 3\n',
        encoding="utf-8",
    )
    data = build_pipeline(toml_path, memory=filled).run(
        "昨天说了什么", filters={"conversation_id": "c"}
    )
    assert data["memory_data"]["hints"]["strategies"] == ["temporal_search"]
    assert len(data["memory_data"]["hits"]) == 3


def test_a_pipeline_config_with_a_wrong_key_or_shape_is_refused_naming_it(
    filled: Memory, tmp_path: Path
) -> None:
    """A misspelt key was ignored (its default silently used), and a wrong shape or an
    unreadable file failed with a TypeError, JSONDecodeError or FileNotFoundError."""
    (tmp_path / "bad.json").write_text("{bad", encoding="utf-8")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    cases: list[tuple[Any, str]] = [
        (5, "config"),
        (tmp_path / "missing.yaml", "config"),
        (tmp_path / "bad.json", "config"),
        (tmp_path / "list.json", "config"),
        ({"operators": {"pre_retrieval": 5}}, "pre_retrieval"),
        (
            {"operators": {"pre_retrieval": {"action": "validate", "max_char": 9}}},
            "actions[0].max_char",
        ),
        (
            {"operators": {"pre_retrieval": {"actions": [{"action": "route", "keywords": []}]}}},
            "actions[0].keywords",
        ),
        ({"operators": {"memory_retrieval": 5}}, "memory_retrieval"),
        ({"operators": {"memory_retrieval": {"topk": 3}}}, "memory_retrieval.topk"),
        ({"operators": {"memory_retrieval": {"top_k": "3"}}}, "memory_retrieval.top_k"),
        ({"operators": {"memory_retrieval": {"filters": "c"}}}, "memory_retrieval.filters"),
        ({"operators": {"memory_retrieval": {"stm_turns": "8"}}}, "stm_turns"),
    ]
    for config, field in cases:
        with pytest.raises(InvalidInputError) as caught:
            build_pipeline(config, memory=filled)
        assert caught.value.field == field, config
    pipeline = build_pipeline({"operators": {"memory_retrieval": {"top_k": 2}}}, memory=filled)
    for extra, field in (({"filters": "c"}, "filters"), ({"top_k": "3"}, "top_k")):
        with pytest.raises(InvalidInputError) as caught:
            pipeline.run("座位", **extra)
        assert caught.value.field == field
    with pytest.raises(InvalidInputError) as caught:
        filled.hierarchy().retrieve("座位", decompose="no")  # type: ignore[arg-type]
    assert caught.value.field == "decompose"


def test_a_question_about_nothing_remembered_gets_nothing_from_any_tier(filled: Memory) -> None:
    service = filled.hierarchy()
    filters = {"conversation_id": "c"}
    assert service.retrieve("花生 过敏", filters=filters).hits  # a note and its turn exist
    for hints in (None, {"strategies": ["deep_search"]}):
        assert service.retrieve("秘鲁的首都是哪里", filters=filters, hints=hints).hits == []
        # the note shares 我, 对, 什么 with this question but none of its specific words:
        # before, the best note always scored 1.0
        other = service.retrieve("我对电影有什么看法", filters=filters, hints=hints)
        assert not [hit for hit in other.hits if hit.tier in ("LTM", "STM")], other.hits
        kept = service.retrieve("我对电影有什么看法", filters=filters, hints=hints, min_score=0)
        assert [hit.score for hit in kept.hits if hit.tier == "LTM"] == [0.0]
    notes = service.retrieve("我对什么过敏", filters=filters).hits
    assert [hit.score for hit in notes if hit.tier == "LTM" and "花生" in hit.text] == [1.0]


def _hit(seq: int, score: float, conversation: str = "c") -> Hit:
    return Hit(
        chunk_id=f"chk_{seq // 4}",
        score=score,
        text=f"line {seq}",
        metadata={"conversation_id": conversation, "turn_range": [seq, seq]},
    )


def test_merge_results_gives_every_sub_question_its_turn_and_each_evidence_once() -> None:
    allergy = RetrievalResult(hits=[_hit(6, 0.5), _hit(4, 0.45), _hit(7, 0.4)])
    passport = RetrievalResult(hits=[_hit(4, 0.9), _hit(5, 0.8), _hit(3, 0.7), _hit(2, 0.6)])
    nothing = RetrievalResult(hits=[])
    merged = merge_results(["过敏", "护照", "秘鲁"], [allergy, passport, nothing], top_k=4)
    # the sub-question with the stronger best hit leads each round; turn 4 is taken once,
    # so the allergy question's second turn is its third hit
    assert [hit.metadata["turn_range"][0] for hit in merged.hits] == [4, 6, 5, 7]
    assert [hit.metadata["sub_query"] for hit in merged.hits] == ["护照", "过敏", "护照", "过敏"]
    assert merged.hints["sub_queries"] == [
        {"query": "过敏", "hits": 3},
        {"query": "护照", "hits": 4},
        {"query": "秘鲁", "hits": 0},
    ]
    # the same turn of another conversation is other evidence
    other = merge_results(["a", "b"], [passport, RetrievalResult([_hit(4, 0.9, "d")])], top_k=9)
    assert len(other.hits) == 5
    assert merge_results(["a", "b"], [nothing, nothing], top_k=3).hits == []


def test_a_decomposed_question_finds_the_evidence_of_each_part(filled: Memory) -> None:
    question = "我的护照什么时候过期？还有我对什么过敏"
    config = {
        "operators": {
            "pre_retrieval": {"actions": [{"action": "decompose"}, {"action": "embedding"}]},
            "memory_retrieval": {"top_k": 4},
        }
    }
    data = build_pipeline(config, memory=filled).run(question, filters={"conversation_id": "c"})
    assert data["sub_queries"] == ["我的护照什么时候过期", "我对什么过敏"]
    vectors = filled.embedding.embed_query_array(data["sub_queries"])
    assert np.allclose(np.array(data["sub_query_embeddings"]), vectors)
    memory_data = data["memory_data"]
    found = {
        hit["metadata"]["sub_query"]: hit["metadata"]["turn_range"]
        for hit in reversed(memory_data["hits"])
        if hit["tier"] == "MTM"
    }
    assert found == {"我的护照什么时候过期": [4, 4], "我对什么过敏": [6, 6]}
    assert [part["query"] for part in memory_data["hints"]["sub_queries"]] == data["sub_queries"]
    # an unrelated part finds nothing, and the other part keeps its evidence
    data = build_pipeline(config, memory=filled).run(
        "秘鲁的首都是哪里？还有我对什么过敏", filters={"conversation_id": "c"}
    )
    parts = {part["query"]: part["hits"] for part in data["memory_data"]["hints"]["sub_queries"]}
    assert parts["秘鲁的首都是哪里"] == 0 and parts["我对什么过敏"] > 0
    assert all(h["metadata"]["sub_query"] == "我对什么过敏" for h in data["memory_data"]["hits"])
    # the dialogue tier's options come from the memory_retrieval config
    lenient = {"operators": {**config["operators"], "memory_retrieval": {"min_score": 0}}}
    data = build_pipeline(lenient, memory=filled).run(
        "秘鲁的首都是哪里？还有我对什么过敏", filters={"conversation_id": "c"}
    )
    parts = {part["query"]: part["hits"] for part in data["memory_data"]["hints"]["sub_queries"]}
    assert parts["秘鲁的首都是哪里"] > 0
    chunks = {"operators": {**config["operators"], "memory_retrieval": {"granularity": "page"}}}
    with pytest.raises(InvalidInputError) as caught:
        build_pipeline(chunks, memory=filled).run(question, filters={"conversation_id": "c"})
    assert caught.value.field == "granularity"
    # deleted evidence stays deleted through every part
    filled.delete("c", turn_range=(6, 6))
    data = build_pipeline(config, memory=filled).run(question, filters={"conversation_id": "c"})
    assert not any("花生" in hit["text"] for hit in data["memory_data"]["hits"])


def test_the_embedding_step_embeds_the_question_through_the_query_side() -> None:
    class Asymmetric:
        model_id = "asymmetric-test"
        dimension = 2

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)

        def embed_query(self, texts: list[str]) -> np.ndarray:
            return np.array([[0.0, 3.0]] * len(texts), dtype=np.float32)

    out = PreRetrieval({"action": "embedding", "embedder": Asymmetric()}).execute(
        {"question": "护照哪天过期"}
    )
    assert out["query_embedding"] == [0.0, 1.0]  # the query side, normalised


def test_without_recall_frame_keeps_only_what_is_asked() -> None:
    assert without_recall_frame("你还记得我护照哪天过期吗？") == "我护照哪天过期？"
    assert without_recall_frame("你知道我对什么过敏吗") == "我对什么过敏"
    assert without_recall_frame("Do you remember where I parked?") == "where I parked?"
    assert without_recall_frame("你知道我叫什么") == "我叫什么"  # 什么 keeps its 么
    for unchanged in ("我护照哪天过期？", "记得带伞", "你还记得吗？", "请问"):
        assert without_recall_frame(unchanged) == unchanged


@pytest.mark.parametrize(
    "asked",
    [
        "你还记得护照什么时候过期吗",  # inside a recall frame
        "今天下雨了，出门要带伞。护照什么时候过期",  # after news of the day
    ],
)
def test_search_reads_a_framed_or_wrapped_question_as_the_question(
    filled: Memory, asked: str
) -> None:
    scope = {"conversation_id": "c"}
    plain = filled.search("护照什么时候过期", filters=scope, min_score=0)
    found = filled.search(asked, filters=scope, min_score=0)
    assert plain and [(h.metadata["turn_range"], h.score) for h in found] == [
        (h.metadata["turn_range"], h.score) for h in plain
    ]


def test_asked_part_drops_the_news_a_message_wraps_its_question_in() -> None:
    assert (
        asked_part("我昨天吃了火锅，好辣。对了，张伟在哪家公司上班？")
        == "对了，张伟在哪家公司上班？"
    )
    assert asked_part("今天天气真好！我表哥多大了") == "我表哥多大了"  # 多大 asks
    assert asked_part("I went hiking today. Where do I live?") == "Where do I live?"
    for unchanged in (
        "张伟在哪家公司上班？",  # one sentence
        "最近好累啊。",  # nothing asks
        "你在吗？我表哥多大了？",  # every sentence asks
        "Would Tim enjoy books by C. S. Lewis?",  # initials end no sentence
    ):
        assert asked_part(unchanged) == unchanged


def test_split_questions_splits_asked_parts_and_keeps_windows_whole() -> None:
    assert split_questions("护照哪天过期？酒店在哪") == ["护照哪天过期", "酒店在哪"]
    assert split_questions("护照哪天过期\n酒店在哪") == ["护照哪天过期", "酒店在哪"]
    window = "用户：护照哪天过期？\n助手：明年三月。\n用户：还有酒店在哪？"
    assert split_questions(window) == [window]
    assert split_questions("护照哪天过期？") == ["护照哪天过期？"]
    assert len(split_questions("一？二？三？四？五？六")) == 4
    # 还有 also joins two statements: it splits only before a part that asks something
    # or names whose thing it is
    assert split_questions("我明天要去北京，还有点紧张") == ["我明天要去北京，还有点紧张"]
    assert split_questions("我什么时候去复诊，还有我的电话号码") == [
        "我什么时候去复诊",
        "我的电话号码",
    ]
    assert split_questions("I went to Paris, also Rome") == ["I went to Paris, also Rome"]
    # quotes and punctuation left over by a split are no part
    assert split_questions("他问：“你是谁？”") == ["他问：“你是谁？”"]


def test_search_takes_a_question_that_asks_two_things_part_by_part(filled: Memory) -> None:
    question = "我的护照什么时候过期？还有我对什么过敏"
    scope = {"conversation_id": "c"}
    hits = filled.search(question, top_k=2, filters=scope)
    assert {tuple(hit.metadata["turn_range"]) for hit in hits} == {(4, 4), (6, 6)}
    assert {hit.metadata["sub_query"] for hit in hits} == {"我的护照什么时候过期", "我对什么过敏"}
    whole = filled.search(question, top_k=2, filters=scope, decompose=False)
    assert whole and all("sub_query" not in hit.metadata for hit in whole)
    # a dialogue window is one query; a precomputed vector is the whole question's
    window = "用户：护照什么时候过期？\n助手：明年三月。\n用户：还有我对什么过敏？"
    assert all("sub_query" not in hit.metadata for hit in filled.search(window, filters=scope))
    vector = filled.embed_query(question)
    kept = filled.search(question, filters=scope, query_vector=vector)
    assert all("sub_query" not in hit.metadata for hit in kept)
    # a part about nothing remembered gives nothing; the other keeps its evidence
    half = filled.search("秘鲁的首都是哪里？还有我对什么过敏", filters=scope)
    assert half and {hit.metadata["sub_query"] for hit in half} == {"我对什么过敏"}
    # deleted evidence stays deleted through every part
    filled.delete("c", turn_range=(6, 6))
    assert not any("花生" in hit.text for hit in filled.search(question, filters=scope))


def test_hinted_retrieval_takes_each_part_through_every_tier(filled: Memory) -> None:
    service = filled.hierarchy()
    scope = {"conversation_id": "c"}
    question = "我对什么过敏？还有我喜欢什么座位"
    result = service.retrieve(question, filters=scope, hints={"strategies": ["deep_search"]})
    assert [part["query"] for part in result.hints["sub_queries"]] == [
        "我对什么过敏",
        "我喜欢什么座位",
    ]
    found = {(hit.metadata["sub_query"], hit.tier) for hit in result.hits}
    assert ("我对什么过敏", "LTM") in found  # the pinned allergy note, found by its own part
    texts = {hit.metadata["sub_query"]: hit.text for hit in reversed(result.hits)}
    assert "花生" in texts["我对什么过敏"] and "靠窗" in texts["我喜欢什么座位"]
    whole = service.retrieve(question, filters=scope, decompose=False)
    assert "sub_queries" not in whole.hints


def test_an_llm_routers_bad_params_fall_back_to_the_rules(
    filled: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    """The LLM's params went to the memory service unchecked, and a time_range it does not
    know ("last week"), top_k 0 or "10" stopped the pipeline with hints.params.*."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    llm = {"base_url": f"http://127.0.0.1:{server.server_port}/v1", "model": "m"}
    answers = [
        {"strategies": ["temporal_search"], "params": {"time_range": "last week"}},
        {"strategies": ["deep_search"], "params": {"top_k": 0}},
        {"strategies": ["deep_search"], "params": {"top_k": "10"}},
        {"strategies": ["persona_search"], "params": {"include_persona": "yes"}},
    ]
    try:
        _ChatHandler.replies = [json.dumps(answer) for answer in answers]
        pipeline = build_pipeline(
            {
                "operators": {
                    "pre_retrieval": {"action": "route", "route_strategy": "llm", "llm": llm}
                }
            },
            memory=filled,
        )
        for _ in answers:
            with caplog.at_level("WARNING", logger="convmem.retrieve.routing"):
                data = pipeline.run("你还记得我的护照吗", filters={"conversation_id": "c"})
            hints = data["retrieval_hints"]
            assert hints["strategies"] == ["deep_search"] and "fallback" in hints  # the rules'
            assert data["memory_data"]["hits"]
        assert sum("llm routing failed" in r.getMessage() for r in caplog.records) == len(answers)
        _ChatHandler.replies = [
            json.dumps({"strategies": ["temporal_search"], "params": {"time_range": "7d"}})
        ]
        good = pipeline.run("随便问问", filters={"conversation_id": "c"})["retrieval_hints"]
        assert good["params"] == {"time_range": "7d"} and "fallback" not in good
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("step", "field"),
    [
        # route strategies the memory service refuses: they built, then every match raised
        (
            {"action": "route", "keyword_rules": [{"keywords": ["记得"], "strategy": "long_term"}]},
            "actions[0].keyword_rules[0].strategy",
        ),
        ({"action": "route", "default_strategy": "nope"}, "actions[0].default_strategy"),
        ({"action": "route", "default_strategy": None}, "actions[0].default_strategy"),
        (
            {
                "action": "route",
                "keyword_rules": [
                    {"keywords": ["记得"], "strategy": "deep_search", "params": {"top_k": "9"}}
                ],
            },
            "actions[0].keyword_rules[0].params.top_k",
        ),
        # wrong values: bare ValueError / TypeError / AttributeError / KeyError before
        ({"action": "decompose", "max_parts": "abc"}, "actions[0].max_parts"),
        ({"action": "decompose", "max_parts": None}, "actions[0].max_parts"),
        ({"action": "validate", "max_chars": "x"}, "actions[0].max_chars"),
        ({"action": "optimize", "max_keywords": "x"}, "actions[0].max_keywords"),
        ({"action": "optimize", "synonyms": ["护照"]}, "actions[0].synonyms"),
        ({"action": "optimize", "operations": ["rewrit", "keyword"]}, "actions[0].operations"),
        ({"action": "multi_embed", "role_weights": {"user": "x"}}, "actions[0].role_weights.user"),
        ({"action": "multi_embed", "role_weights": [1]}, "actions[0].role_weights"),
        (
            {"action": "route", "route_strategy": "classifier", "classifier_threshold": "x"},
            "actions[0].classifier_threshold",
        ),
        ({"action": "route", "route_strategy": "llm"}, "actions[0].llm"),
    ],
)
def test_a_bad_operator_option_is_refused_when_the_pipeline_is_built(
    filled: Memory, step: dict[str, Any], field: str
) -> None:
    config = {"operators": {"pre_retrieval": {"actions": [step]}}}
    with pytest.raises(InvalidInputError) as caught:
        build_pipeline(config, memory=filled)
    assert caught.value.field == field


def test_an_unknown_operation_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInputError, match="keywords, rewrite, expand, instruction"):
        PreRetrieval({"action": "optimize", "operations": ["rewrit", "keyword"]})


def test_a_string_synonym_is_one_alternative_not_its_characters() -> None:
    operator = PreRetrieval(
        {"action": "optimize", "operations": ["expand"], "synonyms": {"护照": "证件"}}
    )
    assert operator.execute({"question": "护照"})["expanded_queries"] == ["护照", "证件"]


def test_validate_refuses_what_retrieval_refuses(filled: Memory) -> None:
    """A lone surrogate passed validate, then retrieval raised on it."""
    pipeline = build_pipeline(
        {"operators": {"pre_retrieval": {"actions": [{"action": "validate"}]}}}, memory=filled
    )
    checked = PreRetrieval({"action": "validate"}).execute({"question": "a\ud800b"})
    assert not checked["valid"] and checked["validation_errors"][0]["field"] == "question"
    with pytest.raises(InvalidInputError) as caught:
        pipeline.run("a\ud800b")
    assert caught.value.field == "query_text"  # what validate now agrees with
    with pytest.raises(InvalidInputError) as caught:
        PreRetrieval({"action": "validate", "strict": True}).execute({"question": "a\ud800b"})
    assert caught.value.field == "question"
