"""A store an older convmem wrote, opened by this one: its rows are read as this version
keeps them (schema 10 rewrites the chunk times earlier versions kept as written).

Each test makes a store, writes its rows back the way an older convmem left them (plain
SQL through the store's own connection, so SQLite and PostgreSQL alike) at schema 9, and
opens it again.
"""

from __future__ import annotations

import json
from typing import Any

from convmem import HashingEmbedder, Memory
from convmem.store import schema as store_schema

TENANT = "default"


def _open(url: str) -> Memory:
    return Memory.open(url, embedder=HashingEmbedder(), workers=0)


def _as_older_convmem_left_it(memory: Memory, rewrite: Any) -> None:
    """Rewrite each live chunk's ``(metadata, ts_start, ts_end)`` with ``rewrite`` and take
    the store back to schema 9, as a convmem before schema 10 wrote it."""
    with memory.store._write() as conn:
        rows = conn.execute(
            "SELECT rowid, metadata, ts_start, ts_end FROM chunks WHERE tenant=? AND deleted=0",
            (TENANT,),
        ).fetchall()
        for rowid, metadata, start, end in rows:
            new_metadata, new_start, new_end = rewrite(json.loads(metadata), start, end)
            conn.execute(
                "UPDATE chunks SET metadata=?, ts_start=?, ts_end=? WHERE tenant=? AND rowid=?",
                (json.dumps(new_metadata, ensure_ascii=False), new_start, new_end, TENANT, rowid),
            )
        conn.execute("UPDATE meta SET value='9' WHERE key='schema_version'")


def _backwards(metadata: dict[str, Any], start: Any, end: Any) -> tuple[Any, ...]:
    """A span ending before it starts, and no per-turn times: before this version a chunk
    whose turns' clocks ran out of order (or a caller's chunk sent so) kept it."""
    span = metadata.get("timestamp_range")
    metadata.pop("turn_times", None)
    if span is not None:
        metadata["timestamp_range"] = [span[1], span[0]]
    return metadata, end, start


def test_a_backwards_span_an_older_convmem_kept_meets_time_filters(backend_url: str) -> None:
    with _open(backend_url) as memory:
        # two devices: the second line's clock runs an hour behind the first's
        memory.add_turns(
            "c_clock",
            [
                {
                    "turn_id": 0,
                    "role": "user",
                    "text": "我把备用钥匙放在门口的花盆下面了。",
                    "timestamp": "2026-11-07T10:00:00+08:00",
                },
                {
                    "turn_id": 1,
                    "role": "user",
                    "text": "另外我的车停在地下二层B区。",
                    "timestamp": "2026-11-07T09:00:00+08:00",
                },
            ],
        )
        memory.flush()
        memory.upsert_chunks(
            [
                {
                    "chunk_id": "chk_api_keys",
                    "text": "备用钥匙也可以找物业前台拿。",
                    "metadata": {
                        "conversation_id": "c_api",
                        "turn_range": [0, 0],
                        "timestamp_range": [
                            "2026-11-07T09:00:00+08:00",
                            "2026-11-07T10:00:00+08:00",
                        ],
                    },
                }
            ]
        )
        _as_older_convmem_left_it(memory, _backwards)
    window = {"timestamp_range": ["2026-11-07T09:30:00+08:00", "2026-11-07T09:45:00+08:00"]}
    with _open(backend_url) as memory:
        hits = memory.search("备用钥匙", top_k=5, min_score=0, granularity="chunk", filters=window)
        assert {hit.metadata["conversation_id"] for hit in hits} == {"c_clock", "c_api"}
        for hit in hits:
            start, end = hit.metadata["timestamp_range"]
            assert start <= end  # both +08:00
        turns = memory.search("备用钥匙", top_k=5, min_score=0, filters=window)
        assert any("花盆" in hit.text for hit in turns)
        with memory.store._write() as conn:
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            wrong = conn.execute(
                "SELECT count(*) FROM chunks WHERE deleted=0 AND ts_start > ts_end"
            ).fetchone()
        assert version == (str(store_schema.SCHEMA_VERSION),)
        assert wrong == (0,)


def _unzoned(metadata: dict[str, Any], start: Any, end: Any) -> tuple[Any, ...]:
    """Times without a zone, and a date for expiry: a caller's chunk before this version
    could hold them (the columns kept the instants)."""
    if metadata.get("conversation_id") == "c_api":
        metadata["timestamp_range"] = ["2026-11-05T08:00:00", "2026-11-05T09:00:00"]
        metadata["expires_at"] = "2027-12-31"
    return metadata, start, end


def test_a_callers_chunk_with_times_an_older_convmem_took_unzoned_is_listed(
    backend_url: str,
) -> None:
    with _open(backend_url) as memory:
        memory.upsert_chunks(
            [
                {
                    "chunk_id": "chk_api_bike",
                    "text": "档案：喜欢骑自行车上班。",
                    "metadata": {
                        "conversation_id": "c_api",
                        "turn_range": [0, 0],
                        "timestamp_range": [
                            "2026-11-05T08:00:00+00:00",
                            "2026-11-05T09:00:00+00:00",
                        ],
                        "expires_at": "2027-12-31T00:00:00+00:00",
                        "category": "profile",
                    },
                }
            ]
        )
        _as_older_convmem_left_it(memory, _unzoned)
    with _open(backend_url) as memory:
        (chunk,) = memory.chunks("c_api")
        assert chunk.metadata.timestamp_range == (
            "2026-11-05T08:00:00+00:00",
            "2026-11-05T09:00:00+00:00",
        )
        assert chunk.metadata.expires_at == "2027-12-31T00:00:00+00:00"
        assert chunk.metadata.category == "profile"
        hits = memory.search("骑自行车", top_k=3, min_score=0, filters={"category": "profile"})
        assert [hit.chunk_id for hit in hits] == ["chk_api_bike"]
