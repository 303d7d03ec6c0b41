"""Tenant isolation through the interfaces, on real loopback servers: another tenant's ids
answer exactly like ids that do not exist, a tenant's key cannot manage keys, a key revoked
by another process is refused at once, and a server without keys answers only requests
addressed to this machine (a DNS-rebinding page could otherwise read its memory)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convmem import HashingEmbedder
from convmem.server import ServerSettings, create_app
from convmem.server.middleware import rebindable_host
from helpers import LiveServer, make_turns, served

ADMIN = "admin-secret-for-isolation-tests"
SECRET = "甲方的机密：合同金额三百万，青铜钥匙在七号仓。"
PLAN = {
    "chapter_index": 1,
    "scene_index": 0,
    "summary": "林远用青铜钥匙打开七号仓",
    "characters": ["林远"],
}


def _key(url: str, tenant: str) -> dict[str, str]:
    response = httpx.post(
        f"{url}/v1/admin/keys",
        json={"tenant": tenant, "name": "isolation"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Tenant A holds a conversation, notes, a caller-made chunk and a story project;
    tenant B holds nothing."""
    store = tmp_path_factory.mktemp("isolation") / "s.db"
    settings = ServerSettings(
        store=str(store), embedder_instance=HashingEmbedder(), admin_key=ADMIN, workers=1
    )
    live = LiveServer(create_app(settings))
    a, b = _key(live.url, "tenant-a"), _key(live.url, "tenant-b")
    with httpx.Client(base_url=live.url, headers={"X-API-Key": a["key"]}) as client:
        texts = [f"请记住：{SECRET}", "好的，已记下。", "我喜欢靠窗的座位。", "收到"]
        receipt = client.post("/v1/conversations/conv1/turns", json={"turns": make_turns(texts)})
        deadline = time.monotonic() + 30
        while client.get("/v1/conversations/conv1/status").json()["backlog"]:
            assert time.monotonic() < deadline, "index backlog did not drain"
            time.sleep(0.05)
        metadata = {"conversation_id": "conv1", "turn_range": [0, 0]}
        chunk = {"chunk_id": "api-1", "text": SECRET, "metadata": metadata}
        assert client.post("/v1/update", json={"chunk": chunk}).json()["upserted"] == 1
        story = {
            "chunk_id": "s1",
            "project_id": "novel",
            "chapter_index": 0,
            "scene_index": 0,
            "content_type": "scene",
            "content": SECRET,
            "entities": ["林远"],
        }
        assert client.post("/v1/story/novel/chunks", json={"chunks": [story]}).status_code == 200
        hits = client.post(
            "/v1/search", json={"query_text": "合同金额 青铜钥匙", "granularity": "chunk"}
        ).json()["hits"]
        notes = client.get("/v1/notes").json()
    assert hits and notes
    yield {
        "url": live.url,
        "store": store,
        "a": a,
        "b": b,
        "job_id": receipt.json()["job_id"],
        "chunk_ids": [hit["chunk_id"] for hit in hits],
        "note_ids": [note["note_id"] for note in notes],
    }
    live.stop()


def _as(tenants: dict[str, Any], who: str) -> httpx.Client:
    return httpx.Client(base_url=tenants["url"], headers={"X-API-Key": tenants[who]["key"]})


def test_another_tenants_ids_answer_like_ids_that_do_not_exist(tenants: dict[str, Any]) -> None:
    with _as(tenants, "b") as client:
        job = tenants["job_id"]
        never = job + 10_000
        for path in ("/v1/jobs/{}", "/v1/jobs/{}/retry"):
            method = client.post if path.endswith("retry") else client.get
            theirs, unknown = method(path.format(job)), method(path.format(never))
            assert theirs.status_code == unknown.status_code == 404
            assert theirs.text == unknown.text.replace(str(never), str(job))
        for note_id in tenants["note_ids"]:
            for verdict in (True, False):
                theirs = client.post("/v1/update", json={"note_id": note_id, "confirm": verdict})
                unknown = client.post(
                    "/v1/update", json={"note_id": f"{note_id}0", "confirm": verdict}
                )
                assert theirs.status_code == unknown.status_code == 404
                assert theirs.text == unknown.text.replace(f"{note_id}0", note_id)
        ids = [*tenants["chunk_ids"], "api-1"]
        theirs = client.post("/v1/delete", json={"conversation_id": "conv1", "chunk_ids": ids})
        never_ids = [f"x{chunk_id}" for chunk_id in ids]
        unknown = client.post(
            "/v1/delete", json={"conversation_id": "conv1", "chunk_ids": never_ids}
        )
        assert theirs.status_code == unknown.status_code == 200
        assert theirs.json()["deleted"] == 0
        assert [e.replace("chunk x", "chunk ") for e in unknown.json()["errors"]] == theirs.json()[
            "errors"
        ]
        # the same chunk id and conversation is B's own chunk, not an overwrite of A's
        metadata = {"conversation_id": "conv1", "turn_range": [0, 0]}
        mine = {"chunk_id": "api-1", "text": "乙方自己的内容", "metadata": metadata}
        written = client.post("/v1/update", json={"chunk": mine}).json()
        assert (written["upserted"], written["updated"]) == (1, 0)
        scene = client.post("/v1/scenes", json={"project_id": "novel", "scene_plan": PLAN})
        assert scene.status_code == 200 and scene.json()["relevant_memories"] == []
        seen = [
            scene.text,
            client.post("/v1/search", json={"query_text": "合同金额", "min_score": 0}).text,
            client.get("/v1/notes", params={"status": "rejected"}).text,
            client.get("/v1/conversations/conv1/pins").text,
        ]
    assert not any(word in text for text in seen for word in ("机密", "三百万"))
    with _as(tenants, "a") as client:
        hits = client.post(
            "/v1/search", json={"query_text": "合同金额三百万", "granularity": "chunk"}
        ).json()["hits"]
        assert {"api-1", *tenants["chunk_ids"]} <= {hit["chunk_id"] for hit in hits}
        assert any(hit["chunk_id"] == "api-1" and hit["text"] == SECRET for hit in hits)
        scene = client.post("/v1/scenes", json={"project_id": "novel", "scene_plan": PLAN})
        assert [m["content"] for m in scene.json()["relevant_memories"]] == [SECRET]
        assert all(n["status"] != "rejected" for n in client.get("/v1/notes").json())


