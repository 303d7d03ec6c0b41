"""A LangGraph long-term memory store backed by convmem (``pip install 'convmem[langchain]'``).

A namespace ``(user, conversation, ...)`` maps to convmem's tenant (``user``) and a
conversation (``lg:`` + the rest joined by ``/``); each item is a caller-made chunk whose
id is derived from namespace and key, whose text (what is searched) is ``value["text"]``
(or the value as JSON), and whose metadata keeps the value exactly. Get, put and delete by
key round-trip; search ranks with convmem's hybrid search (deleted and expired items never
come back) and filters on value fields by equality.

>>> store = ConvmemStore(memory)                                         # doctest: +SKIP
>>> store.put(("alice", "prefs"), "seat", {"text": "我喜欢靠窗的座位"})  # doctest: +SKIP
>>> store.search(("alice", "prefs"), query="座位")                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from convmem.errors import InvalidInputError
from convmem.memory import Memory
from convmem.models import ChunkRecord

__all__ = ["ConvmemStore"]

LIST_LIMIT = 10_000
ITEM_FIELDS = ("namespace", "key", "value", "created_at", "updated_at")


def _place(namespace: tuple[str, ...]) -> tuple[str, str]:
    """``(tenant, conversation_id)`` of a namespace."""
    if not namespace or not all(isinstance(part, str) and part for part in namespace):
        raise InvalidInputError(
            "a namespace is a non-empty tuple of non-empty strings: (user, conversation, ...)",
            field="namespace",
        )
    return namespace[0], "lg:" + "/".join(namespace[1:])


def _chunk_id(namespace: tuple[str, ...], key: str) -> str:
    raw = json.dumps([list(namespace), key], ensure_ascii=False)
    return "lg_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _item(record: ChunkRecord, score: float | None = None) -> SearchItem:
    meta = record.metadata.model_dump()
    return SearchItem(
        namespace=tuple(meta["lg_namespace"]),
        key=meta["lg_key"],
        value=meta["lg_value"],
        created_at=datetime.fromisoformat(meta["lg_created_at"]),
        updated_at=datetime.fromisoformat(meta["lg_updated_at"]),
        score=score,
    )


class ConvmemStore(BaseStore):
    """``langgraph.store.base.BaseStore`` over a :class:`~convmem.Memory`."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            self._put(op.namespace, op.key, op.value)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            raise NotImplementedError(
                "ConvmemStore cannot list namespaces: convmem keeps no index of them; keep "
                "the namespaces you use in your application"
            )
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _records(self, namespace: tuple[str, ...], key: str) -> list[ChunkRecord]:
        tenant, conversation = _place(namespace)
        return self.memory.for_tenant(tenant).chunks(
            conversation, chunk_ids=[_chunk_id(namespace, key)]
        )

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        records = self._records(namespace, key)
        if not records:
            return None
        found = _item(records[0])
        return Item(**{name: getattr(found, name) for name in ITEM_FIELDS})

    def _put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None) -> None:
        tenant, conversation = _place(namespace)
        memory = self.memory.for_tenant(tenant)
        chunk_id = _chunk_id(namespace, key)
        if value is None:
            memory.delete(conversation, chunk_ids=[chunk_id])
            return
        old = self._records(namespace, key)
        now = datetime.now(UTC).isoformat()
        created = old[0].metadata.model_dump()["lg_created_at"] if old else now
        text = value.get("text") if isinstance(value.get("text"), str) else None
        record = {
            "chunk_id": chunk_id,
            "text": text or json.dumps(value, ensure_ascii=False, sort_keys=True),
            "metadata": {
                "conversation_id": conversation,
                "turn_range": [0, 0],
                "intent_tag": "langgraph",
                "lg_namespace": list(namespace),
                "lg_key": key,
                "lg_value": dict(value),
                "lg_created_at": created,
                "lg_updated_at": now,
            },
        }
        result = memory.upsert_chunks([record])
        if result.errors:
            raise InvalidInputError("; ".join(result.errors), field="value")

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        tenant, conversation = _place(prefix)
        memory = self.memory.for_tenant(tenant)
        wanted = op.limit + op.offset
        if op.query:
            scope = {"conversation_id": conversation} if len(prefix) > 1 else None
            hits = memory.search(
                op.query, top_k=min(1000, wanted * 4 + 20), filters=scope, min_score=0.0
            )
            found = [
                _item(
                    ChunkRecord.model_validate(
                        h.model_dump(include={"chunk_id", "text", "metadata"})
                    ),
                    h.score,
                )
                for h in hits
                if "lg_namespace" in h.metadata
            ]
        else:
            found = [
                _item(record)
                for record in memory.chunks(
                    conversation if len(prefix) > 1 else None, limit=LIST_LIMIT
                )
                if "lg_namespace" in record.metadata.model_dump()
            ]
        matching = [
            item
            for item in found
            if item.namespace[: len(prefix)] == prefix
            and all(item.value.get(name) == value for name, value in (op.filter or {}).items())
        ]
        return matching[op.offset : op.offset + op.limit]
