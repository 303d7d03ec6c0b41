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
    code, _, err = _run(capsys, "--store", store, "search", "x", "--filter", '{"deleted": true}')
    assert code == 2 and err.startswith("error: ") and "deleted" in err
    code, _, err = _run(capsys, "--store", store, "delete", "c1", "--turns", "a-b")
    assert code == 2 and "--turns" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversation_id": "c", "turn_id": 1, "role": "user", "text": ""}\n')
    code, _, err = _run(capsys, "--store", store, "ingest", str(bad))
    assert code == 2 and "turns[0].text" in err


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
    assert hit["text"].startswith("[Context: 2023-05-08; Caroline and Melanie")


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
