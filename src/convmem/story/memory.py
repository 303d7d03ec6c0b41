"""Story memory of one project: chunks in the shared store, entity states, the seed's tools.

Story chunks are ordinary chunks in the same store and search, in a tenant space of their
own per project (``<tenant>\\x1fstory:<project_id>``: control characters are not allowed
in tenant names, so no caller can name it), which keeps projects apart and story text out
of dialogue search. In that space ``turn_range`` holds the chunk's story position
(``chapter * 100000 + scene``) so a search can stop before a scene, ``participants`` its
entities and ``intent_tag`` its content type.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from convmem.errors import EmbedderError, InvalidInputError
from convmem.ids import check_list
from convmem.models import ChunkMetadata, ChunkRecord, check_query_text, first_problem, text_problem
from convmem.retrieve import Searcher, SearchRequest
from convmem.store.filters import MAX_LIST
from convmem.story.models import MAX_CHAPTER, POSITION_SCALE, EntityStateSnapshot, StoryMemoryChunk

#: Chunks read per page when listing a project's chunks.
PAGE = 1000

__all__ = [
    "POSITION_SCALE",
    "StoryHost",
    "StoryMemory",
    "check_entity",
    "check_index",
    "check_project",
    "get_entity_state_tool",
    "get_recent_timeline_tool",
    "search_story_memory_tool",
    "story_position",
]

_Item = TypeVar("_Item", StoryMemoryChunk, EntityStateSnapshot)


class _Upserted(Protocol):
    @property
    def errors(self) -> list[str]: ...


class _Deleted(Protocol):
    @property
    def deleted(self) -> int: ...
    @property
    def errors(self) -> list[str]: ...


class StoryHost(Protocol):
    """The public methods of a tenant's memory that story memory uses (``convmem.Memory``
    is one); story memory never reaches the store itself."""

    @property
    def tenant(self) -> str: ...

    def story_space(self, project_id: str) -> StoryHost: ...

    def upsert_chunks(self, chunks: Sequence[ChunkRecord]) -> _Upserted: ...

    def delete(
        self,
        conversation_id: str,
        turn_range: Sequence[int] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> _Deleted: ...

    def delete_entity_states(self, project_id: str, entity_id: str) -> int: ...

    def chunks(
        self,
        conversation_id: str | None = None,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[ChunkRecord]: ...

    @property
    def searcher(self) -> Searcher: ...

    def embed_query(self, text: str) -> list[float]: ...

    def put_entity_states(self, project_id: str, rows: list[dict[str, Any]]) -> int: ...

    def latest_entity_state(
        self, project_id: str, entity_id: str, point: tuple[int, int], *, inclusive: bool = True
    ) -> dict[str, Any] | None: ...

    def entity_timeline(
        self, project_id: str, chapters: tuple[int, int], entity_id: str | None = None
    ) -> list[dict[str, Any]]: ...

    def story(self, project_id: str) -> StoryMemory: ...

    def count_degraded(self, parts: int) -> None: ...


def story_position(chapter_index: int, scene_index: int) -> int:
    return chapter_index * POSITION_SCALE + scene_index


def check_index(value: Any, field: str) -> int:
    """A chapter or scene index to read at: an integer in 0..:data:`MAX_CHAPTER` (a store
    compared anything else its own way, or failed on it)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CHAPTER:
        raise InvalidInputError(
            f"{field} must be an integer in 0..{MAX_CHAPTER}, got {value!r}", field=field
        )
    return value


def check_entity(entity_id: Any) -> str:
    """An entity id to read: a non-empty string of at most 200 characters a store can keep
    (PostgreSQL failed on a number or a NUL that SQLite looked up and did not find)."""
    if not isinstance(entity_id, str) or not entity_id or len(entity_id) > 200:
        raise InvalidInputError(
            f"entity_id must be a non-empty string of at most 200 characters, got {entity_id!r}",
            field="entity_id",
        )
    problem = text_problem(entity_id)
    if problem is not None:
        raise InvalidInputError(f"entity_id {problem}", field="entity_id")
    return entity_id


