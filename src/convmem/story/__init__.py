"""Story memory for novel-generation pipelines (seed 003).

Per project: story memory chunks (chapter, scene, content type, entities, tags) searched
with the same hybrid ranking as dialogue, entity state snapshots, a timeline window, the
seed's three tools, and the chain that builds a ``SceneMemoryContext`` for one scene.
"""

from convmem.story.chain import build_scene_memory_context
from convmem.story.loader import load_project
from convmem.story.memory import (
    StoryHost,
    StoryMemory,
    get_entity_state_tool,
    get_recent_timeline_tool,
    search_story_memory_tool,
    story_position,
)
from convmem.story.models import (
    CONTENT_TYPES,
    CharacterProfile,
    CharactersConfig,
    EntityStateSnapshot,
    SceneMemoryContext,
    ScenePlan,
    StoryMemoryChunk,
)
from convmem.story.planner import LLMScenePlanner, PlannerError, RuleScenePlanner, SceneNeeds

__all__ = [
    "CONTENT_TYPES",
    "CharacterProfile",
    "CharactersConfig",
    "EntityStateSnapshot",
    "LLMScenePlanner",
    "PlannerError",
    "RuleScenePlanner",
    "SceneMemoryContext",
    "SceneNeeds",
    "ScenePlan",
    "StoryHost",
    "StoryMemory",
    "StoryMemoryChunk",
    "build_scene_memory_context",
    "get_entity_state_tool",
    "get_recent_timeline_tool",
    "load_project",
    "search_story_memory_tool",
    "story_position",
]
