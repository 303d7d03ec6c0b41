"""Privacy: a purge leaves no deleted memory on disk, the HNSW sidecar included."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from convmem import HashingEmbedder, Memory
from convmem.errors import StoreError
from convmem.governance import KeepAllMarker
from convmem.store.sqlite import SQLiteStore

SECRET = "ZQXSECRET"


def _open(path: Path) -> Memory:
    return Memory.open(
        str(path), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0, ann_min_rows=1
    )


def _fill(memory: Memory) -> None:
    for conv in range(4):
        memory.add_turns(
            f"c{conv}",
            [
                {
                    "turn_id": turn,
                    "role": "user",
                    "text": f"话题{conv} 第{turn}句 word{conv}x{turn}",
                    "timestamp": f"2024-01-01T10:00:{turn:02d}+00:00",
                }
                for turn in range(1, 4)
            ],
        )
    memory.add_turns(
        "secret",
        [
            {
                "turn_id": 1,
                "role": "user",
                "text": f"我的银行卡密码是 {SECRET} 998877",
                "timestamp": "2024-01-01T10:00:00+00:00",
            }
        ],
    )
    memory.flush()


def _secret_vector(path: Path) -> tuple[int, bytes]:
    """The secret chunk's rowid and its vector as the sidecar keeps it (float16)."""
    with sqlite3.connect(path) as conn:
        rowid, blob = conn.execute(
            "SELECT rowid, vector FROM chunks WHERE conversation_id='secret'"
        ).fetchone()
    return rowid, np.frombuffer(blob, dtype=np.float32).astype(np.float16).tobytes()


def _sidecar_keys(path: Path) -> tuple[list[int], bytes]:
    from usearch.index import Index

    (sidecar,) = path.parent.glob(f"{path.name}.*.usearch")
    return [int(key) for key in Index.restore(str(sidecar)).keys], sidecar.read_bytes()


@pytest.mark.parametrize("searched_between", [True, False])
def test_purge_takes_the_deleted_vectors_out_of_the_hnsw_sidecar(
    tmp_path: Path, searched_between: bool
) -> None:
    path = tmp_path / "m.db"
    with _open(path) as memory:
        _fill(memory)
        memory.search("银行卡密码", top_k=3, min_score=0)  # tenant-wide: builds the sidecar
    rowid, vector = _secret_vector(path)
    keys, data = _sidecar_keys(path)
    assert rowid in keys and vector in data
    with _open(path) as memory:
        memory.delete("secret")
        if searched_between:  # the index removes the tombstoned key (usearch keeps its vector)
            memory.search("银行卡密码", top_k=3, min_score=0)
        memory.purge()
        hits = memory.search("银行卡密码", top_k=10, min_score=0, mode="vector")
        assert all(hit.metadata["conversation_id"] != "secret" for hit in hits)
    keys, data = _sidecar_keys(path)
    assert rowid not in keys
    assert vector not in data


def test_an_index_held_while_another_handle_purges_is_rebuilt_not_saved(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with _open(path) as memory:
        _fill(memory)
    rowid, vector = _secret_vector(path)
    with _open(path) as server, _open(path) as operator:
        server.search("银行卡密码", top_k=3, min_score=0)  # the server's index holds the row
        operator.delete("secret")
        operator.purge()
        assert not list(tmp_path.glob("m.db.*.usearch*"))  # the purge removed the sidecars
        hits = server.search("银行卡密码", top_k=10, min_score=0, granularity="chunk")
        assert all(hit.metadata["conversation_id"] != "secret" for hit in hits)
    keys, data = _sidecar_keys(path)
    assert rowid not in keys
    assert vector not in data


def test_purge_says_so_when_a_reader_keeps_the_text_in_the_write_ahead_log(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with _open(path) as memory:
        _fill(memory)
        memory.delete("secret")
        store = memory.store
        assert isinstance(store, SQLiteStore)
        store.CHECKPOINT_WAIT_MS = 50
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM chunks").fetchone()
        with pytest.raises(StoreError, match=r"m\.db-wal still holds"):
            memory.purge()
        reader.execute("COMMIT")
        reader.close()
        memory.purge()  # again, once the reader has gone
        for name in ("m.db", "m.db-wal"):
            if (tmp_path / name).exists():
                assert SECRET.encode() not in (tmp_path / name).read_bytes()
        assert (tmp_path / "m.db-wal").stat().st_size == 0
