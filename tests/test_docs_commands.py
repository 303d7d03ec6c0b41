"""Every shell command shown in README.md and docs/*.md runs and exits 0.

Commands are the lines starting with ``convmem`` or ``scripts/`` in ```bash, ```sh,
```console and ```shell blocks. Each document runs its commands in order, in a fresh
workspace: a temporary folder holding the files the documents assume the reader has
(``turns.jsonl``, ``policy.json``, a story project...), with ``CONVMEM_STORE`` and
``XDG_DATA_HOME`` pointing into it. ``convmem serve`` and ``convmem worker`` run as real
processes on a free loopback port until they answer, then stop on Ctrl-C. The few
commands that cannot run here are in SKIPPED, each with its reason.

The ```python blocks that are whole programs (they start with their imports) run too, each
in a fresh workspace of its own; the blocks that go on from an earlier one start without
imports and are read, not run. Outputs a document shows are checked where a reader would
compare them (the chunk id formula, the chunk text, the scene's memories).
"""

from __future__ import annotations

import hashlib
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
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

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


# Blocks that start with their imports yet go on from the document around them.
PYTHON_FRAGMENTS = {
    ("retrieval.md", "from convmem.retrieve import build_pipeline"): "uses the `memory` of "
    "the document's earlier blocks and the pipeline.yaml shown after it"
}


def python_programs() -> list[tuple[str, str]]:
    """The ```python blocks that are whole programs, as (document:line, source)."""
    programs = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for block in PYTHON_BLOCK.finditer(text):
            source = block.group(1)
            if (path.name, source.split("\n")[0]) in PYTHON_FRAGMENTS:
                continue
            if source.startswith(("from ", "import ")):
                line = text[: block.start(1)].count("\n") + 1
                programs.append((f"{path.name}:{line}", source))
    return programs


# Runs a block as a reader pastes it into `python -m asyncio`: top-level await allowed.
_RUN_BLOCK = """
import ast, asyncio, sys
code = compile(sys.stdin.read(), sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("where", "source"), python_programs(), ids=lambda v: v.split("\n")[0])
def test_every_python_program_in_the_documents_runs(
    where: str, source: str, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A block that uses a name it never defines (story.md used `plan`) fails here."""
    if "convmem.integrations" in source:
        for module in ("langchain_core", "langgraph", "llama_index.core"):
            pytest.importorskip(module)
    if "convmem.client" in source:  # the HTTP client: a real server, a real key
        assert main(["keys", "create", "--tenant", "acme", "--json"]) == 0
        key = json.loads(capsys.readouterr().out)["key"]
        source = source.replace('"cm_..."', repr(key))
        from helpers import served

        with served("--embedder", "hashing") as base_url:
            source = source.replace('"http://127.0.0.1:8077"', repr(base_url))
            result = _run_python(where, source)
    else:
        result = _run_python(where, source)
    assert result.returncode == 0, f"{where}: {result.stderr}"


def _run_python(where: str, source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN_BLOCK, where],
        input=source,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_python_programs_are_found() -> None:
    found = {where.split(":")[0] for where, _ in python_programs()}
    assert {"README.md", "quickstart.md", "story.md", "seed-api.md", "client.md"} <= found
    firsts = {
        (d.name, b.group(1).split("\n")[0])
        for d in DOCUMENTS
        for b in PYTHON_BLOCK.finditer(d.read_text(encoding="utf-8"))
    }
    assert set(PYTHON_FRAGMENTS) <= firsts, "stale PYTHON_FRAGMENTS entries"


def test_storage_chunk_id_formula_gives_the_ids_convmem_makes() -> None:
    """storage.md's formula, computed as written, gives the id the store uses."""
    from convmem.ingest.ids import chunk_id

    text = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    example = re.search(r"`(\[\"conv_abc\",18,18,1\])` gives\s+`(chk_[0-9a-f]{32})`", text)
    assert example, "storage.md shows no worked chunk id"
    fields = json.loads(example.group(1))
    payload = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert "chk_" + hashlib.sha256(payload).hexdigest()[:32] == example.group(2)
    assert chunk_id(*fields) == example.group(2)


@pytest.mark.slow
def test_quickstart_zh_shows_the_chunk_its_conversation_makes(workspace: Path) -> None:
    """The chunk text quickstart.zh.md shows is what its own first block stores."""
    text = (ROOT / "docs" / "quickstart.zh.md").read_text(encoding="utf-8")
    shown = re.search(r"^```text\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    program = next(s for w, s in python_programs() if w.startswith("quickstart.zh.md"))
    assert shown and _run_python("quickstart.zh.md", program).returncode == 0
    from convmem import Memory

    with Memory.open("sqlite:///memory.db", workers=0) as memory:
        hits = memory.search("护照哪天到期", granularity="chunk")
    assert [hit.text for hit in hits] == [shown.group(1).rstrip("\n")]
    assert [hit.chunk_id for hit in hits] == re.findall(r"上例为 `(chk_[0-9a-f]{32})`", text)


@pytest.mark.slow
def test_readme_names_the_top_memories_of_the_demo_scene(workspace: Path) -> None:
    """README.md: the scene's top memories are 2-1, 2-2 and 1-2, in that order."""
    assert main(["scene", "harbor_novel", "--demo", "-o", "scene.json"]) == 0
    memories = json.loads((workspace / "scene.json").read_text("utf-8"))["relevant_memories"]
    places = [(hit["chapter_index"], hit["scene_index"]) for hit in memories[:3]]
    assert places == [(2, 1), (2, 2), (1, 2)]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "testimony (2-1), 沈舟's denial\n(2-2) and the key's engraving (1-2)" in readme
