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
from convmem.errors import InvalidInputError
from convmem.governance import GovernancePolicy, KeepAllMarker
from convmem.retrieve.routing import STRATEGIES
from convmem.server import ServerSettings, create_app
from convmem.server.middleware import MAX_JSON_DEPTH, tenant_hash
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


@pytest.mark.parametrize(
    ("chunk", "field"),
    [
        ({"metadata": {"conversation_id": ""}}, "chunk.metadata.conversation_id"),
        ({"metadata": {"conversation_id": "   "}}, "chunk.metadata.conversation_id"),
        ({"metadata": {"conversation_id": "c" * 1000}}, "chunk.metadata.conversation_id"),
        ({"chunk_id": ""}, "chunk.chunk_id"),
        ({"chunk_id": "   "}, "chunk.chunk_id"),
        ({"chunk_id": "k" * 100_000}, "chunk.chunk_id"),
        (
            {"metadata": {"timestamp_range": ["2026-02-02T00:00:00Z", "2026-01-01T00:00:00Z"]}},
            "chunk.metadata.timestamp_range",
        ),
    ],
)
def test_update_refuses_a_chunk_that_delete_could_never_reach(
    client: TestClient, key: dict[str, str], memory: Memory, chunk: dict[str, Any], field: str
) -> None:
    """/v1/update stored chunks under a conversation id /v1/delete refuses (so they could
    never be deleted), chunk ids of 0 or 100,000 characters, and times running backwards."""
    metadata = {"conversation_id": "c", "turn_range": [0, 1], **chunk.get("metadata", {})}
    sent = {"chunk_id": "k1", "text": "靠窗的座位", **chunk, "metadata": metadata}
    response = client.post("/v1/update", json={"chunk": sent}, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    assert memory.for_tenant(TENANT).chunks(chunk_ids=[sent["chunk_id"]]) == []
    # the longest ids are taken, and delete reaches what update stored
    metadata = {
        "conversation_id": "c" * 200,
        "turn_range": [0, 1],
        "timestamp_range": ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00"],
    }
    longest = {"chunk_id": "k" * 200, "text": "靠窗的座位", "metadata": metadata}
    stored = client.post("/v1/update", json={"chunk": longest}, headers=key)
    assert stored.status_code == 200 and stored.json()["upserted"] == 1, stored.text
    body = {"conversation_id": "c" * 200, "chunk_ids": ["k" * 200]}
    deleted = client.post("/v1/delete", json=body, headers=key)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 1, deleted.text


@pytest.fixture
def noted(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    """A service whose tenant has one pending note (the default marker makes it)."""
    with Memory.open(str(tmp_path / "notes.db"), embedder=HashingEmbedder(), workers=0) as memory:
        _, secret = memory.create_api_key(TENANT, "notes")
        tenant = memory.for_tenant(TENANT)
        texts = ["我最近在学吉他。", "周末想去爬山。", "记住这个"]
        tenant.add_turns("c", [dict(t, role="user") for t in make_turns(texts)])
        tenant.flush()
        (note,) = tenant.notes("c", "pending")
        app = create_app(ServerSettings(admin_key=ADMIN), memory=memory)
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield test_client, {"Authorization": f"Bearer {secret}"}, note.note_id


@pytest.mark.parametrize(
    ("verdict", "field", "says"),
    [
        ({"requires_confirmation": True}, "requires_confirmation", "confirm: false"),
        (
            {"confirm": False, "evidence_level": "S3_user_confirmed"},
            "evidence_level",
            "S3_user_confirmed",
        ),
        (
            {"status": "rejected", "evidence_level": "S3_user_confirmed"},
            "evidence_level",
            "S3_user_confirmed",
        ),
    ],
)
def test_a_note_verdict_that_is_no_verdict_is_refused_and_the_note_stays_pending(
    noted: tuple[TestClient, dict[str, str], str], verdict: dict[str, Any], field: str, says: str
) -> None:
    """`requires_confirmation: true` silently rejected the note, and a rejection could be
    stored marked S3_user_confirmed."""
    client, key, note_id = noted
    refused = client.post("/v1/update", json={"note_id": note_id, **verdict}, headers=key)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and says in error["message"]
    pending = client.get("/v1/notes", params={"status": "pending"}, headers=key).json()
    assert [note["note_id"] for note in pending] == [note_id]
    rejected = client.post("/v1/update", json={"note_id": note_id, "confirm": False}, headers=key)
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert rejected.json()["evidence_level"] != "S3_user_confirmed"


@pytest.mark.parametrize("rules", [[], "", 0, False, None, "x", [1]])
def test_policy_rules_that_are_not_an_object_are_refused(
    client: TestClient, key: dict[str, str], rules: Any
) -> None:
    kept = {"rules": {"note": {"ttl_seconds": 60}}}
    assert client.put("/v1/policy", json=kept, headers=key).status_code == 200
    refused = client.put("/v1/policy", json={"rules": rules}, headers=key)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == {
        "type": "invalid_input",
        "message": "policy.rules must be an object",
        "field": "policy.rules",
    }
    assert client.get("/v1/policy", headers=key).json()["rules"]["note"]["ttl_seconds"] == 60


def test_a_tenant_policy_stored_with_empty_rules_still_reads() -> None:
    """Stores may hold {"rules": []} from before it was refused: it reads as no rules, so
    that tenant's indexing goes on."""
    stored = GovernancePolicy().merged({"rules": [], "pin_window": 3}, source="tenant policy")
    assert stored.rules == GovernancePolicy().rules and stored.pin_window == 3
    with pytest.raises(InvalidInputError):
        GovernancePolicy().merged({"rules": []}, source="policy")


@pytest.mark.parametrize("path", ["/v1/conversations/a%FF/turns", "/v1/conversations/a%FE/turns"])
def test_an_id_that_is_not_utf8_is_422_not_read_as_a_replacement_character(
    client: TestClient, key: dict[str, str], memory: Memory, path: str
) -> None:
    """a%FF was stored as conversation "a\\ufffd", so a%FE reached the same conversation."""
    turns = {"turns": make_turns(["你好"])}
    refused = client.post(path, json=turns, headers=key)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "conversation_id" and "UTF-8" in error["message"]
    assert memory.for_tenant(TENANT).recent_turns("a\ufffd") == []
    query = client.get("/v1/notes?conversation_id=a%FF", headers=key)
    assert query.status_code == 422 and query.json()["error"]["field"] == "conversation_id"
    accepted = client.post("/v1/conversations/%C3%A9%2Fx/turns", json=turns, headers=key)
    assert accepted.status_code == 202, accepted.text
    assert [t.text for t in memory.for_tenant(TENANT).recent_turns("é/x")] == ["你好"]


READS = ("status", "turns", "marks", "pins")


def test_another_tenants_conversation_reads_as_one_that_does_not_exist(
    client: TestClient, key: dict[str, str], memory: Memory
) -> None:
    """What docs/http.md says: 200 with nothing in it (no 404), the same for both."""
    memory.for_tenant("other-tenant").add_turns("theirs", make_turns(["甲方的机密"]))
    for read in READS:
        theirs = client.get(f"/v1/conversations/theirs/{read}", headers=key)
        unknown = client.get(f"/v1/conversations/never/{read}", headers=key)
        assert theirs.status_code == unknown.status_code == 200
        assert theirs.text == unknown.text.replace("never", "theirs")
    assert unknown.json() == []
    paths = client.get("/openapi.json").json()["paths"]
    for read in READS:
        responses = paths[f"/v1/conversations/{{conversation_id}}/{read}"]["get"]["responses"]
        assert "404" not in responses and "200" in responses


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_says_to_send_the_content_type(
    client: TestClient, key: dict[str, str], content_type: str | None
) -> None:
    headers = {**key, **({"content-type": content_type} if content_type else {})}
    response = client.post("/v1/search", content=b'{"query_text": "x"}', headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "content-type"
    assert "Content-Type: application/json" in error["message"]
    assert set(error) == {"type", "message", "field"}


def test_a_body_nested_too_deeply_says_so_with_the_limit(
    client: TestClient, key: dict[str, str]
) -> None:
    def nested(levels: int) -> str:
        # the body object and filters are two levels
        inner = "[" * (levels - 2) + "]" * (levels - 2)
        return '{"query_text": "x", "filters": {"tags": ' + inner + "}}"

    deep = _raw(client, "POST", "/v1/search", nested(1000), **key)
    assert deep.status_code == 400, deep.text
    message = deep.json()["error"]["message"]
    assert "1000 levels" in message and str(MAX_JSON_DEPTH) in message
    assert _raw(client, "POST", "/v1/search", nested(MAX_JSON_DEPTH + 1), **key).status_code == 400
    # at the limit the body is read: the filter itself is what is wrong
    at_limit = _raw(client, "POST", "/v1/search", nested(MAX_JSON_DEPTH), **key)
    assert at_limit.status_code == 422, at_limit.text
    # brackets inside strings are text
    text = '{"query_text": "' + "[" * 2000 + '"}'
    assert _raw(client, "POST", "/v1/search", text, **key).status_code == 200