def test_a_tenants_key_cannot_manage_keys_or_read_the_admin_status(tenants: dict[str, Any]) -> None:
    with _as(tenants, "b") as client:
        for response in (
            client.get("/v1/admin/keys"),
            client.post("/v1/admin/keys", json={"tenant": "tenant-b"}),
            client.post("/v1/admin/keys", json={"tenant": "tenant-a"}),
            client.delete(f"/v1/admin/keys/{tenants['a']['key_id']}"),
            client.get("/v1/admin/status", params={"tenant": "tenant-a"}),
        ):
            assert response.status_code == 403, response.text
    with _as(tenants, "a") as client:
        assert client.get("/v1/notes").status_code == 200  # A's key still works


def test_a_key_revoked_by_another_process_is_refused_at_once(tenants: dict[str, Any]) -> None:
    made = _key(tenants["url"], "tenant-c")
    headers = {"Authorization": f"Bearer {made['key']}"}
    with httpx.Client(base_url=tenants["url"], headers=headers) as client:
        for _ in range(20):  # every request thread has read the key
            assert client.get("/v1/notes").status_code == 200
        command = [sys.executable, "-m", "convmem", "--store", str(tenants["store"])]
        revoked = subprocess.run(
            [*command, "keys", "revoke", made["key_id"]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert revoked.returncode == 0, revoked.stderr
        assert json.loads(revoked.stdout)["status"] == "revoked"
        assert {client.get("/v1/notes").status_code for _ in range(20)} == {401}
    listed = httpx.get(f"{tenants['url']}/v1/admin/keys", headers={"X-API-Key": ADMIN}).json()
    assert all("key" not in key for key in listed)
    raw = Path(tenants["store"]).read_bytes()
    assert made["key"].encode() not in raw  # stored as a hash


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:8077", None),
        ("localhost", None),
        ("[::1]:8077", None),
        ("app.localhost:8077", None),
        ("testserver", None),
        ("attacker.example:8077", "attacker.example"),
        ("Attacker.Example.", "attacker.example"),
        ("127.0.0.1.nip.io", "127.0.0.1.nip.io"),
    ],
)
def test_which_host_names_a_rebinding_page_could_send(host: str, name: str | None) -> None:
    assert rebindable_host(host) == name


def test_without_keys_a_request_addressed_to_a_dns_name_is_refused(tmp_path: Path) -> None:
    """A page whose name was rebound to 127.0.0.1 sends its own name as Host: without a key
    it read every turn (the MCP server's SDK refuses such requests too)."""
    options = ("--no-auth", "--store", str(tmp_path / "n.db"), "--embedder", "hashing")
    with served(*options) as url:
        turns = {"turns": make_turns([SECRET, "好"])}
        assert httpx.post(f"{url}/v1/conversations/c/turns", json=turns).status_code == 202
        for path in ("/v1/conversations/c/turns", "/metrics", "/healthz"):
            refused = httpx.get(url + path, headers={"Host": "attacker.example:8077"})
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["field"] == "host"
            assert "机密" not in refused.text
        deleted = httpx.post(
            f"{url}/v1/delete",
            json={"conversation_id": "c", "turn_range": [0, 9]},
            headers={"Host": "attacker.example"},
        )
        assert deleted.status_code == 403
        for host in ("localhost", url.removeprefix("http://")):
            kept = httpx.get(f"{url}/v1/conversations/c/turns", headers={"Host": host})
            assert kept.status_code == 200 and SECRET in kept.text


def test_a_server_without_keys_acts_on_the_tenant_it_was_given(tmp_path: Path) -> None:
    """``convmem --tenant alice serve --no-auth`` stored turns in tenant "default", where
    the same user's CLI (``--tenant alice``) never saw them."""
    store = str(tmp_path / "t.db")
    options = ("--no-auth", "--store", store, "--embedder", "hashing")
    with served(*options, env={"CONVMEM_TENANT": "alice"}) as url:
        turns = {"turns": make_turns([SECRET])}
        assert httpx.post(f"{url}/v1/conversations/c/turns", json=turns).status_code == 202
    command = [sys.executable, "-m", "convmem", "--store", store, "--embedder", "hashing"]
    for tenant, held in (("alice", 1), ("default", 0)):
        stats = subprocess.run(
            [*command, "--tenant", tenant, "stats"], capture_output=True, text=True, check=True
        )
        assert json.loads(stats.stdout)["turns"] == held, (tenant, stats.stdout)


def test_the_cli_checks_a_keys_label_as_the_library_does(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "convmem", "--store", str(tmp_path / "k.db")]
    made = subprocess.run(
        [*command, "--tenant", "acme", "keys", "create", "--name", "x" * 201],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode != 0
    assert "name must be a string of at most 200 characters" in made.stderr
    listed = subprocess.run([*command, "keys", "list"], capture_output=True, text=True, check=True)
    assert json.loads(listed.stdout) == []
