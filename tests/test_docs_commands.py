"""Every shell command shown in README.md and docs/*.md runs and exits 0.

Commands are the lines starting with ``convmem`` or ``scripts/`` in ```bash, ```sh,
```console and ```shell blocks. Each document runs its commands in order, in a fresh
workspace: a temporary folder holding the files the documents assume the reader has
(``turns.jsonl``, ``policy.json``, a story project...), with ``CONVMEM_STORE`` and
``XDG_DATA_HOME`` pointing into it. ``convmem serve`` and ``convmem worker`` run as real
processes on a free loopback port until they answer, then stop on Ctrl-C. The few
commands that cannot run here are in SKIPPED, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx
import pytest

from convmem.cli.main import main

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(bash|sh|console|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)

# Commands that do not run here, with the reason. Keep it short: a new entry needs one.
SKIPPED = {
    "scripts/setup": "installs packages with pip; CI runs it before this suite",
    "scripts/setup models": "installs PyTorch with pip; CI runs it before this suite",
    "scripts/test": "runs this very suite (and ruff, mypy)",
    "scripts/demo": "runs scripts/setup (pip), then `convmem demo`, which quickstart.md shows "
    "and this test runs; test_cli runs the demo end to end",
    # MCP servers answer their client on stdin/stdout until it hangs up.
    **dict.fromkeys(
        [
            "convmem mcp --store ~/memory.db --tenant alice",
            "convmem mcp --http 8765 --store ~/memory.db",
        ],
        "serves an MCP client until it disconnects; tests/test_mcp.py drives it with the SDK",
    ),
    # Database servers: .ci/run installs them (apt, a Citus build) and scripts/test starts
    # them before this suite, whose conformance cases then run against them.
    **dict.fromkeys(
        [
            "scripts/postgres install",
            "scripts/postgres start",
            "scripts/citus install",
            "scripts/citus start",
            "scripts/citus stop",
            "scripts/citus restart worker1",
        ],
        "installs Debian packages or starts/stops the shared database servers; .ci/run and "
        "scripts/test run them",
    ),
}
# Commands that serve until stopped: (ready when) a line on stderr, or /healthz answers.
LONG_RUNNING = ("serve", "worker")
# Placeholders in documented commands and how to fill them from the workspace's store.
PLACEHOLDERS = ("note_...",)


@dataclass(frozen=True)
class Command:
    document: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: {self.text}"


def documented_commands(path: Path) -> list[Command]:
    """The commands of one document, in order (continued lines joined, comments kept)."""
    text = path.read_text(encoding="utf-8")
    commands = []
    for block in BLOCK.finditer(text):
        first_line = text[: block.start(2)].count("\n") + 1
        pending = ""
        for offset, raw in enumerate(block.group(2).splitlines()):
            line = raw.strip()
            line = line.removeprefix("$ ")
            if pending:
                line, pending = pending + " " + line, ""
            if line.endswith("\\"):
                pending = line[:-1].strip()
                continue
            if line.startswith(("convmem", "scripts/")):
                commands.append(Command(path.name, first_line + offset, line))
    return commands


def _words(command: str) -> list[str]:
    return [os.path.expandvars(word) for word in shlex.split(command, comments=True)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the files the documents refer to, as a reader would have them."""
    sample = (resources.files("convmem") / "data" / "sample_zh.jsonl").read_text("utf-8")
    passport = [
        {"conversation_id": "conv_abc", "turn_id": turn, "role": role, "text": text}
        for turn, role, text in (
            (3, "user", "I need to renew my passport before the Tokyo trip."),
            (18, "user", "我护照是 2025-02-18 过期。"),
            (19, "assistant", "了解，您的护照将于2025年2月18日过期。"),
        )
    ]
    turns = sample + "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in passport)
    for name in ("turns.jsonl", "conversation.jsonl", "对话.jsonl"):
        (tmp_path / name).write_text(turns, encoding="utf-8")
    locomo = {
        "sample_id": "conv_locomo",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "The deadline is Friday."},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "I will send it Thursday."},
            ],
        },
    }
    (tmp_path / "conversation.json").write_text(json.dumps([locomo]), encoding="utf-8")
    (tmp_path / "policy.json").write_text('{"keep_threshold": 0.7}', encoding="utf-8")
    with resources.as_file(resources.files("convmem") / "data" / "story_demo") as demo:
        shutil.copytree(demo, tmp_path / "path" / "to" / "project")
        shutil.copy(demo / "scene_plan.json", tmp_path / "plan.json")
        shutil.copy(demo / "characters.json", tmp_path / "characters.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMEM_STORE", str(tmp_path / "store.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no cached model: hashing by default
    for name in ("CONVMEM_EMBEDDER", "CONVMEM_TENANT", "CONVMEM_CONFIG", "CONVMEM_MARKER"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _fill_placeholders(words: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    if "note_..." not in words:
        return words
    assert main(["notes", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)
    assert notes, "the workspace's turns made no note to confirm"
    return [notes[0]["note_id"] if word == "note_..." else word for word in words]


def _start(words: list[str]) -> subprocess.Popen[str]:
    """Start a long-running command as its own process, on a free port when it serves."""
    if "serve" in words:
        if "--port" in words:
            words[words.index("--port") + 1] = str(_free_port())
        else:
            words += ["--port", str(_free_port())]
    return subprocess.Popen(
        [sys.executable, "-m", "convmem", *words[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(process: subprocess.Popen[str], words: list[str], deadline: float) -> None:
    port = words[words.index("--port") + 1] if "--port" in words else None
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        if port is None and process.stderr is not None:
            # a worker says so once its store is open and Ctrl-C is handled (a fixed wait
            # sent Ctrl-C into a slow start on a busy machine: KeyboardInterrupt, exit -2)
            if "worker running" in process.stderr.readline():
                return
            continue
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{words} did not become ready")


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        # closed whatever happened: a pipe left open fails a later test with a
        # ResourceWarning when it is collected
        stderr = process.stderr.read() if process.stderr else ""
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe:
                pipe.close()
    return code, stderr


def _run_line(command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    """Run one documented line: `a && b` in turn, `a & b` side by side."""
    background: list[tuple[subprocess.Popen[str], list[str]]] = []
    try:
        for part in re.split(r"\s&&\s", command.text):
            pieces = re.split(r"\s&(?!&)\s", part)
            for piece in pieces:
                words = _fill_placeholders(_words(piece), capsys)
                if len(words) > 1 and (set(words) & set(LONG_RUNNING)):
                    process = _start(words)
                    background.append((process, words))
                    continue
                assert words[0] == "convmem", f"{command}: only convmem runs in-process"
                code = main(words[1:])
                _, err = capsys.readouterr()
                assert code == 0, f"{command} exited {code}: {err}"
        deadline = time.monotonic() + 60
        for process, words in background:
            _wait_ready(process, words, deadline)
    finally:
        for process, words in background:
            code, err = _stop(process)
            assert code == 0, f"{command}: {words} exited {code} after Ctrl-C: {err}"


def test_documents_show_commands() -> None:
    names = {command.text.split()[1] for d in DOCUMENTS for command in documented_commands(d)}
    assert {"ingest", "search", "delete", "serve", "keys", "story", "scene"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_documented_command_runs(
    document: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = documented_commands(document)
    for command in commands:
        if command.text.split("#")[0].strip() in SKIPPED:
            continue
        _run_line(command, capsys)


def test_skip_table_names_only_documented_commands() -> None:
    shown = {c.text.split("#")[0].strip() for d in DOCUMENTS for c in documented_commands(d)}
    assert set(SKIPPED) <= shown, f"stale SKIPPED entries: {set(SKIPPED) - shown}"
