"""Random governance sequences run on SQLite and PostgreSQL side by side, with the rule
marker and a manual clock: writes (facts, preferences, tasks, small talk, "记住这个" /
"Remember this" pins), confirmations and rejections of pending notes, tenant policy
overrides, time moving on, expiry sweeps, range deletes, re-chunks and purges.

After every step both backends hold the same marks, pins and notes and find the same
turns; and on each: no mark, note or hit of a deleted turn, no note or hit past its
expiry, no hit of a dropped turn, and a hit is pending exactly when its own turn awaits
confirmation (a turn hit once took that flag from any turn of its chunk), and a filter on
``pinned`` or ``requires_confirmation`` is met by each turn's own flag.
"""

from __future__ import annotations

import random
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import pytest

from conftest import drop_schema, postgres_base_url
from convmem import HashingEmbedder, Memory
from convmem.clock import ManualClock
from convmem.errors import ConvmemError

LINES = [
    ("user", "我对花生过敏。"),
    ("user", "我喜欢靠窗的座位。"),
    ("user", "提醒我明天给王经理打电话。"),
    ("user", "以后回答都用中文。"),
    ("user", "今天有点累。"),
    ("user", "你好！"),
    ("assistant", "好的。"),
    ("user", "记住这个"),
    ("user", "记住：我的车牌是沪A12345"),
    ("assistant", "建议选B方案：成本低20%，工期两周。"),
    ("user", "好，就按这个方案定了。"),
    ("user", "Remember this."),
    ("user", "I'm allergic to penicillin."),
    ("user", "Remind me to call Alice tomorrow at 9."),
    ("user", "我下个月要去东京出差。"),
    ("assistant", "需要护照、照片、在职证明和银行流水，一般五个工作日出签。"),
]
QUERIES = ["花生 过敏", "座位", "王经理 电话", "车牌", "方案", "penicillin", "Alice", "东京 签证"]
RULES = ["task(open)", "fact(user claim)", "fact(transient)", "note", "preference", "pinned"]
CONVERSATIONS = ("c1", "c2")
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC).timestamp()
Stores = dict[str, tuple[Memory, ManualClock]]


@pytest.fixture
def stores() -> Iterator[Stores]:
    base = postgres_base_url()
    schema = "g_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        urls = {"sqlite": f"sqlite:///{folder}/m.db", "postgres": f"{base}{joiner}schema={schema}"}
        out: Stores = {}
        for name, url in urls.items():
            clock = ManualClock(START)
            memory = Memory.open(url, embedder=HashingEmbedder(), workers=0, clock=clock)
            out[name] = (stack.enter_context(memory), clock)
        yield out
    drop_schema(base, schema)


def _alike(stores: Stores, call: Any) -> Any:
    """``call`` on each store; the answers (or error types) must agree."""
    answers = {}
    for name, (memory, _) in stores.items():
        try:
            answers[name] = ("ok", call(memory))
        except ConvmemError as exc:
            answers[name] = ("error", type(exc).__name__)
    first, *others = answers.values()
    assert all(answer == first for answer in others), answers
    return first


def _state(memory: Memory) -> dict[str, Any]:
    """What governance and search show; a hit by its turn and words (the speaker label
    follows the language of the chunk a turn is read from, and a turn in two chunks that
    score alike may be read from either)."""
    out: dict[str, Any] = {}
    for conversation in CONVERSATIONS:
        out[f"{conversation} marks"] = [
            (m.seq, m.expired, m.expires_at, m.decision, m.mark.model_dump())
            for m in memory.marks(conversation)
        ]
        out[f"{conversation} pins"] = [
            (p.trigger_turn_id, p.target_turn_ids, p.status) for p in memory.pins(conversation)
        ]
        out[f"{conversation} notes"] = sorted(
            (n.note_id, n.kind, n.status, n.text, n.source_turn_ids, n.expires_at)
            for status in (None, "rejected")
            for n in memory.notes(conversation, status=status)
        )
    for query in QUERIES:
        out[query] = sorted(
            (
                hit.metadata["conversation_id"],
                hit.metadata["turn_range"],
                hit.pending,
                hit.text.partition(": ")[2],
            )
            for hit in memory.search(query, top_k=50, min_score=0)
        )
    return out


