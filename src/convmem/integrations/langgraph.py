"""A LangGraph long-term memory store backed by convmem (``pip install 'convmem[langchain]'``).

A namespace ``(user, ...)`` maps to convmem's tenant ``user``; each item is a caller-made
chunk of conversation ``lg:`` + the rest of the namespace joined by ``/``, whose id is
derived from namespace and key, whose text (what a query searches) is ``value["text"]``
(or the value as JSON, or the fields ``index=[...]`` names), and whose metadata keeps the
value exactly. The item carries one tag per prefix of its namespace, so a search of
``("alice",)`` or ``("alice", "notes")`` is one store filter over every deeper namespace.

The semantics are LangGraph's own (``InMemoryStore``, checked side by side in
``tests/conformance/test_langgraph_store.py``):

- get, put and delete by key round-trip; an update keeps ``created_at``;
- ``search(prefix, filter=...)`` returns every item under the prefix whose value matches
  the filter: equality, nested objects, lists, and ``$eq``, ``$ne``, ``$gt``, ``$gte``,
  ``$lt``, ``$lte`` (comparisons take numbers). With a query the items convmem's hybrid
  search ranks come first with their score, then the other matching items without one
  (as ``InMemoryStore`` fills with unembedded items), so a filter never hides an item
  that ranks low; ``put(..., index=False)`` items are never ranked;
- ``list_namespaces`` lists one user's namespaces: its ``prefix`` must name the user, as
  every convmem read is scoped to a tenant;
- ``put(..., ttl=minutes)`` (or ``ConvmemStore(memory, ttl={"default_ttl": ...})``) makes
  an item expire; a get or search that returns it moves its expiry ``ttl`` minutes on
  (``refresh_ttl``, as LangGraph's stores do), without re-embedding it. Expired and deleted
  items never come back, from any read, from the moment they expire (no sweep needed).

>>> store = ConvmemStore(memory)                                         # doctest: +SKIP
>>> store.put(("alice", "prefs"), "seat", {"text": "我喜欢靠窗的座位"})  # doctest: +SKIP
>>> store.search(("alice",), query="座位")                              # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from convmem.errors import InvalidInputError
from convmem.ids import MAX_CONVERSATION_ID, check_limit, check_whole
from convmem.memory import Memory
from convmem.models import ChunkRecord

__all__ = ["ConvmemStore"]

#: The tag prefix of an item's namespace prefixes (``lgns:["alice","notes"]``).
NAMESPACE_TAG = "lgns:"
#: ``intent_tag`` of an item a query ranks, and of one stored with ``index=False``.
INDEXED, UNINDEXED = "langgraph", "langgraph:unindexed"
#: Items read from the store at a time when a listing is filtered or a query falls short.
PAGE = 1000
#: The most hits one query ranks (convmem's ``top_k`` limit).
RANKED = 1000
COMPARISONS = ("$gt", "$gte", "$lt", "$lte")
OPERATORS = ("$eq", "$ne", *COMPARISONS)
ITEM_FIELDS = ("namespace", "key", "value", "created_at", "updated_at")


def _namespace(namespace: Any, field: str = "namespace") -> tuple[str, ...]:
    if not isinstance(namespace, tuple | list) or not namespace:
        raise InvalidInputError(
            f"{field} is a non-empty tuple of strings whose first names the user: "
            "(user, ...); convmem keeps each user in its own tenant",
            field=field,
        )
    if not all(isinstance(part, str) and part for part in namespace):
        raise InvalidInputError(
            f"every label of {field} is a non-empty string, got {tuple(namespace)!r}", field=field
        )
    return tuple(namespace)


def _place(namespace: tuple[str, ...]) -> tuple[str, str]:
    """``(tenant, conversation_id)`` of a namespace (a long one's id is its digest)."""
    conversation = "lg:" + "/".join(namespace[1:])
    if len(conversation) > MAX_CONVERSATION_ID:
        raw = json.dumps(list(namespace[1:]), ensure_ascii=False)
        conversation = "lg#" + hashlib.sha256(raw.encode("utf-8")).hexdigest()
    return namespace[0], conversation


def _tag(prefix: Sequence[str]) -> str:
    return NAMESPACE_TAG + json.dumps(list(prefix), ensure_ascii=False, separators=(",", ":"))


def _chunk_id(namespace: tuple[str, ...], key: str) -> str:
    raw = json.dumps([list(namespace), key], ensure_ascii=False)
    return "lg_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _item(metadata: Mapping[str, Any], score: float | None = None) -> SearchItem:
    return SearchItem(
        namespace=tuple(metadata["lg_namespace"]),
        key=metadata["lg_key"],
        value=metadata["lg_value"],
        created_at=datetime.fromisoformat(metadata["lg_created_at"]),
        updated_at=datetime.fromisoformat(metadata["lg_updated_at"]),
        score=score,
    )


def _not_json(value: Any, where: str) -> tuple[str, Any] | None:
    """The first place in ``value`` that JSON cannot hold, and what is there."""
    if isinstance(value, Mapping):
        children: Iterable[tuple[str, Any]] = (
            (f"{where}.{key}", child) for key, child in value.items()
        )
    elif isinstance(value, list | tuple):
        children = ((f"{where}[{index}]", child) for index, child in enumerate(value))
    elif value is None or isinstance(value, str | int | float | bool):
        return None
    else:
        return where, value
    for place, child in children:
        found = _not_json(child, place)
        if found is not None:
            return found
    return None


def _json_text(value: Mapping[str, Any]) -> str:
    """``value`` as JSON, or InvalidInputError naming the field JSON cannot hold (values are
    kept exactly, as JSON, like LangGraph's own stores keep them)."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        found = _not_json(value, "value")
        if found is None:
            raise InvalidInputError(
                f"value cannot be stored as JSON ({exc}); send a dict of strings, numbers, "
                "bools, None, lists and dicts with string keys",
                field="value",
            ) from None
        where, what = found
        fix = (
            "send it as an ISO 8601 string (.isoformat())"
            if isinstance(what, datetime)
            else "send a string, number, bool, None, list or dict instead"
        )
        raise InvalidInputError(
            f"{where} holds a {type(what).__name__}, which JSON cannot store; {fix}", field=where
        ) from None


#: An item read from the store and its TTL in minutes (None: it never expires).
Found = tuple[SearchItem, float | None]


def _found(metadata: Mapping[str, Any], score: float | None = None) -> Found:
    minutes = metadata.get("lg_ttl")
    return _item(metadata, score), float(minutes) if minutes else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_filter(wanted: Any, field: str = "filter") -> None:
    """Refuse an operator LangGraph does not define, or a comparison with no number."""
    if isinstance(wanted, Mapping):
        for name, child in wanted.items():
            if not isinstance(name, str):
                raise InvalidInputError(f"{field} keys are strings, got {name!r}", field=field)
            where = f"{field}.{name}"
            if name.startswith("$") and name not in OPERATORS:
                raise InvalidInputError(
                    f"{where}: unknown operator; use one of {', '.join(OPERATORS)}", field=where
                )
            if name in COMPARISONS and not (_is_number(child) and math.isfinite(child)):
                raise InvalidInputError(
                    f"{where} compares numbers; got {child!r}, send a finite number", field=where
                )
            _check_filter(child, where)
    elif isinstance(wanted, list | tuple):
        for i, child in enumerate(wanted):
            _check_filter(child, f"{field}[{i}]")


def _same(found: Any, wanted: Any) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``."""
    if isinstance(found, bool) or isinstance(wanted, bool):
        return isinstance(found, bool) and isinstance(wanted, bool) and found == wanted
    return bool(found == wanted)


def _operator(found: Any, name: str, wanted: Any) -> bool:
    if name == "$eq":
        return _matches(found, wanted)
    if name == "$ne":
        return not _matches(found, wanted)
    if not _is_number(found):
        return False
    if name == "$gt":
        return bool(found > wanted)
    if name == "$gte":
        return bool(found >= wanted)
    if name == "$lt":
        return bool(found < wanted)
    return bool(found <= wanted)


def _matches(found: Any, wanted: Any) -> bool:
    """Whether a value (or one of its fields) matches a filter (LangGraph's rules)."""
    if isinstance(wanted, Mapping):
        if any(str(name).startswith("$") for name in wanted):
            return all(_operator(found, name, arg) for name, arg in wanted.items())
        return isinstance(found, Mapping) and all(
            _matches(found.get(name), arg) for name, arg in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(wanted)
            and all(_matches(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return _same(found, wanted)


def _path_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        part = namespace[: len(path)]
    elif condition.match_type == "suffix":
        part = namespace[len(namespace) - len(path) :]
    else:
        raise InvalidInputError(
            f"match_type must be 'prefix' or 'suffix', got {condition.match_type!r}",
            field="match_type",
        )
    return all(want in ("*", have) for have, want in zip(part, path, strict=True))


def _page(offset: int, limit: int) -> tuple[int, int]:
    return check_limit(offset, "offset"), check_limit(limit, "limit")


def _ttl(value: Any) -> float | None:
    """A TTL in minutes, or None (no expiry)."""
    if value is None or value is NOT_PROVIDED:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidInputError(
            f"ttl is minutes until the item expires: a finite number > 0 or None, got {value!r}",
            field="ttl",
        )
    return float(value)


class ConvmemStore(BaseStore):
    """``langgraph.store.base.BaseStore`` over a :class:`~convmem.Memory`.

    ``ttl`` is LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for items put without
    one, ``refresh_on_read`` (default True). Its ``sweep_interval_minutes`` is not needed:
    an expired item is left out of every read at once.
    """

    supports_ttl: bool = True

    def __init__(self, memory: Memory, *, ttl: TTLConfig | None = None) -> None:
        self.memory = memory
        self.ttl_config = ttl
        if ttl is not None:
            _ttl(ttl.get("default_ttl"))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            found = self._get(_namespace(op.namespace), op.key)
            if found is None:
                return None
            if op.refresh_ttl:
                self._refresh([found])
            item = found[0]
            return Item(**{name: getattr(item, name) for name in ITEM_FIELDS})
        if isinstance(op, PutOp):
            self._put(_namespace(op.namespace), op.key, op.value, op.index, _ttl(op.ttl))
            return None
        if isinstance(op, SearchOp):
            pairs = self._search(op)
            if op.refresh_ttl:
                self._refresh(pairs)
            return [item for item, _ in pairs]
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _records(self, namespace: tuple[str, ...], key: str) -> list[ChunkRecord]:
        tenant, conversation = _place(namespace)
        return self.memory.for_tenant(tenant).chunks(
            conversation, chunk_ids=[_chunk_id(namespace, key)]
        )

    def _get(self, namespace: tuple[str, ...], key: str) -> Found | None:
        records = self._records(namespace, key)
        return _found(records[0].metadata.model_dump()) if records else None

    def _refresh(self, found: Sequence[Found]) -> None:
        """Move the expiry of the items that have a TTL that many minutes on."""
        by_ttl: dict[tuple[str, float], list[str]] = {}
        for item, minutes in found:
            if minutes:
                place = (item.namespace[0], minutes)
                by_ttl.setdefault(place, []).append(_chunk_id(item.namespace, item.key))
        for (user, minutes), chunk_ids in by_ttl.items():
            self.memory.for_tenant(user).extend_chunks(chunk_ids, minutes * 60)

    def _put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any] | None,
        index: Sequence[str] | bool | None,
        ttl: float | None = None,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise InvalidInputError("key is a non-empty string", field="key")
        tenant, conversation = _place(namespace)
        memory = self.memory.for_tenant(tenant)
        chunk_id = _chunk_id(namespace, key)
        if value is None:
            memory.delete(conversation, chunk_ids=[chunk_id])
            return
        if not isinstance(value, Mapping):
            raise InvalidInputError(
                f"value is a dict (or None to delete), got {type(value).__name__}", field="value"
            )
        old = self._records(namespace, key)
        moment = self.memory.clock.now()
        now = datetime.fromtimestamp(moment, UTC).isoformat()
        created = old[0].metadata.model_dump()["lg_created_at"] if old else now
        whole = _json_text(value)
        if index is False:
            searched = ""
        elif index is None or index is True:
            text = value.get("text")
            searched = text if isinstance(text, str) and text.strip() else whole
        else:
            paths = [index] if isinstance(index, str) else list(index)
            searched = "\n".join(
                text for path in paths for text in get_text_at_path(value, path) if text.strip()
            )
        record = {
            "chunk_id": chunk_id,
            "text": searched or whole,
            "metadata": {
                "conversation_id": conversation,
                "turn_range": [0, 0],
                "intent_tag": INDEXED if searched else UNINDEXED,
                "tags": [_tag(namespace[:depth]) for depth in range(1, len(namespace) + 1)],
                "lg_namespace": list(namespace),
                "lg_key": key,
                "lg_value": dict(value),
                "lg_created_at": created,
                "lg_updated_at": now,
                "lg_ttl": ttl,
                "expires_at": (
                    datetime.fromtimestamp(moment + ttl * 60, UTC).isoformat() if ttl else None
                ),
            },
        }
        result = memory.upsert_chunks([record])
        if result.errors:
            raise InvalidInputError("; ".join(result.errors), field="value")

    def _items(self, memory: Memory, prefix: tuple[str, ...]) -> Iterator[dict[str, Any]]:
        """The metadata of every item under ``prefix``, oldest first, a page at a time."""
        offset = 0
        while True:
            page = memory.chunks(filters={"tags": _tag(prefix)}, limit=PAGE, offset=offset)
            for record in page:
                yield record.metadata.model_dump()
            if len(page) < PAGE:
                return
            offset += PAGE

    def _search(self, op: SearchOp) -> list[Found]:
        prefix = _namespace(op.namespace_prefix, "namespace_prefix")
        offset, limit = _page(op.offset, op.limit)
        wanted = op.filter or {}
        if not isinstance(wanted, Mapping):
            raise InvalidInputError("filter is a dict of value fields", field="filter")
        _check_filter(wanted)
        memory = self.memory.for_tenant(prefix[0])
        stop = offset + limit
        found: list[Found] = []
        if op.query:
            hits = memory.search(
                op.query,
                top_k=RANKED if wanted else min(RANKED, max(stop, 1) * 2 + 10),
                filters={"tags": _tag(prefix), "intent_tag": INDEXED},
                granularity="chunk",
                min_score=0.0,
            )
            found = [
                _found(hit.metadata, hit.score)
                for hit in hits
                if "lg_namespace" in hit.metadata and _matches(hit.metadata["lg_value"], wanted)
            ]
        elif not wanted:  # a plain listing pages in the store
            return [
                _found(record.metadata.model_dump())
                for record in memory.chunks(
                    filters={"tags": _tag(prefix)}, limit=limit, offset=offset
                )
            ]
        if len(found) < stop:
            ranked = {(item.namespace, item.key) for item, _ in found}
            for metadata in self._items(memory, prefix):
                item, minutes = _found(metadata)
                if (item.namespace, item.key) not in ranked and _matches(item.value, wanted):
                    found.append((item, minutes))
                    if len(found) >= stop:
                        break
        return found[offset:stop]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        offset, limit = _page(op.offset, op.limit)
        conditions = tuple(op.match_conditions or ())
        users = {
            condition.path[0]
            for condition in conditions
            if condition.match_type == "prefix" and condition.path and condition.path[0] != "*"
        }
        if len(users) != 1:
            raise InvalidInputError(
                "list_namespaces lists one user's namespaces: pass prefix=(user, ...) "
                "(convmem keeps each user in its own tenant)",
                field="prefix",
            )
        if op.max_depth is not None:
            check_whole(op.max_depth, "max_depth", 1)
        user = users.pop()
        memory = self.memory.for_tenant(user)
        namespaces = {
            tuple(metadata["lg_namespace"])
            for metadata in self._items(memory, (user,))
            if "lg_namespace" in metadata
        }
        kept = [
            namespace
            for namespace in namespaces
            if all(_path_matches(namespace, condition) for condition in conditions)
        ]
        if op.max_depth is not None:
            kept = list({namespace[: op.max_depth] for namespace in kept})
        return sorted(kept)[offset : offset + limit]
