"""Story memory on the facade (seed 003): a project's view, its chunk space and entity
states. ``convmem.story`` reaches the store only through these public methods."""

from __future__ import annotations

from typing import Any, Self

from convmem.facade.base import FacadeBase
from convmem.story.memory import StoryMemory

__all__ = ["StoryMethods"]


class StoryMethods(FacadeBase):
    def story(self, project_id: str) -> StoryMemory:
        """Story memory of one project in this tenant: chunks, entity states, seed 003 tools."""
        return StoryMemory(self, project_id)  # type: ignore[arg-type]  # the host is a Memory

    def story_space(self, project_id: str) -> Self:
        """The tenant view that holds one project's story chunks (see ``convmem.story``)."""
        return type(self)(self._engine, f"{self._tenant}\x1fstory:{project_id}")

    def count_degraded(self, parts: int) -> None:
        """Record scene-context parts that degraded (seed 003 decision 4) in the metrics."""
        self._engine.story_degraded.inc(parts)

    def put_entity_states(self, project_id: str, rows: list[dict[str, Any]]) -> int:
        """Store entity state snapshots of a project (same entity, point, version overwrite)."""
        return self._engine.store.put_entity_states(self._tenant, rows)

    def latest_entity_state(
        self, project_id: str, entity_id: str, point: tuple[int, int], *, inclusive: bool = True
    ) -> dict[str, Any] | None:
        """The newest snapshot of an entity at (``inclusive``) or before a story point
        ``(chapter_index, scene_index)``, or None."""
        return self._engine.store.latest_entity_state(
            self._tenant, project_id, entity_id, *point, inclusive=inclusive
        )

    def entity_timeline(
        self, project_id: str, chapters: tuple[int, int], entity_id: str | None = None
    ) -> list[dict[str, Any]]:
        """A project's snapshots of chapters ``first..last`` (inclusive), in story order."""
        return self._engine.store.entity_timeline(self._tenant, project_id, *chapters, entity_id)
