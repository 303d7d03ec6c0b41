"""PostgreSQL: maintenance writes take a conversation's lock the way an index pass does.

An index pass holds the conversation's advisory lock while it writes the conversation's
rows. A writer that locked rows first and the conversation second could deadlock with it
(the sweep did), and one that never took the conversation lock could have its work
written over by the pass (the rechunk reset did). Each test holds the lock as a pass
would, on a connection of its own, and watches what the maintenance call does meanwhile.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from conftest import drop_schema, postgres_base_url
from convmem import HashingEmbedder, Memory
from convmem.clock import ManualClock
from helpers import make_turns


@pytest.fixture
def backend_url_postgres() -> Iterator[str]:
    base = postgres_base_url()
    schema = "t_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    yield f"{base}{joiner}schema={schema}"
    drop_schema(base, schema)


@pytest.fixture
def pg(backend_url_postgres: str) -> Iterator[tuple[Memory, ManualClock, str]]:
    clock = ManualClock()
    with Memory.open(
        backend_url_postgres, embedder=HashingEmbedder(), workers=0, clock=clock
    ) as memory:
        memory.add_turns("c", make_turns(["我这两天感冒了，嗓子疼得厉害。", "多喝热水。"]))
        memory.flush()
        yield memory, clock, backend_url_postgres


def _holding_the_conversation(memory: Memory) -> psycopg.Connection[Any]:
    """A connection inside a transaction that holds conversation "c"'s lock (``with``:
    committed and closed at the end of the block)."""
    store: Any = memory.store
    conn = psycopg.connect(postgres_base_url())
    conn.execute(f'SET search_path TO "{store.schema}"')
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (store._conversation_key(memory.tenant, "c"),),
    )
    return conn


def _run_until_it_waits(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """``call`` on a thread, returned once it waits on an advisory lock or has finished."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except Exception as exc:  # reported by the test
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 20
    with psycopg.connect(postgres_base_url(), autocommit=True) as watcher:
        while thread.is_alive() and time.monotonic() < deadline:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND NOT granted"
            ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
    return thread, result


def test_the_sweep_takes_the_conversation_before_its_marks(
    pg: tuple[Memory, ManualClock, str],
) -> None:
    memory, clock, _ = pg
    clock.advance(3 * 86400 + 1)  # the cold is a transient fact: three days
    with _holding_the_conversation(memory) as conn:
        thread, result = _run_until_it_waits(memory.sweep_expired)
        assert thread.is_alive()  # waiting for the conversation, as a pass's writer would
        # the pass, still holding the conversation, writes the marks: the sweep must not
        # hold their rows (it did, and the two deadlocked)
        conn.execute("SET LOCAL lock_timeout = '5s'")
        conn.execute("UPDATE marks SET updated_at = updated_at WHERE conversation_id = 'c'")
    thread.join(30)
    assert "error" not in result and result["value"]["turn_marks"] == 1


def test_a_rechunk_waits_for_an_index_pass_of_the_conversation(
    pg: tuple[Memory, ManualClock, str],
) -> None:
    memory, _, _ = pg
    with _holding_the_conversation(memory):
        thread, result = _run_until_it_waits(memory.rechunk)
        assert thread.is_alive()  # it reset the conversation under a pass before
    thread.join(30)
    assert "error" not in result and result["value"] == 1
    memory.flush()
    assert memory.search("感冒", min_score=0)