def _check(memory: Memory, now: float, deleted: set[tuple[str, int]]) -> None:
    def live(expires_at: str | None) -> bool:
        return expires_at is None or datetime.fromisoformat(expires_at).timestamp() > now

    marks = {}
    for conversation in CONVERSATIONS:
        for m in memory.marks(conversation):
            assert (conversation, m.seq) not in deleted, m
            marks[conversation, m.seq] = m
        for note in memory.notes(conversation):
            assert note.status != "rejected" and live(note.expires_at), note
            assert not {(conversation, seq) for seq in note.source_turn_ids} & deleted, note
    for query in QUERIES:
        for hit in memory.search(query, top_k=50, min_score=0):
            conversation, (seq, _) = hit.metadata["conversation_id"], hit.metadata["turn_range"]
            mark = marks[conversation, seq]  # never a deleted turn: it has no mark
            assert mark.mark.keep and live(mark.expires_at), (query, mark)
            assert hit.pending == mark.mark.requires_confirmation, (query, mark)
    # a filter on a turn's flags is met by each turn's own
    for field, value in (("pinned", True), ("requires_confirmation", False)):
        for hit in memory.search(QUERIES[0], top_k=50, min_score=0, filters={field: value}):
            conversation, (seq, _) = hit.metadata["conversation_id"], hit.metadata["turn_range"]
            mark = marks[conversation, seq].mark
            own = mark.user_triggered_save if field == "pinned" else mark.requires_confirmation
            assert own is value and hit.metadata[field] is value, (field, mark)


@pytest.mark.parametrize("seed", range(4))
def test_random_governance_agrees_on_both_backends_and_keeps_its_promises(
    stores: Stores, seed: int
) -> None:
    rng = random.Random(seed)
    frontier = dict.fromkeys(CONVERSATIONS, 0)
    sent: dict[tuple[str, int], dict[str, Any]] = {}
    deleted: set[tuple[str, int]] = set()
    clocks = [clock for _, clock in stores.values()]
    for _ in range(rng.randint(10, 22)):
        conversation, roll = rng.choice(CONVERSATIONS), rng.random()
        now = clocks[0].now()
        if roll < 0.4:  # write, sometimes resending known turns
            start = frontier[conversation]
            if start and rng.random() < 0.2:
                start = rng.randrange(start)
            turns = []
            for offset, seq in enumerate(range(start, start + rng.randint(1, 4))):
                turn = sent.get((conversation, seq))
                if turn is None or rng.random() < 0.2:
                    role, text = rng.choice(LINES)
                    when = datetime.fromtimestamp(now + 60 * offset, UTC).isoformat()
                    turn = {"turn_id": seq, "role": role, "text": text, "timestamp": when}
                turns.append(turn)
            outcome = _alike(
                stores, lambda m, c=conversation, t=turns: m.add_turns(c, t).accepted_turn_ids
            )
            if outcome[0] == "ok":
                for turn in turns:
                    key = (conversation, turn["turn_id"])
                    if key not in sent and key not in deleted:
                        sent[key] = turn
                frontier[conversation] = max(frontier[conversation], turns[-1]["turn_id"] + 1)
        elif roll < 0.5:  # the user answers a pending note
            pending = _alike(
                stores, lambda m, c=conversation: [n.note_id for n in m.notes(c, status="pending")]
            )[1]
            if pending:
                note_id, confirm = rng.choice(sorted(pending)), rng.random() < 0.6
                _alike(stores, lambda m, n=note_id, c=confirm: m.update_note(n, confirm=c).status)
        elif roll < 0.6:
            overrides = None
            if rng.random() < 0.8:
                ttl = {"ttl_seconds": rng.choice([1, 60, 3600, 2 * 86400])}
                overrides = {"rules": dict.fromkeys(rng.sample(RULES, rng.randint(1, 3)), ttl)}
            _alike(stores, lambda m, o=overrides: m.set_policy(o).as_dict())
        elif roll < 0.72:
            seconds = rng.choice([30, 3600, 2 * 86400, 10 * 86400, 40 * 86400, 200 * 86400])
            for clock in clocks:
                clock.advance(seconds)
        elif roll < 0.8:
            _alike(stores, lambda m: m.sweep_expired())
        elif roll < 0.9 and frontier[conversation]:
            low = rng.randrange(frontier[conversation])
            high = min(frontier[conversation] - 1, low + rng.randint(0, 2))
            _alike(
                stores,
                lambda m, c=conversation, r=(low, high): m.delete(c, turn_range=r).turns_deleted,
            )
            for seq in range(low, high + 1):
                if sent.pop((conversation, seq), None) is not None:
                    deleted.add((conversation, seq))
        else:
            for memory, _ in stores.values():
                memory.run_pending()
            if roll < 0.95:
                _alike(stores, lambda m, c=conversation: m.rechunk(c))
            else:
                _alike(stores, lambda m: m.purge())
        for memory, _ in stores.values():
            memory.run_pending()
        states = {name: _state(memory) for name, (memory, _) in stores.items()}
        for key, value in states["sqlite"].items():
            assert value == states["postgres"][key], key
        for memory, clock in stores.values():
            _check(memory, clock.now(), deleted)
