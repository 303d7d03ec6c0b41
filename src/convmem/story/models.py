"""Story memory contracts (seed 003), pydantic v2, each with a realistic JSON example.

Field choices for the plan and the characters (the seed leaves them open):

- ``ScenePlan``: where the scene sits (``chapter_index``, ``scene_index``, both from 1),
  ``title``, ``summary``, ``location``, ``story_time`` (in-world time, free text),
  ``characters`` (names on stage), ``purpose`` (what the scene must achieve),
  ``key_actions`` (beats that must happen), ``mood``.
- ``CharactersConfig``: ``characters``, each a ``CharacterProfile`` with ``name``, an
  optional stable ``entity_id`` (defaults to the name; the id entity states are stored
  under), ``role`` (protagonist, antagonist, supporting...), ``aliases`` and a
  ``description``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The largest chapter index, and scene index of an entity state.
MAX_CHAPTER = 1_000_000
#: A story chunk's position is ``chapter * POSITION_SCALE + scene`` (its ``turn_range`` in
#: the story space), so its scene index stays below the scale: scene 100000 of chapter 1
#: would sit where scene 0 of chapter 2 does.
POSITION_SCALE = 100_000
MAX_SCENE = POSITION_SCALE - 1

__all__ = [
    "CONTENT_TYPES",
    "MAX_CHAPTER",
    "MAX_SCENE",
    "POSITION_SCALE",
    "CharacterProfile",
    "CharactersConfig",
    "EntityStateSnapshot",
    "SceneMemoryContext",
    "ScenePlan",
    "StoryMemoryChunk",
]

CONTENT_TYPES = ("scene", "summary", "dialogue", "setting", "event", "note")


class ScenePlan(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "chapter_index": 3,
                    "scene_index": 1,
                    "title": "雨夜码头",
                    "summary": "林晚在码头与沈舟对质，逼问父亲失踪那晚的真相。",
                    "location": "旧港码头",
                    "story_time": "第三天深夜",
                    "characters": ["林晚", "沈舟"],
                    "purpose": "揭示沈舟与父亲失踪的关系",
                    "key_actions": ["林晚拿出铜钥匙", "沈舟承认那晚见过父亲"],
                    "mood": "紧张",
                }
            ]
        },
    )

    # the range every story read takes (an entity state's scene index too): past it the
    # context came back empty, with only a `degraded` note
    chapter_index: int = Field(ge=0, le=MAX_CHAPTER)
    scene_index: int = Field(ge=0, le=MAX_CHAPTER)
    title: str = Field(default="", max_length=200)
    summary: str = Field(default="", max_length=4000)
    location: str | None = Field(default=None, max_length=200)
    story_time: str | None = Field(default=None, max_length=200)
    # each a name or entity id on stage: at most as long as an entity id (a longer one
    # could never match, and its lookup failing emptied every state)
    characters: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=100
    )
    purpose: str = Field(default="", max_length=2000)
    key_actions: list[str] = Field(default_factory=list, max_length=100)
    mood: str | None = Field(default=None, max_length=100)


class CharacterProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    entity_id: str | None = Field(default=None, max_length=200)
    role: str = Field(default="supporting", max_length=100)
    aliases: list[str] = Field(default_factory=list, max_length=20)
    description: str = Field(default="", max_length=2000)

    @property
    def id(self) -> str:
        return self.entity_id or self.name


class CharactersConfig(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "characters": [
                        {
                            "name": "林晚",
                            "role": "protagonist",
                            "aliases": ["阿晚"],
                            "description": "港城报社记者，追查父亲失踪案。",
                        },
                        {
                            "name": "沈舟",
                            "role": "supporting",
                            "description": "码头货运公司的账房先生，沉默寡言。",
                        },
                    ]
                }
            ]
        },
    )

    characters: list[CharacterProfile] = Field(default_factory=list, max_length=500)

    def find(self, name: str) -> CharacterProfile | None:
        for profile in self.characters:
            if name == profile.name or name in profile.aliases or name == profile.entity_id:
                return profile
        return None


class EntityStateSnapshot(BaseModel):
    """An entity's state as of a point in the story (``version`` orders edits of one point)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "project_id": "harbor_novel",
                    "entity_id": "林晚",
                    "entity_type": "character",
                    "chapter_index": 2,
                    "scene_index": 3,
                    "version": 1,
                    "state": {
                        "location": "旧港码头",
                        "holding": ["铜钥匙"],
                        "knows": "父亲失踪前去过码头仓库",
                        "mood": "焦虑",
                    },
                }
            ]
        },
    )

    project_id: str = Field(min_length=1, max_length=200)
    entity_id: str = Field(min_length=1, max_length=200)
    entity_type: str = Field(default="character", max_length=50)
    chapter_index: int = Field(ge=0, le=MAX_CHAPTER)
    scene_index: int = Field(ge=0, le=MAX_CHAPTER)
    version: int = Field(default=1, ge=1)
    state: dict[str, Any] = Field(default_factory=dict)


class StoryMemoryChunk(BaseModel):
    """A retrievable piece of the story so far; scores stay inside the search."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "chunk_id": "story_5f0c3a9e1b7d4c2a8e6f0b1d3c5a7e9f",
                    "project_id": "harbor_novel",
                    "chapter_index": 2,
                    "scene_index": 3,
                    "content_type": "scene",
                    "content": "林晚在父亲的旧外套里摸到一把铜钥匙，钥匙上刻着“七号仓”。",
                    "entities": ["林晚"],
                    "tags": ["线索", "铜钥匙"],
                }
            ]
        },
    )

    chunk_id: str | None = Field(default=None, max_length=200)
    project_id: str = Field(min_length=1, max_length=200)
    chapter_index: int = Field(ge=0, le=MAX_CHAPTER)
    scene_index: int = Field(
        ge=0,
        le=MAX_SCENE,
        description=f"0..{MAX_SCENE}: a chunk's story position is "
        f"chapter_index * {POSITION_SCALE} + scene_index",
    )
    content_type: str = Field(default="scene", max_length=50)
    content: str = Field(min_length=1, max_length=32000)
    entities: list[str] = Field(default_factory=list, max_length=100)
    tags: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is empty")
        return value


class SceneMemoryContext(BaseModel):
    """What the scene writer gets: states, memories and timeline from before the scene.

    ``degraded`` names the parts that failed and were left empty (or lexical only), per
    seed 003 decision 4; ``queries`` are the retrieval queries the planner produced.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "project_id": "harbor_novel",
                    "chapter_index": 3,
                    "scene_index": 1,
                    "entity_states": [EntityStateSnapshot.model_json_schema()["examples"][0]],
                    "relevant_memories": [StoryMemoryChunk.model_json_schema()["examples"][0]],
                    "timeline_context": {
                        "window": [1, 3],
                        "events": [
                            {
                                "entity_id": "林晚",
                                "chapter_index": 2,
                                "scene_index": 3,
                                "state": {"location": "旧港码头"},
                            }
                        ],
                    },
                    "retrieval_timestamp": "2026-03-01T10:00:00+00:00",
                    "queries": ["林晚 沈舟 旧港码头", "铜钥匙"],
                    "degraded": [],
                }
            ]
        },
    )

    project_id: str
    chapter_index: int
    scene_index: int
    entity_states: list[EntityStateSnapshot] = Field(default_factory=list)
    relevant_memories: list[StoryMemoryChunk] = Field(default_factory=list)
    timeline_context: dict[str, Any] | None = None
    retrieval_timestamp: datetime
    queries: list[str] = Field(default_factory=list)
    degraded: list[str] = Field(default_factory=list)
