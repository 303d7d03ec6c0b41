"""Moving a store between embedding models: ``Memory.reindex`` and ``convmem reindex``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from convmem import EmbedderError, Memory
from convmem.embed import TransformerEmbedder
from convmem.governance import KeepAllMarker
from helpers import make_turns

SECRET = "SECRETWORD zebra-mango 请删除这句话。"


def _fill(url: str, embedder: str) -> None:
    """Dialogue with a deleted turn, a caller-made chunk and a story chunk, in two tenants."""
    for tenant in ("t1", "t2"):
        with Memory.open(
            url, embedder=embedder, tenant=tenant, workers=0, marker=KeepAllMarker()
        ) as memory:
            memory.add_turns(
                "a", make_turns(["我的护照下个月过期。", "好的，记得续签。", SECRET, "ok"])
            )
            memory.add_turns("b", make_turns(["We plan a trip to Kyoto in April.", "Nice."]))
            memory.flush()
            memory.delete("a", turn_range=[2, 2])
            memory.flush()
            stored = memory.upsert_chunks(
                [
                    {
                        "chunk_id": "doc_1",
                        "text": "The office wifi password is tangerine42.",
                        "metadata": {"conversation_id": "docs", "turn_range": [1, 1]},
                    }
                ]
            )
            assert stored.upserted == 1
            memory.story("novel").add_memory_chunks(
                [
                    {
                        "chapter_index": 1,
                        "scene_index": 1,
                        "content_type": "scene",
                        "content": "林晚在旧外套里摸到一把铜钥匙。",
                    }
                ]
            )


def _live(url: str) -> dict[tuple[str, str], tuple[str, bytes, bytes | None, str | None]]:
    with Memory.open(url, workers=0) as memory:
        rows = memory.store._db().execute(
            "SELECT tenant, chunk_id, model_id, vector, turn_vectors, turn_tokens FROM chunks "
            "WHERE deleted=0"
        )
        return {
            (row[0], row[1]): (
                row[2],
                bytes(row[3]),
                None if row[4] is None else bytes(row[4]),
                row[5],
            )
            for row in rows
        }


def test_reindex_there_and_back_gives_the_store_a_fresh_build_would(tmp_path: Path) -> None:
    moved, fresh = f"sqlite:///{tmp_path / 'moved.db'}", f"sqlite:///{tmp_path / 'fresh.db'}"
    _fill(moved, "hashing")
    _fill(fresh, "hashing:256")
    live = len(_live(moved))
    assert {tenant for tenant, _ in _live(moved)} == {
        "t1",
        "t2",
        "t1\x1fstory:novel",
        "t2\x1fstory:novel",
    }
    for spec, model in (("hashing:256", "hashing-v1-256"), ("hashing:64", "hashing-v1-64")):
        # one tenant's handle moves the whole store: the model is the store's, not a tenant's
        with Memory.open(
            moved, embedder=spec, tenant="t1", workers=0, allow_model_change=True
        ) as memory:
            assert memory.reindex(batch_size=2) == live  # every tenant's, stories too
            assert memory.stats()["embedding_model"] == model
    with Memory.open(moved, embedder="hashing:256", workers=0, allow_model_change=True) as memory:
        memory.reindex()
    assert _live(moved) == _live(fresh)
    for tenant in ("t1", "t2"):
        with Memory.open(moved, tenant=tenant, workers=0) as memory:
            for mode in ("hybrid", "vector", "lexical"):
                hits = memory.search("SECRETWORD zebra-mango", mode=mode, min_score=0)
                assert all("SECRETWORD" not in hit.text for hit in hits)
            assert memory.search("wifi password", top_k=1)[0].chunk_id == "doc_1"
            assert memory.story("novel").search("铜钥匙", top_k=1)


def _tiny_bert(folder: Path, *, positions: int) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "护", "照", "passport", "the", "is"]
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=positions,
    )
    transformers.BertModel(config).save_pretrained(folder)
    transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True})
    )
    return folder


@pytest.mark.slow
def test_reindex_to_a_model_with_a_short_position_table(tmp_path: Path) -> None:
    # a model of 64 positions: texts were cut at 256 tokens, and torch raised mid-reindex
    # (after the store had recorded the new model)
    folder = _tiny_bert(tmp_path / "short-bert", positions=64)
    embedder = TransformerEmbedder(folder)
    assert embedder.embed(["the passport is " * 100]).shape == (1, 32)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Memory.open(url, embedder="hashing", workers=0, marker=KeepAllMarker()) as memory:
        memory.add_turns("c", make_turns(["护照 passport " * 60, "the passport is here"]))
        memory.flush()
    with Memory.open(url, embedder=embedder, workers=0, allow_model_change=True) as memory:
        assert memory.reindex() >= 1
        vector = np.asarray(memory.embed_query("passport"))
        assert vector.shape == (32,) and memory.search("passport", mode="vector", min_score=0)
    # a store of a model folder records the folder's name: opened without an embedder, the
    # error says to pass the folder
    with pytest.raises(EmbedderError, match=r"records only its name.*/path/to/short-bert"):
        Memory.open(url, workers=0)
    with Memory.open(url, embedder=str(folder), workers=0) as memory:
        assert memory.stats()["embedding_model"] == "short-bert"


def test_a_chunk_rewritten_or_purged_while_a_reindex_embeds_it_keeps_its_own_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reindex wrote what it embedded by rowid alone: a chunk rewritten meanwhile kept
    its old text's vector, and a purged chunk's rowid taken by a new chunk (SQLite reuses
    it) got the purged text's vector and line tokens."""
    import convmem.memory as memory_module

    path = str(tmp_path / "m.db")

    def handle(embedder: str, **options: object) -> Memory:
        return Memory.open(path, embedder=embedder, workers=0, marker=KeepAllMarker(), **options)

    with handle("hashing") as memory:
        memory.add_turns("plans", make_turns(["I am planning a trip to Kyoto in April.", "Nice."]))
        memory.add_turns("secret", make_turns(["My bank PIN is 4921, codeword BLUEHERON.", "ok"]))
        memory.upsert_chunks(
            [
                {
                    "chunk_id": "doc_1",
                    "text": "The office wifi password is tangerine42.",
                    "metadata": {"conversation_id": "docs", "turn_range": [1, 1]},
                }
            ]
        )
        memory.flush()

    embed_chunks = memory_module.embed_chunks

    def embed_while_others_write(embedding: object, items: list) -> object:
        vectors = embed_chunks(embedding, items)
        with handle("hashing:256") as other:  # a process already on the new model
            other.delete("secret")
            other.purge()
            other.add_turns("kitchen", make_turns(["Repaint the kitchen walls yellow.", "ok"]))
            other.upsert_chunks(
                [
                    {
                        "chunk_id": "doc_1",
                        "text": "Grandma's birthday dinner is on Sunday at six.",
                        "metadata": {"conversation_id": "docs", "turn_range": [1, 1]},
                    }
                ]
            )
            other.flush()
        return vectors

    monkeypatch.setattr(memory_module, "embed_chunks", embed_while_others_write)
    with handle("hashing:256", allow_model_change=True) as memory:
        memory.reindex()
    monkeypatch.setattr(memory_module, "embed_chunks", embed_chunks)
    with handle("hashing:256") as memory:
        rows = memory.store._db().execute("SELECT text, vector, turn_tokens FROM chunks").fetchall()
        for text, blob, tokens in rows:
            vector = np.frombuffer(blob, dtype=np.float32)
            assert float(vector @ memory.embedding.embed_array([text])[0]) > 0.999, text
            assert "blueheron" not in (tokens or "").lower(), text
        assert b"blueheron" not in Path(path).read_bytes().lower()
        hits = memory.search("birthday dinner", mode="vector", granularity="chunk", min_score=0)
        assert hits[0].chunk_id == "doc_1"
