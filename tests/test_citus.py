"""convmem on a real Citus cluster: where a tenant's rows live, and the write/read path.

The cluster (a coordinator and two workers) comes from ``CONVMEM_TEST_CITUS_URL``; see
``conformance/citus_fixture.py`` for when these tests skip or fail. Each test works in a
schema of its own. Placement is checked against Citus' own catalog and by reading the
shard tables on the worker nodes directly.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from conformance.citus_fixture import citus_schema_url
from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.store.citus import CitusStore, citus_ddl, open_postgres
from convmem.store.postgres import pg_ddl
from helpers import make_turns

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def url() -> Iterator[str]:
    """A store URL in a fresh schema on the cluster (``open_store`` picks Citus there)."""
    with citus_schema_url() as schema_url:
        yield schema_url


@contextmanager
def opened(url: str, **options: Any) -> Iterator[Memory]:
    options.setdefault("embedder", HashingEmbedder())
    options.setdefault("marker", KeepAllMarker())
    options.setdefault("workers", 0)
    with Memory.open(url, **options) as memory:
        assert isinstance(memory.store, CitusStore)
        yield memory


def schema_of(url: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))["schema"]


def coordinator(url: str) -> Any:
    return psycopg.connect(url.split("?")[0], autocommit=True)


def placement(url: str, table: str, tenant: str) -> tuple[int, str, int]:
    """``(shard id, node host, node port)`` holding ``tenant``'s rows of ``table``."""
    with coordinator(url) as conn:
        row = conn.execute(
            "SELECT s.shardid, s.nodename, s.nodeport FROM citus_shards s WHERE s.shardid = "
            "get_shard_id_for_distribution_column(%s, CAST(%s AS text))",
            (f"{schema_of(url)}.{table}", tenant),
        ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1]), int(row[2])


