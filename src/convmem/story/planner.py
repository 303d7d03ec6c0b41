"""Step 1 and 2 of the scene chain: which entities and events a scene needs, and the queries.

``RuleScenePlanner`` (default, offline): the characters on stage and any character the
plan mentions (by name or alias), the location, the key actions and purpose as events,
and queries from the summary, each key action, the cast at the location and the plan's
Chinese/English keywords. ``LLMScenePlanner`` asks any OpenAI-compatible chat endpoint
for the same three lists and validates them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, Unpack

from convmem.chat import ChatClient, ChatError, ChatOptions
from convmem.errors import ConvmemError
from convmem.story.models import CharactersConfig, ScenePlan
from convmem.text import keywords, words

__all__ = ["LLMScenePlanner", "PlannerError", "RuleScenePlanner", "SceneNeeds", "ScenePlanner"]

MAX_QUERIES = 8


class PlannerError(ConvmemError):
    """The scene planner failed or answered something unusable."""


@dataclass(frozen=True)
class SceneNeeds:
    entities: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)


class ScenePlanner(Protocol):
    name: str

    def plan(self, scene: ScenePlan, characters: CharactersConfig) -> SceneNeeds: ...


def _unique(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        item = item.strip()
        if item and item not in out:
            out.append(item)
    return out


class RuleScenePlanner:
    name = "rules"

    def plan(self, scene: ScenePlan, characters: CharactersConfig) -> SceneNeeds:
        text = " ".join([scene.title, scene.summary, scene.purpose, *scene.key_actions])
        names = list(scene.characters)
        for profile in characters.characters:
            if any(alias and alias in text for alias in (profile.name, *profile.aliases)):
                names.append(profile.name)
        entities = []
        for name in _unique(names):
            found = characters.find(name)
            entities.append(found.id if found else name)
        if scene.location:
            entities.append(scene.location)
        events = _unique([*scene.key_actions, scene.purpose])
        cast = " ".join([*_unique(names)[:3], scene.location or ""])
        topic = " ".join(keywords(words(text), limit=5))
        queries = _unique([scene.summary, *scene.key_actions, cast, topic])[:MAX_QUERIES]
        return SceneNeeds(entities=_unique(entities), events=events, queries=queries)


class LLMScenePlanner:
    """Asks ``POST {base_url}/chat/completions`` for ``{"entities", "events", "queries"}``."""

    def __init__(self, base_url: str, model: str, **client: Unpack[ChatOptions]) -> None:
        self._chat = ChatClient(base_url, model, **client)
        self.model = model
        self.name = f"llm:{model}"

    def plan(self, scene: ScenePlan, characters: CharactersConfig) -> SceneNeeds:
        system = (
            "You prepare memory retrieval for writing one scene of a novel. Think in two "
            "steps: 1) which entities (characters, places, items) and past events the scene "
            "depends on; 2) short search queries (in the story's language) for the story so "
            'far. Answer JSON only: {"entities": [str], "events": [str], "queries": [str]}.'
        )
        user = json.dumps(
            {"scene_plan": scene.model_dump(), "characters": characters.model_dump()},
            ensure_ascii=False,
        )
        try:
            payload: Any = self._chat.json(system, user)
        except ChatError as exc:
            raise PlannerError(f"scene planner endpoint failed: {exc}") from exc
        lists = {}
        for key in ("entities", "events", "queries"):
            value = payload.get(key) if isinstance(payload, dict) else None
            if not isinstance(value, list) or not all(
                isinstance(item, str) and 0 < len(item) <= 500 for item in value
            ):
                raise PlannerError(f"scene planner answer: '{key}' must be a list of strings")
            lists[key] = _unique(value)[:20]
        if not lists["queries"]:
            raise PlannerError("scene planner answer has no queries")
        return SceneNeeds(
            entities=lists["entities"],
            events=lists["events"],
            queries=lists["queries"][:MAX_QUERIES],
        )

    def close(self) -> None:
        self._chat.close()
