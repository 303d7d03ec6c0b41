"""A purge takes deleted memory out of the store's files, not only out of its reads.

SQLite: the database file and its write-ahead log. PostgreSQL: every file of the schema's
tables, their TOAST tables and indexes, read through the server after a CHECKPOINT (a
plain VACUUM only marked a dead tuple's space free, so the text stayed in the heap and in
the lexical GIN index). A failed job's error message that quotes its turns goes too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import postgres_base_url
from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker

MARK = "ZQXPURGEMARK"


def _schema_bytes(url: str) -> bytes:
    """Every file of the store's schema (tables, TOAST, indexes), as the server keeps it."""
    import psycopg

    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        rows = conn.execute(
            "SELECT pg_relation_filepath(c.oid), pg_relation_size(c.oid) FROM pg_class c "
            "WHERE c.relkind IN ('r', 'i', 't') AND pg_relation_filepath(c.oid) IS NOT NULL "
            "AND (c.relnamespace = %(s)s::regnamespace "
            "OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = %(s)s::regnamespace) "
            "OR c.oid IN (SELECT i.indexrelid FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
            "WHERE t.oid IN (SELECT reltoastrelid FROM pg_class "
            "WHERE relnamespace = %(s)s::regnamespace)))",
            {"s": schema},
        ).fetchall()
        return b"".join(
            conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()[0]
            for path, size in rows
            if size
        )


def _file_bytes(url: str) -> bytes:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        return b"".join(file.read_bytes() for file in (path, Path(f"{path}-wal")) if file.exists())
    return _schema_bytes(url)


def _held(data: bytes) -> int:
    return sum(data.count(needle) for needle in (MARK.encode(), MARK.lower().encode()))


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return request.getfixturevalue("backend_url_postgres")


@pytest.fixture
def backend_url_postgres() -> object:
    import uuid

    from conftest import drop_schema

    base = postgres_base_url()
    schema = "t_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    yield f"{base}{joiner}schema={schema}"
    drop_schema(base, schema)


def test_purge_leaves_no_deleted_text_in_the_files(url: str) -> None:
    memory = Memory.open(url, tenant="a", embedder=HashingEmbedder(), marker=KeepAllMarker())
    try:
        long = "。".join(f"我对青霉素过敏{MARK}第{i}句" for i in range(300))  # stored out of line
        memory.add_turns(
            "c1",
            [
                {"turn_id": 1, "role": "user", "text": f"我对青霉素过敏 {MARK}one"},
                {"turn_id": 2, "role": "user", "text": long},
                {"turn_id": 3, "role": "user", "text": "今天天气很好"},
            ],
        )
        memory.flush()
        assert _held(_file_bytes(url)) > 0  # the check can see the text before the purge
        memory.delete("c1", turn_range=[1, 2])
        memory.flush()
        memory.purge()
        assert _held(_file_bytes(url)) == 0
        assert memory.search(
            "天气", filters={"conversation_id": "c1"}, min_score=0
        )  # the rest stays
    finally:
        memory.close()


def test_purge_clears_a_failed_jobs_message_over_deleted_turns(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    memory = Memory.open(str(path), embedder=HashingEmbedder(), marker=KeepAllMarker())
    try:
        memory.add_turns("c1", [{"turn_id": 1, "role": "user", "text": "hello"}])
        memory.add_turns("c2", [{"turn_id": 1, "role": "user", "text": "other"}])
        memory.flush()
        with sqlite3.connect(path) as conn:  # as a job failed with an echoing endpoint left it
            conn.execute(f"UPDATE jobs SET error_message='endpoint said: {MARK}'")
        memory.delete("c1")
        memory.purge()
        with sqlite3.connect(path) as conn:
            jobs = list(conn.execute("SELECT conversation_id, error_message FROM jobs"))
        assert {message for conv, message in jobs if conv == "c1"} == {None}
        # a live conversation's job keeps it
        assert {message for conv, message in jobs if conv == "c2"} == {f"endpoint said: {MARK}"}
    finally:
        memory.close()
