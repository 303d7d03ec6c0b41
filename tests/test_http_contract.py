"""The HTTP contract at the edge: bad values are 422 naming the field, open routes show no
tenant detail, unsupported methods say what is allowed, the docs load offline, and each
request leaves one access-log line without its body."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient

from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker
from convmem.retrieve.routing import STRATEGIES
from convmem.server import ServerSettings, create_app
from convmem.server.middleware import tenant_hash
from convmem.server.schemas import Strategy
from helpers import make_turns

ADMIN = "admin-secret-for-contract-tests"
TENANT = "acme-private-tenant"


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    opened = Memory.open(
        str(tmp_path / "contract.db"), embedder=HashingEmbedder(), workers=0, marker=KeepAllMarker()
    )
    yield opened
    opened.close()


@pytest.fixture
def client(memory: Memory) -> Iterator[TestClient]:
    app = create_app(ServerSettings(admin_key=ADMIN), memory=memory)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def key(memory: Memory) -> dict[str, str]:
    _, secret = memory.create_api_key(TENANT, "contract")
    return {"Authorization": f"Bearer {secret}"}


ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def _raw(client: TestClient, method: str, path: str, body: str, **headers: str) -> Any:
    """Send ``body`` as written: JSON escapes such as \\ud800 reach the server unchanged."""
    return client.request(
        method,
        path,
        content=body.encode("ascii"),
        headers={"content-type": "application/json", **headers},
    )


def test_strategy_names_at_the_edge_are_the_library_names() -> None:
    assert set(get_args(Strategy)) == set(STRATEGIES)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"top_k": "x"}, "hints.params.top_k"),
        ({"top_k": 0}, "hints.params.top_k"),
        ({"top_k": 1001}, "hints.params.top_k"),
        ({"candidates_multiplier": "many"}, "hints.params.candidates_multiplier"),
        ({"candidates_multiplier": 11}, "hints.params.candidates_multiplier"),
        ({"include_persona": "perhaps"}, "hints.params.include_persona"),
        ({"time_range": "yesterday"}, "hints.params.time_range"),
        ({"time_range": [1, 2, 3]}, "hints.params.time_range"),
    ],
)
def test_bad_hint_params_are_422_naming_the_field(
    client: TestClient, key: dict[str, str], params: dict[str, Any], field: str
) -> None:
    response = client.post(
        "/v1/search",
        json={"query_text": "护照", "hints": {"strategies": ["deep_search"], "params": params}},
        headers=key,
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_good_hint_params_and_unknown_keys_are_used_and_echoed(
    client: TestClient, key: dict[str, str]
) -> None:
    hints = {
        "strategies": ["deep_search", "persona_search"],
        "params": {"top_k": 3, "candidates_multiplier": 2, "note": {"from": ["router", 1]}},
    }
    response = client.post("/v1/search", json={"query_text": "护照", "hints": hints}, headers=key)
    assert response.status_code == 200, response.text
    assert response.json()["hints"]["params"] == hints["params"]


def test_a_year_one_turn_then_a_temporal_search_answers(
    client: TestClient, key: dict[str, str], memory: Memory
) -> None:
    turn = {
        "turn_id": 0,
        "role": "user",
        "text": "公元一年的事",
        "timestamp": "0001-01-01T00:00:00+00:00",
    }
    posted = client.post("/v1/conversations/old/turns", json={"turns": [turn]}, headers=key)
    assert posted.status_code == 202, posted.text
    memory.for_tenant(TENANT).flush()
    response = client.post(
        "/v1/search",
        json={
            "query_text": "一年",
            "filters": {"conversation_id": "old"},
            "hints": {"strategies": ["temporal_search"], "params": {"time_range": "recent"}},
        },
        headers=key,
    )
    assert response.status_code == 200, response.text


TURN = '{{"turn_id": {turn_id}, "role": "user", "text": {text}, "meta": {meta}}}'
SURROGATE = '"\\ud800"'


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        (
            "POST",
            "/v1/conversations/c/turns",
            '{"turns": ['
            + TURN.format(turn_id=1, text='"x"', meta='{"k": ' + SURROGATE + "}")
            + "]}",
            "turns[0].meta.k",
        ),
        (
            "POST",
            "/v1/conversations/c/turns",
            '{"turns": [' + TURN.format(turn_id='"t\\ud8001"', text='"x"', meta="{}") + "]}",
            "turns[0].turn_id",
        ),
        (
            "POST",
            "/v1/conversations/c/turns",
            '{"turns": [' + TURN.format(turn_id=1, text='"a\\ud800b"', meta="{}") + "]}",
            "turns[0].text",
        ),
        (
            "POST",
            "/v1/search",
            '{"query_text": "x", "filters": {"conversation_id": ' + SURROGATE + "}}",
            "filters.conversation_id",
        ),
        (
            "POST",
            "/v1/delete",
            '{"conversation_id": "c", "chunk_ids": ["ok", ' + SURROGATE + "]}",
            "chunk_ids[1]",
        ),
        (
            "POST",
            "/v1/delete",
            '{"conversation_id": ' + SURROGATE + ', "turn_range": [0, 1]}',
            "conversation_id",
        ),
        (
            "POST",
            "/v1/update",
            '{"chunk": {"chunk_id": "k1", "text": "t", "metadata": {"conversation_id": "c", '
            '"turn_range": [0, 0], "topic": ' + SURROGATE + "}}}",
            "chunk.metadata.topic",
        ),
        (
            "PUT",
            "/v1/policy",
            '{"rules": {"note": {"ttl_seconds": 1180591620717411303424}}}',
            "rules.note.ttl_seconds",
        ),
        ("POST", "/v1/search", '{"query_text": "x\\u0000y"}', "query_text"),
    ],
)
def test_values_no_store_can_hold_are_422_naming_the_field(
    client: TestClient, key: dict[str, str], method: str, path: str, body: str, field: str
) -> None:
    response = _raw(client, method, path, body, **key)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_a_request_without_a_key_is_401_whatever_its_body_holds(client: TestClient) -> None:
    response = _raw(client, "POST", "/v1/search", '{"query_text": ' + SURROGATE + "}")
    assert response.status_code == 401


def test_chunk_metadata_sent_to_update_is_validated(
    client: TestClient, key: dict[str, str]
) -> None:
    def update(metadata: dict[str, Any]) -> Any:
        chunk = {"chunk_id": "k1", "text": "靠窗的座位", "metadata": metadata}
        return client.post("/v1/update", json={"chunk": chunk}, headers=key)

    base = {"conversation_id": "c", "turn_range": [0, 1]}
    for metadata, field in [
        ({**base, "expires_at": "soon"}, "chunk.metadata.expires_at"),
        ({**base, "expires_at": "2026-02-02T10:00:00"}, "chunk.metadata.expires_at"),
        (
            {**base, "timestamp_range": ["2026-01-01T00:00:00Z", "later"]},
            "chunk.metadata.timestamp_range",
        ),
        ({**base, "turn_range": [3, 1]}, "chunk.metadata.turn_range"),
        ({"turn_range": [0, 1]}, "chunk.metadata.conversation_id"),
    ]:
        response = update(metadata)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field
    stored = update({**base, "expires_at": "2099-01-01T00:00:00+00:00"})
    assert stored.status_code == 200 and stored.json()["upserted"] == 1, stored.text


def test_admin_keys_are_refused_for_tenant_names_the_library_refuses(client: TestClient) -> None:
    for body in (
        '{"tenant": "a\\u0001b"}',
        '{"tenant": ""}',
        '{"tenant": "a\\ud800"}',
        '{"tenant": "' + "t" * 101 + '"}',
    ):
        response = _raw(client, "POST", "/v1/admin/keys", body, **ADMIN_HEADERS)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["field"] == "tenant"
    assert client.get("/v1/admin/keys", headers=ADMIN_HEADERS).json() == []


def test_healthz_is_minimal_and_503_when_the_store_is_gone(
    client: TestClient, key: dict[str, str], memory: Memory
) -> None:
    client.post("/v1/conversations/c/turns", json={"turns": make_turns(["a", "b"])}, headers=key)
    assert client.get("/healthz").json() == {"status": "ok"}
    memory.close()
    down = client.get("/healthz")
    assert down.status_code == 503
    assert down.json()["error"]["type"] == "store_unavailable"


def test_open_routes_show_no_tenant_and_admin_status_needs_the_admin_key(
    client: TestClient, key: dict[str, str]
) -> None:
    turns = make_turns(["我下个月要去东京出差。", "好的。"])
    client.post("/v1/conversations/conv-private-42/turns", json={"turns": turns}, headers=key)
    for path in ("/healthz", "/metrics"):
        response = client.get(path)
        assert response.status_code == 200
        assert "acme" not in response.text and "conv-private" not in response.text
    assert "convmem_turns_accepted_total 2" in client.get("/metrics").text
    for headers in ({}, key):
        refused = client.get("/v1/admin/status", headers=headers)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden"
    overall = client.get("/v1/admin/status", headers=ADMIN_HEADERS).json()
    assert overall["backlog"] == 1 and overall["failed_jobs"] == 0
    one = client.get("/v1/admin/status", params={"tenant": TENANT}, headers=ADMIN_HEADERS).json()
    assert one["tenant"] == TENANT and one["backlog_by_conversation"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/v1/search", "POST"),
        ("DELETE", "/healthz", "GET"),
        ("PATCH", "/v1/policy", "GET, PUT"),
    ],
)
def test_unsupported_methods_get_405_with_allow(
    client: TestClient, key: dict[str, str], method: str, path: str, allowed: str
) -> None:
    response = client.request(method, path, headers=key)
    assert response.status_code == 405
    assert set(response.headers["allow"].split(", ")) >= set(allowed.split(", "))
    assert response.json()["error"]["type"] == "method_not_allowed"


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_every_asset_from_the_service(client: TestClient, page: str) -> None:
    html = client.get(page).text
    assert "http://" not in html and "https://" not in html  # no CDN
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(asset.endswith(".js") for asset in assets)
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


def test_each_request_logs_one_line_without_body_or_key(
    client: TestClient, key: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    secret_text = "合同金额三百万"
    with caplog.at_level(logging.INFO, logger="convmem.server.access"):
        client.post("/v1/search", json={"query_text": secret_text}, headers=key)
        client.get("/v1/jobs/12345", headers=key)
    lines = [r.getMessage() for r in caplog.records if r.name == "convmem.server.access"]
    assert len(lines) == 2
    assert re.fullmatch(rf"POST /v1/search 200 \d+\.\dms tenant={tenant_hash(TENANT)}", lines[0])
    assert lines[1].startswith("GET /v1/jobs/{job_id} 404 ")
    secret = key["Authorization"].split()[1]
    assert not any(secret_text in line or secret in line or TENANT in line for line in lines)


def test_the_seed_names_speaker_and_timestamp_iso_are_accepted_but_not_both_names(
    client: TestClient, key: dict[str, str]
) -> None:
    seed_turn = {
        "turn_id": 0,
        "speaker": "user",
        "text": "我喜欢靠窗的座位",
        "timestamp_iso": "2026-02-02T10:15:30+08:00",
    }
    posted = client.post("/v1/conversations/seed/turns", json={"turns": [seed_turn]}, headers=key)
    assert posted.status_code == 202, posted.text
    (stored,) = client.get("/v1/conversations/seed/turns", headers=key).json()
    assert stored["role"] == "user" and stored["timestamp"].startswith("2026-02-02T")
    both = {"turn_id": 1, "role": "user", "speaker": "assistant", "text": "x"}
    refused = client.post("/v1/conversations/seed/turns", json={"turns": [both]}, headers=key)
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "turns[0].speaker"


def test_log_level_setting_sets_the_convmem_loggers(memory: Memory) -> None:
    package = logging.getLogger("convmem")
    before = package.level
    try:
        create_app(ServerSettings(auth=False, log_level="debug"), memory=memory)
        assert package.level == logging.DEBUG
        create_app(ServerSettings(auth=False, log_level="warning"), memory=memory)
        assert not logging.getLogger("convmem.server.access").isEnabledFor(logging.INFO)
    finally:
        package.setLevel(before)


@pytest.mark.parametrize(
    "path", ["/v1/conversations/a%00b/status", "/v1/notes?conversation_id=a%00b"]
)
def test_a_nul_in_the_url_is_422_naming_the_parameter(
    client: TestClient, key: dict[str, str], path: str
) -> None:
    response = client.get(path, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "conversation_id"


def test_the_longest_question_is_the_same_for_the_library_and_http(
    memory: Memory, client: TestClient, key: dict[str, str]
) -> None:
    from convmem.errors import InvalidInputError
    from convmem.models import MAX_QUERY_CHARS

    longest, longer = "问" * MAX_QUERY_CHARS, "问" * (MAX_QUERY_CHARS + 1)
    tenant = memory.for_tenant(TENANT)
    assert tenant.search(longest) == []
    ok = client.post("/v1/search", json={"query_text": longest}, headers=key)
    assert ok.status_code == 200, ok.text
    with pytest.raises(InvalidInputError) as caught:
        tenant.search(longer)
    assert caught.value.field == "query_text" and str(MAX_QUERY_CHARS) in str(caught.value)
    refused = client.post("/v1/search", json={"query_text": longer}, headers=key)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "query_text"
