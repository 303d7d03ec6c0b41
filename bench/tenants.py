"""Where a bench puts a conversation and asks its questions: in the one tenant of the
memory (the questions then filtered to the conversation), or in a tenant of its own, named
as the conversation, asked without a filter (what a search that names no conversation gives
for that conversation's memory)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from convmem import Memory


def home(memory: Memory, conversation_id: str, own_tenant: bool) -> Memory:
    """The memory a conversation's turns go to and its questions are asked of."""
    return memory.for_tenant(conversation_id) if own_tenant else memory


def ingest(
    memory: Memory,
    conversations: Iterable[tuple[str, Sequence[dict[str, Any]]]],
    own_tenant: bool,
    timeout: float = 3600,
) -> None:
    """Add each conversation's turns to its :func:`home` and wait until every home is
    indexed (a memory's ``flush`` waits for its own tenant only)."""
    homes: dict[str, Memory] = {}
    for conversation_id, turns in conversations:
        place = home(memory, conversation_id, own_tenant)
        place.add_turns(conversation_id, list(turns))
        homes.setdefault(conversation_id if own_tenant else "", place)
    for place in homes.values():
        place.flush(timeout=timeout)