def on_node(url: str, host: str, port: int, sql: str) -> list[Any]:
    """Run ``sql`` on one node directly (not through the coordinator)."""
    parts = urlsplit(url.split("?")[0])
    node = parts._replace(netloc=f"{parts.username}@{host}:{port}").geturl()
    with psycopg.connect(node, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


def tenants_on_two_nodes(url: str) -> tuple[str, str]:
    """Two tenant names whose shard groups Citus placed on different workers."""
    seen: dict[int, str] = {}
    for index in range(64):
        tenant = f"tenant-{index}"
        port = placement(url, "turns", tenant)[2]
        seen.setdefault(port, tenant)
        if len(seen) == 2:
            first, second = seen.values()
            return first, second
    raise AssertionError(f"64 tenants all hashed to the shards of one node: {seen}")


def test_citus_ddl_keys_identity_tables_by_tenant() -> None:
    ddl = citus_ddl(
        pg_ddl(
            "CREATE TABLE jobs (\n    job_id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
            "    tenant TEXT NOT NULL\n);"
        )
    )
    assert "GENERATED ALWAYS AS IDENTITY PRIMARY KEY" not in ddl
    assert "job_id BIGINT GENERATED ALWAYS AS IDENTITY," in ddl
    assert "PRIMARY KEY (tenant, job_id)" in ddl
    last = citus_ddl(  # the last statement of a migration has no ";"
        pg_ddl(
            "CREATE INDEX i ON t (a);\nCREATE TABLE c (\n    rowid INTEGER PRIMARY KEY,\n    tenant TEXT\n)"
        )
    )
    assert last.endswith("PRIMARY KEY (tenant, rowid)\n    )")


def test_tables_are_distributed_by_tenant_and_colocated(url: str) -> None:
    with opened(url):
        pass
    with coordinator(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, p.partmethod, column_to_column_name(p.logicalrelid, p.partkey), "
            "p.colocationid FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
            "WHERE c.relnamespace = %s::regnamespace",
            (schema_of(url),),
        ).fetchall()
        local = conn.execute(
            "SELECT relname FROM pg_class c WHERE relnamespace = %s::regnamespace AND "
            "relkind = 'r' AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p "
            "WHERE p.logicalrelid = c.oid) AND relname !~ '_[0-9]+$'",
            (schema_of(url),),
        ).fetchall()
    tables = {name: (method, column, group) for name, method, column, group in rows}
    assert local == []
    assert tables["meta"][0] == tables["api_keys"][0] == "n"  # reference tables
    distributed = {name: v for name, v in tables.items() if name not in ("meta", "api_keys")}
    assert {"turns", "conversations", "jobs", "chunks", "marks", "pins", "notes"} <= set(
        distributed
    )
    assert {method for method, _, _ in distributed.values()} == {"h"}
    assert {column for _, column, _ in distributed.values()} == {"tenant"}
    assert len({group for _, _, group in distributed.values()}) == 1  # colocated


def test_one_tenants_rows_live_in_one_shard_group_on_one_node(url: str) -> None:
    with opened(url, tenant="solo") as memory:
        memory.add_turns("c1", make_turns(["我对青霉素过敏", "好的，记下了。", "明天去杭州"]))
        memory.flush()
    schema = schema_of(url)
    nodes = {placement(url, table, "solo")[1:] for table in ("turns", "chunks", "jobs", "marks")}
    assert len(nodes) == 1
    with coordinator(url) as conn:
        # every shard of turns, counted where it lives: the tenant's rows are in exactly one
        counts = conn.execute(
            "SELECT shardid, result FROM run_command_on_shards(%s, "
            "$$SELECT count(*) FROM %%s WHERE tenant = 'solo'$$) WHERE result <> '0'",
            (f"{schema}.turns",),
        ).fetchall()
    shard, host, port = placement(url, "turns", "solo")
    assert counts == [(shard, "3")]
    texts = on_node(url, host, port, f"SELECT text FROM {schema}.turns_{shard} ORDER BY seq")
    assert [text for (text,) in texts] == ["我对青霉素过敏", "好的，记下了。", "明天去杭州"]
    chunk_shard = placement(url, "chunks", "solo")[0]
    chunks = on_node(url, host, port, f"SELECT count(*) FROM {schema}.chunks_{chunk_shard}")
    assert chunks[0][0] >= 1


def test_two_tenants_on_different_nodes_never_see_each_other(url: str) -> None:
    with opened(url) as memory:
        first, second = tenants_on_two_nodes(url)
        texts = {first: "harbor lighthouse keeper notes", second: "mountain glacier survey notes"}
        for tenant, text in texts.items():
            view = memory.for_tenant(tenant)
            view.add_turns("c1", make_turns([text, "noted"]))
            view.flush()
        for tenant, text in texts.items():
            view = memory.for_tenant(tenant)
            other = second if tenant == first else first
            hits = view.search("notes " + texts[other], top_k=10, granularity="chunk", min_score=0)
            assert hits, f"{tenant} found nothing"
            assert all(text.split()[0] in hit.text for hit in hits)
            assert all(texts[other].split()[0] not in hit.text for hit in hits)
    schema = schema_of(url)
    where = {tenant: placement(url, "turns", tenant) for tenant in texts}
    assert where[first][1:] != where[second][1:]
    for tenant, (shard, host, port) in where.items():
        rows = on_node(url, host, port, f"SELECT DISTINCT tenant FROM {schema}.turns_{shard}")
        assert rows == [(tenant,)]


def test_write_worker_search_delete_purge_on_the_cluster(url: str) -> None:
    turns = [
        "我下周三要去杭州出差，帮我订酒店",
        "好的，已为你预订西湖边的酒店。",
        "记得提醒我带上护照",
        "好的，出发前一天提醒你。",
    ]
    with opened(url) as memory:
        receipt = memory.add_turns("trip", make_turns(turns))
        assert receipt.job_id is not None
        assert memory.backlog() == (1, 0)
        memory.flush()
        assert memory.backlog() == (0, 0)
        for mode in ("hybrid", "vector", "lexical"):
            hits = memory.search("杭州 酒店", top_k=5, mode=mode)
            assert hits and "杭州" in hits[0].text, mode
        conversation = memory.search("护照", top_k=5, filters={"conversation_id": "trip"})
        assert conversation and "护照" in conversation[0].text
        memory.delete("trip")
        memory.flush()
        assert memory.search("杭州 酒店", top_k=5) == []
        assert memory.purge()["turns"] == len(turns)
        stats = memory.stats()
        assert stats["turns_deleted"] == len(turns)
        assert stats["file_bytes"] > 0


def test_cross_tenant_operations_reach_every_node(url: str) -> None:
    with opened(url) as memory:
        first, second = tenants_on_two_nodes(url)
        for tenant in (first, second):
            memory.for_tenant(tenant).add_turns("c1", make_turns(["one line", "another"]))
        assert memory.backlog(all_tenants=True) == (2, 0)
        key_id, secret = memory.create_api_key(second, "ci")
        assert memory.api_key_tenant(secret) == second
        for tenant in (first, second):
            memory.for_tenant(tenant).flush()
        assert memory.backlog(all_tenants=True) == (0, 0)
        memory.revoke_api_key(key_id)
        assert memory.api_key_tenant(secret) is None


def test_a_candidate_finished_by_another_worker_is_not_claimed_again(url: str) -> None:
    """Ready jobs are read without row locks on Citus: a stale candidate must not win."""
    with opened(url) as memory, opened(url) as other:
        memory.add_turns("c1", make_turns(["hello", "hi"]))
        store = memory.store
        now = time.time()
        stale = store._db().execute(store.READY_JOBS, (now, now, now, "late", 10)).fetchall()
        assert len(stale) == 1
        claimed = other.store.claim_jobs("early", limit=10, lease_seconds=60)
        assert [job.job_id for job in claimed] == [stale[0][0]]
        with other.store._write() as conn:
            conn.execute(
                "UPDATE jobs SET status='done', claimed_by=NULL WHERE tenant=? AND job_id=?",
                (memory.tenant, claimed[0].job_id),
            )
        with store._write() as conn:
            assert store._claimable(conn, stale, "late", time.time()) == []
        assert store.claim_jobs("late", limit=10, lease_seconds=60) == []


def test_unlisted_terms_take_the_shard_planners_estimate(url: str, monkeypatch: Any) -> None:
    """Document counts of terms that no shard lists as common: counted exactly while the
    planner's estimate for them is small, else that estimate (what the PostgreSQL store's
    planner gives); counting them at a million chunks read every matching row."""
    from convmem.store import postgres_lexical
    from convmem.store.postgres_lexical import _tsquery

    vocabulary = [f"word{i}" for i in range(30)]
    rng = random.Random(5)
    records = [
        {
            "chunk_id": f"k{i}",
            "text": " ".join(rng.sample(vocabulary, 6)) + (" zebra" if i < 2 else ""),
            "metadata": {"conversation_id": f"c{i % 7}", "turn_range": [0, 0]},
        }
        for i in range(600)
    ]
    with opened(url) as memory:
        assert memory.upsert_chunks(records).errors == []
        shard, host, port = placement(url, "chunks", memory.tenant)
        node = urlsplit(url.split("?")[0])._replace(
            netloc=f"{urlsplit(url).username}@{host}:{port}"
        )
        with psycopg.connect(node.geturl(), autocommit=True) as conn:
            conn.execute("SET default_statistics_target = 1")  # list the 10 most common terms
            conn.execute(f"ANALYZE {schema_of(url)}.chunks_{shard}")
        (plan,) = on_node(
            url,
            host,
            port,
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {schema_of(url)}.chunks_{shard} "
            f"WHERE tsv @@ CAST($${_tsquery(['zebra'])}$$ AS tsquery)",
        )[0]
        planned = int(plan[0]["Plan"]["Plan Rows"])
        store = memory.store
        assert planned == 3  # 0.005 of 600 rows: the floor for terms seen too rarely to list
        assert "zebra" not in store._common_terms()[0]
        assert sum(part.get("", 0) for part in store._common_terms()) == planned
        with store._write() as conn:
            assert store._term_counts(conn, ["zebra"]) == {"zebra": 2}
        monkeypatch.setattr(postgres_lexical, "EXACT_COUNT_BELOW", planned - 1)
        with store._write() as conn:
            assert store._term_counts(conn, ["zebra"]) == {"zebra": planned}


def test_libpq_options_in_the_url_reach_the_session(url: str) -> None:
    """A caller's ``options=-c name=value`` (spaces as %20) and the store's own Citus
    setting both reach the server: '+' for a space, which libpq leaves undecoded, once
    broke the connection."""
    with opened(f"{url}&options=-c%20statement_timeout%3D4321") as memory:
        read = memory.store._db().execute
        assert read("SHOW statement_timeout").fetchone()[0] == "4321ms"
        assert read("SHOW citus.propagate_set_commands").fetchone()[0] == "local"


def test_indexing_a_tenant_commits_on_its_node_alone(url: str) -> None:
    """Writing and indexing one tenant's turns is a one-node transaction: no two-phase
    commit, which any write to a reference table (``meta`` is one) forces on every node.
    Citus records each two-phase commit in ``pg_dist_transaction`` until recovery."""
    with opened(url) as memory:
        memory.add_turns("warm", make_turns(["a first line", "and a reply"]))
        memory.flush()
        with coordinator(url) as conn:
            conn.execute("SELECT recover_prepared_transactions()")
            assert conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()[0] == 0
        memory.add_turns("c1", make_turns(["我住在杭州", "好的，记住了", "下周去上海出差"]))
        memory.flush()
        assert (
            memory.upsert_chunks(
                [
                    {
                        "chunk_id": "k1",
                        "text": "a note",
                        "metadata": {"conversation_id": "c2", "turn_range": [0, 0]},
                    }
                ]
            ).errors
            == []
        )
        assert memory.delete("c1", turn_range=[0, 0]).turns_deleted == 1
        memory.flush()
        with coordinator(url) as conn:
            assert conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()[0] == 0


def wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds:g} s")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_worker_crash_mid_ingest_loses_no_acknowledged_turn(url: str) -> None:
    """The worker node holding the tenant stops like a crash while turns stream in."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "citus"
    data = Path(os.environ.get("CONVMEM_CITUS_DIR", "/tmp/convmem-citus"))
    if not (data / "worker1" / "PG_VERSION").exists():
        reason = f"no cluster of scripts/citus in {data} to restart a node of"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with opened(url) as memory:
        memory.add_turns("c1", make_turns(["first"]))
        _, host, port = placement(url, "turns", memory.tenant)
        on_node(url, host, port, "CHECKPOINT")  # recovery replays only this test's writes
        acknowledged: list[int] = [0]
        failures: list[str] = []
        stop = threading.Event()

        def write() -> None:
            seq = 1
            while not stop.is_set():
                try:
                    memory.add_turns("c1", make_turns([f"line {seq}"], start=seq))
                except Exception as exc:  # the node is down: not acknowledged, send again
                    failures.append(type(exc).__name__)
                    time.sleep(0.05)
                    continue
                acknowledged.append(seq)
                seq += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            wait_for(lambda: len(acknowledged) >= 20, 60, "20 turns acknowledged")
            subprocess.run([str(script), "restart", str(port)], check=True, timeout=240)
            resumed = len(acknowledged)
            wait_for(lambda: len(acknowledged) >= resumed + 20, 120, "writes resumed")
        finally:
            stop.set()
            writer.join()
        stored = {turn.seq for turn in memory.store.load_turns(memory.tenant, "c1")}
        assert set(acknowledged) <= stored
        assert failures, "the writer never saw the node down: nothing was tested"
        memory.flush()
        assert memory.search("line", top_k=3)


def test_open_postgres_picks_plain_postgres_without_citus() -> None:
    plain = os.environ.get("CONVMEM_TEST_POSTGRES_URL")
    if not plain:
        pytest.skip("CONVMEM_TEST_POSTGRES_URL is not set (scripts/postgres start)")
    store = open_postgres(plain)
    try:
        assert type(store).__name__ == "PostgresStore"
    finally:
        store.close()
