"""The scene memory context chain (seed 003): plan, retrieve, assemble, write JSON.

Runs on its own: give it the scene plan, the characters, the project and the point in the
story. Everything it returns comes from *before* the scene: chunks earlier in the story,
entity states strictly before the scene, the timeline up to it. Each part degrades on its
own (decision 4): a failing search leaves memories empty (or lexical only when just the
embedder failed), a failing database leaves states and timeline empty, a failed JSON
write logs a warning; ``degraded`` names what happened and metrics count it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from convmem.errors import EmbedderError, InvalidInputError
from convmem.ids import check_whole
from convmem.story.memory import StoryHost, StoryMemory, check_index
from convmem.story.models import (
    MAX_CHAPTER,
    CharactersConfig,
    EntityStateSnapshot,
    SceneMemoryContext,
    ScenePlan,
    StoryMemoryChunk,
)
from convmem.story.planner import RuleScenePlanner, SceneNeeds, ScenePlanner

__all__ = ["build_scene_memory_context"]

logger = logging.getLogger(__name__)
_Model = TypeVar("_Model", bound=BaseModel)


def build_scene_memory_context(
    scene_plan: ScenePlan | dict[str, Any],
    characters: CharactersConfig | dict[str, Any],
    project_id: str,
    chapter_index: int,
    scene_index: int,
    *,
    memory: StoryHost,
    output_path: str | Path | None = None,
    planner: ScenePlanner | None = None,
    top_k: int = 10,
    timeline_window: int = 2,
) -> SceneMemoryContext:
    """Build (and optionally write as JSON) the memory context for one scene.

    Raises:
        InvalidInputError: a plan, cast or index no story read takes, naming the field
            (past :data:`~convmem.story.models.MAX_CHAPTER` the context came back empty,
            with only a ``degraded`` note).
    """
    scene = _parsed(ScenePlan, scene_plan, "scene_plan")
    cast = _parsed(CharactersConfig, characters, "characters")
    chapter_index = check_index(chapter_index, "chapter_index")
    scene_index = check_index(scene_index, "scene_index")
    # a caller's mistakes are errors, not degraded parts (those are the store's failures)
    top_k = check_whole(top_k, "top_k", 1, 1000)
    timeline_window = check_whole(timeline_window, "timeline_window", 0, MAX_CHAPTER)
    story = memory.story(project_id)
    degraded: list[str] = []
    default = RuleScenePlanner()
    try:
        needs = (planner or default).plan(scene, cast)
        if not isinstance(needs, SceneNeeds):
            raise TypeError(f"the planner returned {type(needs).__name__}, not SceneNeeds")
    except Exception as exc:  # an LLM planner failing must not stop the chain
        logger.warning("scene planner failed, using the rule planner: %s", exc)
        degraded.append(f"planner: {type(exc).__name__}; used the rule planner")
        needs = default.plan(scene, cast)
    point = (chapter_index, scene_index)
    memories = _relevant_memories(story, needs, point, top_k, degraded)
    states = _entity_states(story, needs, point, degraded)
    timeline = _timeline(story, needs, point, timeline_window, degraded)
    context = SceneMemoryContext(
        project_id=project_id,
        chapter_index=chapter_index,
        scene_index=scene_index,
        entity_states=states,
        relevant_memories=memories,
        timeline_context=timeline,
        retrieval_timestamp=datetime.now(UTC),
        queries=needs.queries,
        degraded=degraded,
    )
    if output_path is not None:
        try:
            _write_json(Path(output_path), context)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            logger.warning("could not write the scene context to %s: %s", output_path, exc)
            context = context.model_copy(update={"degraded": [*context.degraded, f"output: {exc}"]})
    if context.degraded:
        memory.count_degraded(len(context.degraded))
    return context


def _parsed(model: type[_Model], value: _Model | dict[str, Any], name: str) -> _Model:
    """``value`` as ``model``, or InvalidInputError naming the first bad field."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join([name, *(str(part) for part in error["loc"])])
        raise InvalidInputError(f"{field}: {error['msg']}", field=field) from None


def _relevant_memories(
    story: StoryMemory, needs: SceneNeeds, point: tuple[int, int], top_k: int, degraded: list[str]
) -> list[StoryMemoryChunk]:
    """Story chunks before the scene; lexical only when the embedder fails, empty when
    the search fails (each degradation noted)."""
    try:
        return _memories(story, needs, point, top_k)
    except EmbedderError as exc:
        logger.warning("story search could not embed queries, searching lexically: %s", exc)
        degraded.append(f"relevant_memories: embedder failed ({exc}); lexical search only")
        try:
            return _memories(story, needs, point, top_k, lexical_only=True)
        except Exception as inner:
            degraded.append(f"relevant_memories: {type(inner).__name__}; left empty")
            return []
    except Exception as exc:
        logger.warning("story memory search failed: %s", exc)
        degraded.append(f"relevant_memories: {type(exc).__name__}: {exc}; left empty")
        return []


def _entity_states(
    story: StoryMemory, needs: SceneNeeds, point: tuple[int, int], degraded: list[str]
) -> list[EntityStateSnapshot]:
    """Each needed entity's latest state strictly before the scene (empty on failure)."""
    states: list[EntityStateSnapshot] = []
    try:
        for entity_id in needs.entities:
            state = story.entity_state(entity_id, *point, inclusive=False)
            if state is not None:
                states.append(state)
    except Exception as exc:
        logger.warning("entity state lookup failed: %s", exc)
        degraded.append(f"entity_states: {type(exc).__name__}: {exc}; left empty")
        return []
    return states


def _timeline(
    story: StoryMemory, needs: SceneNeeds, point: tuple[int, int], window: int, degraded: list[str]
) -> dict[str, Any] | None:
    """The state changes of the last ``window`` chapters before the scene (None on failure)."""
    chapter_index = point[0]
    try:
        wanted = set(needs.entities)
        events = [
            {
                "entity_id": snap.entity_id,
                "entity_type": snap.entity_type,
                "chapter_index": snap.chapter_index,
                "scene_index": snap.scene_index,
                "version": snap.version,
                "state": snap.state,
            }
            for snap in story.timeline(chapter_index, window)
            if (snap.chapter_index, snap.scene_index) < point
            and (not wanted or snap.entity_id in wanted)
        ]
    except Exception as exc:
        logger.warning("timeline lookup failed: %s", exc)
        degraded.append(f"timeline_context: {type(exc).__name__}: {exc}; left empty")
        return None
    return {
        "window": [max(0, chapter_index - window), chapter_index],
        "events": events,
        "scene_events": needs.events,
    }


def _memories(
    story: Any,
    needs: SceneNeeds,
    before: tuple[int, int],
    top_k: int,
    *,
    lexical_only: bool = False,
) -> list[StoryMemoryChunk]:
    """Each query's hits, merged by best rank (reciprocal rank), deduplicated by id."""
    scores: dict[str, float] = {}
    chunks: dict[str, StoryMemoryChunk] = {}
    for query in needs.queries:
        for rank, chunk in enumerate(
            story.search(query, top_k=top_k, before=before, lexical_only=lexical_only)
        ):
            assert chunk.chunk_id is not None
            chunks[chunk.chunk_id] = chunk
            scores[chunk.chunk_id] = scores.get(chunk.chunk_id, 0.0) + 1.0 / (60 + rank)
    best = sorted(scores, key=lambda chunk_id: (-scores[chunk_id], chunk_id))[:top_k]
    return [chunks[chunk_id] for chunk_id in best]


def _write_json(path: Path, context: SceneMemoryContext) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(json.dumps(context.model_dump(mode="json"), ensure_ascii=False, indent=2))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
