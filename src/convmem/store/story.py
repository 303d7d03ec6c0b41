"""Entity state snapshots of story projects (store mixin).

Story memory chunks live in the ``chunks`` table under a tenant space of their own per
project (see ``convmem.story``); entity states are relational and live here.
"""

from __future__ import annotations

import json
from typing import Any

from convmem.store.contract import Backend

__all__ = ["STORY_SCHEMA", "StoryTables"]

STORY_SCHEMA = """
CREATE TABLE IF NOT EXISTS entity_states (
    tenant TEXT NOT NULL,
    project_id TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    chapter_index INTEGER NOT NULL,
    scene_index INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, project_id, entity_id, chapter_index, scene_index, version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entity_states_timeline
    ON entity_states (tenant, project_id, chapter_index, scene_index)
"""

COLUMNS = "project_id, entity_id, entity_type, chapter_index, scene_index, version, state"


def _row(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "project_id": row[0],
        "entity_id": row[1],
        "entity_type": row[2],
        "chapter_index": row[3],
        "scene_index": row[4],
        "version": row[5],
        "state": json.loads(row[6]),
    }


class StoryTables(Backend):
    """Mixin for :class:`~convmem.store.base.SQLStore`."""

    def put_entity_states(self, tenant: str, snapshots: list[dict[str, Any]]) -> int:
        """Insert or overwrite snapshots (same entity, point and version overwrite)."""
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO entity_states (tenant, project_id, entity_id, "
                "entity_type, chapter_index, scene_index, version, state, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (tenant, project_id, entity_id, "
                "chapter_index, scene_index, version) DO UPDATE SET "
                "entity_type=excluded.entity_type, state=excluded.state, "
                "created_at=excluded.created_at",
                [
                    (
                        tenant,
                        s["project_id"],
                        s["entity_id"],
                        s["entity_type"],
                        s["chapter_index"],
                        s["scene_index"],
                        s["version"],
                        json.dumps(s["state"], ensure_ascii=False),
                        self.now(),
                    )
                    for s in snapshots
                ],
            )
        return len(snapshots)

    def delete_entity_states(self, tenant: str, project_id: str, entity_id: str) -> int:
        """Physically remove every snapshot of one entity of a project; how many."""
        with self._write() as conn:
            return int(
                conn.execute(
                    "DELETE FROM entity_states WHERE tenant=? AND project_id=? AND entity_id=?",
                    (tenant, project_id, entity_id),
                ).rowcount
            )

    def latest_entity_state(
        self,
        tenant: str,
        project_id: str,
        entity_id: str,
        chapter_index: int,
        scene_index: int,
        *,
        inclusive: bool = True,
    ) -> dict[str, Any] | None:
        """The newest snapshot at (``inclusive``) or before the point, or None."""
        op = "<=" if inclusive else "<"
        row = (
            self._db()
            .execute(
                f"SELECT {COLUMNS} FROM entity_states WHERE tenant=? AND project_id=? AND "
                f"entity_id=? AND (chapter_index < ? OR (chapter_index = ? AND scene_index {op} ?)) "
                "ORDER BY chapter_index DESC, scene_index DESC, version DESC LIMIT 1",
                (tenant, project_id, entity_id, chapter_index, chapter_index, scene_index),
            )
            .fetchone()
        )
        return _row(row) if row else None

    def entity_timeline(
        self,
        tenant: str,
        project_id: str,
        first_chapter: int,
        last_chapter: int,
        entity_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Snapshots of chapters ``first..last`` in story order."""
        sql = (
            f"SELECT {COLUMNS} FROM entity_states WHERE tenant=? AND project_id=? AND "
            "chapter_index BETWEEN ? AND ?"
        )
        params: list[Any] = [tenant, project_id, first_chapter, last_chapter]
        if entity_id is not None:
            sql += " AND entity_id=?"
            params.append(entity_id)
        sql += f" ORDER BY chapter_index, scene_index, entity_id{self.CODE_POINTS}, version"
        return [_row(row) for row in self._db().execute(sql, params)]