def _names(value: Any, field: str) -> list[str]:
    """Entities, content types or tags to filter a story search by: one string or a list
    of them (a string is one name, not its characters)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if isinstance(items, Mapping | bytes) or not isinstance(items, Iterable):
        raise InvalidInputError(
            f"{field} must be a string or a list of strings, got {value!r}", field=field
        )
    names = list(items)
    if len(names) > MAX_LIST:  # what a filter list may hold
        raise InvalidInputError(f"{field} may list at most {MAX_LIST} names", field=field)
    for index, name in enumerate(names):
        where = field if isinstance(value, str) else f"{field}[{index}]"
        if not isinstance(name, str) or not name:
            raise InvalidInputError(
                f"{where} must be a non-empty string, got {name!r}", field=where
            )
        problem = text_problem(name)
        if problem is not None:
            raise InvalidInputError(f"{where} {problem}", field=where)
    return names


def check_project(project_id: Any) -> str:
    if not isinstance(project_id, str) or not project_id.strip() or len(project_id) > 200:
        raise InvalidInputError(
            "project_id must be a non-empty string of at most 200 characters", field="project_id"
        )
    problem = text_problem(project_id)
    if problem is not None:
        raise InvalidInputError(f"project_id {problem}", field="project_id")
    return project_id


def story_chunk_id(chunk: StoryMemoryChunk) -> str:
    raw = json.dumps(
        [
            chunk.project_id,
            chunk.chapter_index,
            chunk.scene_index,
            chunk.content_type,
            chunk.content,
        ],
        ensure_ascii=False,
    )
    return "story_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


class StoryMemory:
    """One project's story memory, bound to a tenant (``Memory.story(project_id)``)."""

    def __init__(self, memory: StoryHost, project_id: str) -> None:
        self.project_id = check_project(project_id)
        self._memory = memory
        self._space = memory.story_space(project_id)

    # -- writes ---------------------------------------------------------------------------

    def parse(self, model: type[_Item], items: Sequence[Any], name: str) -> list[_Item]:
        """Validate items of this project, reporting every problem as ``name[i].field``.

        Raises:
            InvalidInputError: any item is invalid or names another project; nothing stored.
        """
        parsed: list[_Item] = []
        problems: list[dict[str, Any]] = []
        for index, raw in enumerate(check_list(items, name)):
            if not isinstance(raw, model | Mapping):
                problems.append(
                    {
                        "field": f"{name}[{index}]",
                        "message": f"is {type(raw).__name__}, not an object",
                    }
                )
                continue
            # what SQLite would keep and PostgreSQL refuse, in the words of every entry point
            sent = raw.model_dump(mode="json") if isinstance(raw, model) else raw
            problem = first_problem(sent, f"{name}[{index}]")
            if problem is not None:
                problems.append({"field": problem[0], "message": problem[1]})
                continue
            try:
                item = (
                    raw
                    if isinstance(raw, model)
                    else model.model_validate({"project_id": self.project_id, **dict(sent)})
                )
            except ValidationError as exc:
                for err in exc.errors():
                    loc = ".".join(str(p) for p in err["loc"])
                    problems.append(
                        {
                            "field": f"{name}[{index}].{loc}",
                            "message": str(err["msg"]).removeprefix("Value error, "),
                        }
                    )
                continue
            if item.project_id != self.project_id:
                problems.append(
                    {
                        "field": f"{name}[{index}].project_id",
                        "message": f"belongs to {item.project_id!r}, not {self.project_id!r}",
                    }
                )
                continue
            parsed.append(item)
        if problems:
            raise InvalidInputError(
                f"{problems[0]['field']}: {problems[0]['message']}",
                field=problems[0]["field"],
                errors=problems,
            )
        return parsed

    def add_memory_chunks(self, chunks: Sequence[StoryMemoryChunk | dict[str, Any]]) -> list[str]:
        """Embed and store story chunks (same id overwrites); returns their ids.

        Raises:
            InvalidInputError: a chunk is invalid or names another project; nothing stored.
        """
        parsed = self.parse(StoryMemoryChunk, chunks, "chunks")
        records = []
        for chunk in parsed:
            chunk_id = chunk.chunk_id or story_chunk_id(chunk)
            position = story_position(chunk.chapter_index, chunk.scene_index)
            metadata = ChunkMetadata.model_validate(
                {
                    "conversation_id": self.project_id,
                    "turn_range": (position, position),
                    "participants": chunk.entities,
                    "speakers": [],
                    "intent_tag": chunk.content_type,
                    "project_id": self.project_id,
                    "chapter_index": chunk.chapter_index,
                    "scene_index": chunk.scene_index,
                    "content_type": chunk.content_type,
                    "entities": chunk.entities,
                    "tags": chunk.tags,
                }
            )
            records.append(ChunkRecord(chunk_id=chunk_id, text=chunk.content, metadata=metadata))
        result = self._space.upsert_chunks(records)
        if result.errors:
            raise InvalidInputError("; ".join(result.errors), field="chunks")
        return [record.chunk_id for record in records]

    def add_entity_state(self, *snapshots: EntityStateSnapshot | dict[str, Any]) -> int:
        """Store entity state snapshots of this project (same entity, point, version overwrite)."""
        rows = [
            snapshot.model_dump()
            for snapshot in self.parse(EntityStateSnapshot, snapshots, "states")
        ]
        return self._memory.put_entity_states(self.project_id, rows)

    def delete_chunks(self, chunk_ids: Sequence[str] | None = None) -> _Deleted:
        """Delete story chunks of this project by id (None: every chunk of the project).

        Deleted chunks are never returned again; ``Memory.purge`` (``convmem purge``)
        removes their text from the store. Ids this project does not hold are listed in
        the result's ``errors``.
        """
        return self._space.delete(self.project_id, chunk_ids=chunk_ids)

    def chunk_ids(
        self, *, chapters: Iterable[int] | None = None, content_type: str | None = None
    ) -> list[str]:
        """The ids of this project's live story chunks, oldest first (of ``chapters`` and
        of ``content_type`` only, when given)."""
        wanted = None if chapters is None else set(chapters)
        ids: list[str] = []
        offset = 0
        while True:
            page = self._space.chunks(self.project_id, limit=PAGE, offset=offset)
            for record in page:
                extra = record.metadata.model_extra or {}
                if (wanted is None or extra.get("chapter_index") in wanted) and (
                    content_type is None or extra.get("content_type") == content_type
                ):
                    ids.append(record.chunk_id)
            if len(page) < PAGE:
                return ids
            offset += PAGE

    def delete_entity(self, entity_id: str) -> int:
        """Remove every state snapshot of one entity of this project from every read, at
        once (its rows are deleted; their text leaves the file at the next
        :meth:`~convmem.Memory.purge`); how many were removed."""
        return self._memory.delete_entity_states(self.project_id, entity_id)

    # -- tools ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        entities: Iterable[str] | None = None,
        content_types: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
        top_k: int = 10,
        *,
        before: tuple[int, int] | None = None,
        lexical_only: bool = False,
    ) -> list[StoryMemoryChunk]:
        """Hybrid search of this project's chunks (``search_story_memory_tool``).

        ``entities``, ``content_types`` and ``tags`` (each a string or a list) keep chunks
        that have any of them; ``before=(chapter, scene)`` keeps only chunks earlier in
        the story. Raises EmbedderError when the query cannot be embedded (unless
        ``lexical_only``).
        """
        check_query_text(query, "query")
        filters: dict[str, Any] = {}
        for key, value, field in (
            ("participants", entities, "entities"),
            ("intent_tag", content_types, "content_types"),
            ("tags", tags, "tags"),
        ):
            names = _names(value, field)
            if names:
                filters[key] = {"$in" if key == "intent_tag" else "$contains_any": names}
        if before is not None:
            if not isinstance(before, list | tuple) or len(before) != 2:
                raise InvalidInputError(
                    f"before must be (chapter_index, scene_index), got {before!r}", field="before"
                )
            # a chunk's scene is at most MAX_SCENE: a later scene of the chapter comes
            # after every chunk of it, and must not reach into the next chapter's
            position = story_position(
                check_index(before[0], "before.chapter_index"),
                min(check_index(before[1], "before.scene_index"), POSITION_SCALE),
            )
            if position == 0:
                return []
            filters["turn_range"] = [0, position - 1]
        request = SearchRequest(
            tenant=self._space.tenant,
            query_text=query,
            top_k=top_k,
            filters=filters or None,
            mode="lexical" if lexical_only else "hybrid",
            # embedded here so that an embedder failure raises (the chain then goes lexical)
            query_vector=None if lexical_only else self._space.embed_query(query),
        )
        hits = self._space.searcher.search(request)
        out: list[StoryMemoryChunk] = []
        seen: set[str] = set()
        for hit in hits:
            meta = hit.metadata
            if hit.chunk_id in seen:
                continue
            seen.add(hit.chunk_id)
            out.append(
                StoryMemoryChunk(
                    chunk_id=hit.chunk_id,
                    project_id=self.project_id,
                    chapter_index=meta["chapter_index"],
                    scene_index=meta["scene_index"],
                    content_type=meta.get("content_type", "scene"),
                    content=hit.text,
                    entities=meta.get("entities", []),
                    tags=meta.get("tags", []),
                )
            )
            if len(out) >= top_k:
                break
        return out

    def entity_state(
        self, entity_id: str, chapter_index: int, scene_index: int, *, inclusive: bool = True
    ) -> EntityStateSnapshot | None:
        """Latest state at (or, ``inclusive=False``, strictly before) a point."""
        point = (
            check_index(chapter_index, "chapter_index"),
            check_index(scene_index, "scene_index"),
        )
        row = self._memory.latest_entity_state(
            self.project_id, check_entity(entity_id), point, inclusive=inclusive
        )
        return EntityStateSnapshot.model_validate(row) if row else None

    def timeline(
        self, chapter_index: int, window: int = 2, entity_id: str | None = None
    ) -> list[EntityStateSnapshot]:
        """Snapshots of chapters ``chapter_index - window .. chapter_index``, in story order."""
        chapter_index = check_index(chapter_index, "chapter_index")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise InvalidInputError(
                f"window must be an integer >= 0, got {window!r}", field="window"
            )
        if entity_id is not None:
            entity_id = check_entity(entity_id)
        chapters = (max(0, chapter_index - window), chapter_index)
        rows = self._memory.entity_timeline(self.project_id, chapters, entity_id)
        return [EntityStateSnapshot.model_validate(row) for row in rows]


