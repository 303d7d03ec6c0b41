"""Story memory: chunks and entity states of a project, and scene memory contexts."""

from typing import Annotated

from fastapi import Path

from convmem.server.auth import Caller
from convmem.server.routers._tenant import BODY_ERRORS, tenant_router
from convmem.server.schemas import (
    SceneIn,
    StoryChunksIn,
    StoryChunksOut,
    StoryStatesIn,
    StoryStatesOut,
)
from convmem.story import SceneMemoryContext, build_scene_memory_context

__all__ = ["router"]

router = tenant_router("story")
ProjectId = Annotated[str, Path(min_length=1, max_length=200)]


@router.post("/story/{project_id}/chunks", responses=BODY_ERRORS)
def add_story_chunks(project_id: ProjectId, body: StoryChunksIn, memory: Caller) -> StoryChunksOut:
    """Store story memory chunks of a project (stable ids: re-sending overwrites)."""
    ids = memory.story(project_id).add_memory_chunks(body.chunks)
    return StoryChunksOut(project_id=project_id, chunk_ids=ids)


@router.post("/story/{project_id}/states", responses=BODY_ERRORS)
def add_story_states(project_id: ProjectId, body: StoryStatesIn, memory: Caller) -> StoryStatesOut:
    """Store entity state snapshots of a project."""
    count = memory.story(project_id).add_entity_state(*body.states)
    return StoryStatesOut(project_id=project_id, states=count)


@router.post("/scenes", responses=BODY_ERRORS)
def scene(body: SceneIn, memory: Caller) -> SceneMemoryContext:
    """Build the memory context of one scene (seed 003), from before the scene."""
    plan = body.scene_plan
    return build_scene_memory_context(
        plan,
        body.characters,
        body.project_id,
        body.chapter_index if body.chapter_index is not None else plan.chapter_index,
        body.scene_index if body.scene_index is not None else plan.scene_index,
        memory=memory,
        top_k=body.top_k,
    )
