"""Story memory on the facade (seed 003): a project's view, its chunk space and entity
states. ``convmem.story`` reaches the store only through these public methods."""

from __future__ import annotations

from typing import Any, Self

from convmem.errors import InvalidInputError
from convmem.facade.base import FacadeBase
from convmem.ids import check_flag, check_whole
from convmem.story.memory import StoryMemory, check_entity, check_index, check_project
from convmem.story.models import EntityStateSnapshot

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
        self._engine.story_degraded.inc(check_whole(parts, "parts"))

    def put_entity_states(self, project_id: str, rows: list[dict[str, Any]]) -> int:
        """Store entity state snapshots of a project (same entity, point, version overwrite).

        Raises:
            InvalidInputError: a row is no valid snapshot of this project (naming
                ``rows[i].field``); nothing is stored.
        """
        snapshots = self.story(project_id).parse(EntityStateSnapshot, rows, "rows")
        checked = [snapshot.model_dump() for snapshot in snapshots]
        return self._engine.store.put_entity_states(self._tenant, checked)

    def delete_entity_states(self, project_id: str, entity_id: str) -> int:
        """Remove every snapshot of one entity of a project from the store (no tombstone:
        gone at once, from every read); how many were removed."""
        return self._engine.store.delete_entity_states(
            self._tenant, check_project(project_id), check_entity(entity_id)
        )

    def latest_entity_state(
        self, project_id: str, entity_id: str, point: tuple[int, int], *, inclusive: bool = True
    ) -> dict[str, Any] | None:
        """The newest snapshot of an entity at (``inclusive``) or before a story point
        ``(chapter_index, scene_index)``, or None."""
        chapter, scene = _point(point, "point")
        return self._engine.store.latest_entity_state(
            self._tenant,
            check_project(project_id),
            check_entity(entity_id),
            chapter,
            scene,
            inclusive=check_flag(inclusive, "inclusive"),
        )

    def entity_timeline(
        self, project_id: str, chapters: tuple[int, int], entity_id: str | None = None
    ) -> list[dict[str, Any]]:
        """A project's snapshots of chapters ``first..last`` (inclusive), in story order."""
        first, last = _point(chapters, "chapters")
        return self._engine.store.entity_timeline(
            self._tenant,
            check_project(project_id),
            first,
            last,
            None if entity_id is None else check_entity(entity_id),
        )


def _point(value: Any, field: str) -> tuple[int, int]:
    """Two story indices: ``(chapter_index, scene_index)`` or ``(first, last)`` chapters."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidInputError(f"{field} must be two whole numbers, got {value!r}", field=field)
    return check_index(value[0], f"{field}[0]"), check_index(value[1], f"{field}[1]")
