"""Load a story project from files.

A project folder holds ``characters.json`` (a ``CharactersConfig``), ``chapters/*.md``
(one file per chapter; the digits in the name are the chapter index; ``## `` headings
start scenes, numbered in order from 1 unless the heading says ``场景 N`` / ``Scene N``; an
optional first line ``标签：a、b`` or ``tags: a, b`` tags the scene; each paragraph
becomes one chunk) and ``states.jsonl`` (entity state snapshots). Entities of a chunk are
the characters (names and aliases) and known entity ids that it mentions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from convmem.errors import InvalidInputError
from convmem.story.memory import StoryHost
from convmem.story.models import CharactersConfig, EntityStateSnapshot, StoryMemoryChunk
from convmem.text import read_utf8

__all__ = ["load_project", "read_characters"]

SCENE_NUMBER = re.compile(r"(?:场景|scene)\s*(\d+)", re.IGNORECASE)
TAGS = re.compile(r"^(?:标签|tags)\s*[:：]\s*(.+)$", re.IGNORECASE)


def read_characters(folder: Path) -> CharactersConfig:
    path = folder / "characters.json"
    if not path.exists():
        return CharactersConfig()
    return CharactersConfig.model_validate_json(_text(path))


def _text(path: Path) -> str:
    """A project file's text, or an error naming it."""
    return read_utf8(path, field=path.name)


def _states(folder: Path) -> list[dict[str, Any]]:
    path = folder / "states.jsonl"
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(
                    f"{path}:{number} is not JSON: {exc.msg}", field=f"states.jsonl:{number}"
                ) from None
    return rows


def _chapter(path: Path) -> int:
    """A chapter file's number: the first in its name (chapter_01_v2.md is chapter 1)."""
    digits = re.findall(r"\d+", path.stem)
    if not digits:
        raise InvalidInputError(
            f"{path.name}: a chapter file name needs its number, e.g. chapter_03.md",
            field=path.name,
        )
    return int(digits[0])


def _chunks(
    path: Path, project_id: str, names: dict[str, str], known: set[str]
) -> list[StoryMemoryChunk]:
    chapter = _chapter(path)
    chunks: list[StoryMemoryChunk] = []
    scene: int | None = None  # text before the first scene heading is scene 0
    tags: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        text = "\n".join(paragraph).strip()
        paragraph.clear()
        if not text:
            return
        entities = [entity for alias, entity in names.items() if alias in text]
        entities += [entity for entity in known if entity in text]
        index = 0 if scene is None else scene
        try:
            chunk = StoryMemoryChunk(
                project_id=project_id,
                chapter_index=chapter,
                scene_index=index,
                content_type="scene",
                content=text,
                entities=list(dict.fromkeys(entities)),
                tags=tags,
            )
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise InvalidInputError(
                f"{path.name}, chapter {chapter} scene {index}: {where}: {error['msg']}; fix "
                "the chapter file",
                field=path.name,
            ) from None
        chunks.append(chunk)

    for line in _text(path).splitlines():
        stripped = line.strip()
        if stripped.startswith("## "):
            flush()
            match = SCENE_NUMBER.search(stripped)
            scene = int(match.group(1)) if match else (scene or 0) + 1
            tags = []
        elif stripped.startswith("# "):
            flush()
        elif (match := TAGS.match(stripped)) and not paragraph:
            tags = [t.strip() for t in re.split(r"[、,，]", match.group(1)) if t.strip()]
        elif not stripped:
            flush()
        else:
            paragraph.append(stripped)
    flush()
    return chunks


def load_project(memory: StoryHost, project_id: str, folder: str | Path) -> dict[str, int]:
    """Load (or reload) a project folder. A reload replaces the scenes of the chapters it
    reads: a paragraph edited or removed since leaves no chunk of its old text (ids are
    hashes of the text, so unchanged ones are not duplicated). States are versioned
    snapshots: a row removed from ``states.jsonl`` stays until ``delete_entity``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidInputError(f"{folder} is not a folder", field="folder")
    characters = read_characters(folder)
    names: dict[str, str] = {}
    for profile in characters.characters:
        for alias in (profile.name, *profile.aliases):
            names[alias] = profile.id
    states = _states(folder)
    story = memory.story(project_id)
    # every state checked before anything is stored: a bad row stores nothing
    snapshots = story.parse(EntityStateSnapshot, states, "states") if states else []
    known = {snapshot.entity_id for snapshot in snapshots}
    chunks: list[StoryMemoryChunk] = []
    chapter_files = sorted((folder / "chapters").glob("*.md"))
    for path in chapter_files:
        chunks.extend(_chunks(path, project_id, names, known))
    ids = story.add_memory_chunks(chunks) if chunks else []
    # a reload replaces the chapters it read: a paragraph edited or removed since leaves
    # no chunk of its old text behind (ids are hashes of the text)
    read = {_chapter(path) for path in chapter_files}
    stale = set(story.chunk_ids(chapters=read, content_type="scene")) - set(ids)
    if stale:
        story.delete_chunks(sorted(stale))
    if snapshots:
        story.add_entity_state(*snapshots)
    return {"chapters": len(chapter_files), "chunks": len(chunks), "states": len(states)}