def search_story_memory_tool(
    project_id: str,
    query: str,
    entities: Iterable[str] | None = None,
    content_types: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    top_k: int = 10,
    *,
    memory: StoryHost,
) -> list[StoryMemoryChunk]:
    """Seed 003 tool: relevant story chunks of one project, deduplicated by id.

    If the query cannot be embedded, answers from the lexical index.
    """
    story = memory.story(project_id)
    try:
        return story.search(query, entities, content_types, tags, top_k)
    except EmbedderError:
        return story.search(query, entities, content_types, tags, top_k, lexical_only=True)


def get_entity_state_tool(
    project_id: str, entity_id: str, chapter_index: int, scene_index: int, *, memory: StoryHost
) -> EntityStateSnapshot | None:
    """Seed 003 tool: the latest state of an entity at or before a point, or None."""
    return memory.story(project_id).entity_state(entity_id, chapter_index, scene_index)


def get_recent_timeline_tool(
    project_id: str,
    chapter_index: int,
    window: int = 2,
    entity_id: str | None = None,
    *,
    memory: StoryHost,
) -> list[EntityStateSnapshot]:
    """Seed 003 tool: the state snapshots of the last ``window`` chapters up to this one."""
    return memory.story(project_id).timeline(chapter_index, window, entity_id)
