"""The scripts in examples/ run as documented and do what they say."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import served

EXAMPLES = Path(__file__).parents[1] / "examples"


def _load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLES / name), run_name=f"example_{name}")


def test_agent_chat_recalls_what_the_user_said_earlier(tmp_path: Path) -> None:
    example = _load("agent_chat.py")
    from convmem import HashingEmbedder, Memory

    with Memory.open(str(tmp_path / "a.db"), embedder=HashingEmbedder(), workers=0) as memory:
        replies = example["chat"](memory, "c", example["SCRIPT"])
        assert "2025-02-18" in replies[-1], replies[-1]
        assert memory.stats()["turns"] == 2 * len(example["SCRIPT"])


def test_agent_chat_resumes_a_conversation_after_a_delete(tmp_path: Path) -> None:
    """The next turn id follows the highest ever stored: a deleted turn's id is retired."""
    example = _load("agent_chat.py")
    from convmem import HashingEmbedder, Memory

    with Memory.open(str(tmp_path / "a.db"), embedder=HashingEmbedder(), workers=0) as memory:
        example["chat"](memory, "c", example["SCRIPT"][:2])  # turns 0-3
        memory.delete("c", turn_range=(0, 1))
        example["chat"](memory, "c", example["SCRIPT"][2:3])  # two live turns: not id 2
        turn_ids = [turn.turn_id for turn in memory.recent_turns("c")]
        assert turn_ids == [2, 3, 4, 5]


def test_agent_chat_runs_as_a_script() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_chat.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "8 turns remembered" in result.stdout


def test_story_scene_uses_only_what_came_before(tmp_path: Path) -> None:
    example = _load("story_scene.py")
    output = tmp_path / "scene.json"
    context = example["build"](str(tmp_path / "s.db"), str(output))
    assert output.is_file() and context.entity_states
    assert all((state.chapter_index, state.scene_index) < (3, 1) for state in context.entity_states)
    assert all((hit.chapter_index, hit.scene_index) < (3, 1) for hit in context.relevant_memories)


@pytest.mark.slow
def test_http_client_writes_searches_and_deletes(tmp_path: Path) -> None:
    options = ("--no-auth", "--store", str(tmp_path / "h.db"), "--embedder", "hashing")
    with served(*options) as base_url:
        hits = _load("http_client.py")["run"](base_url)
        assert hits and "2025-02-18" in str(hits[0]["text"])
