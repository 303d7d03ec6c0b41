"""Story memory (seed 003) on the bundled Chinese project: tools, chain, isolation, degradation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from convmem import HashingEmbedder, Memory
from convmem.cli.main import main
from convmem.errors import InvalidInputError
from convmem.server import ServerSettings, create_app
from convmem.story import (
    CharactersConfig,
    EntityStateSnapshot,
    LLMScenePlanner,
    SceneMemoryContext,
    ScenePlan,
    StoryMemoryChunk,
    build_scene_memory_context,
    get_entity_state_tool,
    get_recent_timeline_tool,
    load_project,
    search_story_memory_tool,
)
from convmem.story.loader import read_characters
from convmem.story.models import MAX_CHAPTER
from helpers import OutageEmbedder

DEMO = Path(str(resources.files("convmem") / "data" / "story_demo"))
PLAN = ScenePlan.model_validate_json((DEMO / "scene_plan.json").read_text(encoding="utf-8"))
CAST = read_characters(DEMO)


@pytest.fixture
def novel(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(str(tmp_path / "story.db"), embedder=HashingEmbedder(), workers=0) as memory:
        counts = load_project(memory, "harbor", DEMO)
        assert counts == {"chapters": 3, "chunks": 11, "states": 8}
        yield memory


@pytest.mark.parametrize(
    "model",
    [ScenePlan, CharactersConfig, EntityStateSnapshot, StoryMemoryChunk, SceneMemoryContext],
)
def test_every_model_has_a_valid_json_example(model: Any) -> None:
    examples = model.model_json_schema()["examples"]
    assert examples
    for example in examples:
        model.model_validate(example)


def test_scene_context_uses_only_what_came_before_the_scene(novel: Memory, tmp_path: Path) -> None:
    out = tmp_path / "scene.json"
    # a state recorded at the scene itself (an earlier draft of it) is not "before" it either
    novel.story("harbor").add_entity_state(
        {"entity_id": "林晚", "chapter_index": 3, "scene_index": 1, "state": {"location": "草稿"}}
    )
    context = build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=novel, output_path=out)
    assert context.degraded == []
    states = {state.entity_id: state for state in context.entity_states}
    assert set(states) >= {"林晚", "沈舟"}
    # the latest state before the scene, not the one after it (chapter 3 scene 2: 警局)
    assert (states["林晚"].chapter_index, states["林晚"].scene_index) == (2, 3)
    assert states["林晚"].state["location"] == "七号仓外"
    assert states["沈舟"].state["scar"] == "左手手背新的烧伤"
    texts = [chunk.content for chunk in context.relevant_memories]
    assert any("铜钥匙很沉" in text for text in texts)  # the key and its engraving
    assert any("只有沈舟一个人出来" in text for text in texts)  # the watchman's testimony
    assert not any("警局" in text or "账本" in text for text in texts)  # written after the scene
    assert all((c.chapter_index, c.scene_index) < (3, 1) for c in context.relevant_memories)
    assert len({c.chunk_id for c in context.relevant_memories}) == len(texts)  # no duplicates
    assert context.timeline_context is not None
    events = context.timeline_context["events"]
    assert events and all((e["chapter_index"], e["scene_index"]) < (3, 1) for e in events)
    assert context.queries and PLAN.summary in context.queries
    # the JSON written validates against the model and equals the result
    assert SceneMemoryContext.model_validate_json(out.read_text(encoding="utf-8")) == context


def test_the_three_tools(novel: Memory) -> None:
    hits = search_story_memory_tool("harbor", "铜钥匙 七号仓", memory=novel)
    assert hits and "七号仓" in hits[0].content
    assert len({h.chunk_id for h in hits}) == len(hits)
    only_shen = search_story_memory_tool("harbor", "码头", entities=["沈舟"], memory=novel)
    assert only_shen and all("沈舟" in h.entities for h in only_shen)
    tagged = search_story_memory_tool("harbor", "林晚", tags=["证词"], top_k=5, memory=novel)
    assert tagged and all("证词" in h.tags for h in tagged)
    assert search_story_memory_tool("harbor", "林晚", content_types=["summary"], memory=novel) == []
    at = get_entity_state_tool("harbor", "林晚", 2, 3, memory=novel)
    assert at is not None and at.state["location"] == "七号仓外"  # at the point counts
    before = get_entity_state_tool("harbor", "林晚", 2, 2, memory=novel)
    assert before is not None and (before.chapter_index, before.scene_index) == (1, 2)
    assert get_entity_state_tool("harbor", "林晚", 0, 9, memory=novel) is None
    assert get_entity_state_tool("harbor", "nobody", 9, 9, memory=novel) is None
    window = get_recent_timeline_tool("harbor", 2, window=0, memory=novel)
    assert {s.chapter_index for s in window} == {2}
    assert [
        s.entity_id for s in get_recent_timeline_tool("harbor", 3, 3, "沈舟", memory=novel)
    ] == ["沈舟"]


def test_story_order_holds_at_the_largest_scene_indices(tmp_path: Path) -> None:
    """A story chunk's position is chapter * 100000 + scene: chapter 1's scene 150000 sat
    where chapter 2's scenes do, so a search before (2, 0) missed it and one before
    (2, 50001) found it, and the scene context's timeline dropped an entity state of it.
    A chunk's scene stops at 99999; an entity state's keeps its own columns."""
    with Memory.open(str(tmp_path / "s.db"), embedder=HashingEmbedder(), workers=0) as memory:
        story = memory.story("p")
        with pytest.raises(InvalidInputError) as refused:
            story.add_memory_chunks(
                [{"project_id": "p", "chapter_index": 1, "scene_index": 100_000, "content": "x"}]
            )
        assert refused.value.field == "chunks[0].scene_index"
        story.add_memory_chunks(
            [
                {
                    "project_id": "p",
                    "chapter_index": c,
                    "scene_index": s,
                    "content": f"铜钥匙 {c} {s}",
                }
                for c, s in [(1, 99_999), (2, 10), (2, 60_000)]
            ]
        )

        def before(point: tuple[int, int]) -> set[tuple[int, int]]:
            return {(c.chapter_index, c.scene_index) for c in story.search("铜钥匙", before=point)}

        assert before((2, 0)) == {(1, 99_999)}
        assert before((2, 50_001)) == {(1, 99_999), (2, 10)}
        assert before((1, 1_000_000)) == {(1, 99_999)}  # the whole chapter, not the next one
        story.add_entity_state(
            {"entity_id": "林晚", "chapter_index": 1, "scene_index": 150_000, "state": {"at": 1}},
            {"entity_id": "林晚", "chapter_index": 2, "scene_index": 5, "state": {"at": 2}},
        )
        plan = {"chapter_index": 2, "scene_index": 1, "characters": ["林晚"]}
        cast = {"characters": [{"name": "林晚"}]}
        context = build_scene_memory_context(plan, cast, "p", 2, 1, memory=memory)
        assert context.timeline_context is not None
        events = context.timeline_context["events"]
        assert [(e["chapter_index"], e["scene_index"]) for e in events] == [(1, 150_000)]


def test_a_filter_finds_every_match_however_far_down_it_ranks(tmp_path: Path) -> None:
    """Tags were checked on the best 5 × top_k hits: a tagged chunk that ranked lower was
    never found. Every filter (tags, entities, content types) is now the store's, and a
    string names one entity or tag, not its characters."""
    with Memory.open(str(tmp_path / "s.db"), embedder=HashingEmbedder(), workers=0) as memory:
        story = memory.story("p")
        crowd = "林晚走过码头，码头上林晚看见林晚的船。"
        story.add_memory_chunks(
            [
                {"chapter_index": 1, "scene_index": i, "content": crowd * (1 + i % 3)}
                for i in range(60)
            ]
            + [
                {
                    "chapter_index": 2,
                    "scene_index": 1,
                    "content": "顺便提到林晚。" + "海风吹过七号仓的屋顶。" * 30,
                    "entities": ["沈舟"],
                    "content_type": "clue",
                    "tags": ["证词"],
                }
            ]
        )
        for lexical_only in (False, True):
            for found in (
                story.search("林晚", tags=["证词"], top_k=5, lexical_only=lexical_only),
                story.search("林晚", tags="证词", top_k=5, lexical_only=lexical_only),
                story.search("林晚", entities="沈舟", top_k=5, lexical_only=lexical_only),
                story.search("林晚", content_types="clue", top_k=5, lexical_only=lexical_only),
            ):
                assert [(c.chapter_index, c.tags) for c in found] == [(2, ["证词"])]
        assert story.search("林晚", tags="证", top_k=5) == []  # a tag, not its characters
        assert len(story.search("林晚", top_k=5)) == 5
        for bad, field in (([1], "tags[0]"), ({"证词": 1}, "tags"), ([""], "tags[0]")):
            with pytest.raises(InvalidInputError) as raised:
                story.search("林晚", tags=bad)
            assert raised.value.field == field
        with pytest.raises(InvalidInputError, match="entities"):
            search_story_memory_tool("p", "林晚", entities=7, memory=memory)  # type: ignore[arg-type]


def test_story_chunks_and_states_can_be_deleted_and_purged(tmp_path: Path) -> None:
    path = tmp_path / "story.db"
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        story = memory.story("novel")
        secret, kept = story.add_memory_chunks(
            [
                {
                    "chapter_index": 1,
                    "scene_index": 1,
                    "content": "林晚在码头发现了刻着qqzzyy的铜钥匙",
                },
                {
                    "chapter_index": 1,
                    "scene_index": 2,
                    "content": "沈舟在码头等船，铜钥匙还在他手里",
                },
            ]
        )
        story.add_entity_state(
            {"entity_id": "林晚", "chapter_index": 1, "scene_index": 1, "state": {"at": "码头"}},
            {"entity_id": "沈舟", "chapter_index": 1, "scene_index": 1, "state": {"at": "船上"}},
        )
        other = memory.for_tenant("t2").story("novel")
        (theirs,) = other.add_memory_chunks(
            [{"chapter_index": 1, "scene_index": 1, "content": "另一个租户的qqzzyy"}]
        )
        other.delete_chunks([theirs])
        result = story.delete_chunks([secret, "story_nope"])
        assert result.deleted == 1 and len(result.errors) == 1
        found = search_story_memory_tool("novel", "铜钥匙 码头", top_k=10, memory=memory)
        assert [chunk.chunk_id for chunk in found] == [kept]
        assert story.delete_entity("林晚") == 1
        assert get_entity_state_tool("novel", "林晚", 9, 9, memory=memory) is None
        assert get_entity_state_tool("novel", "沈舟", 9, 9, memory=memory) is not None
        assert memory.purge()["chunks"] == 1  # this tenant's story text, not t2's
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert data.count(b"qqzzyy") == 1  # t2's deleted text waits for t2's purge
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        assert memory.for_tenant("t2").purge()["chunks"] == 1
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"qqzzyy" not in data


def test_a_project_with_a_bad_state_row_stores_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "novel"
    (folder / "chapters").mkdir(parents=True)
    (folder / "chapters" / "chapter_01.md").write_text("## 场景 1\n\n林晚走进七号仓。\n")
    (folder / "states.jsonl").write_text(
        '{"entity_id": "林晚", "chapter_index": 1, "scene_index": 1, "state": {}}\n'
        '{"entity_id": "沈舟", "chapter_index": -1, "scene_index": 1, "state": {}}\n'
    )
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        with pytest.raises(InvalidInputError) as caught:
            load_project(memory, "novel", folder)
        assert caught.value.field == "states[1].chapter_index"
        assert search_story_memory_tool("novel", "七号仓", memory=memory) == []


def test_projects_and_tenants_are_isolated(novel: Memory) -> None:
    other = novel.story("other")
    other.add_memory_chunks(
        [
            {
                "chapter_index": 1,
                "scene_index": 1,
                "content": "另一个项目的秘密：铜钥匙是假的",
                "entities": ["林晚"],
            }
        ]
    )
    other.add_entity_state(
        {"entity_id": "林晚", "chapter_index": 1, "scene_index": 1, "state": {"x": 1}}
    )
    for chunk in search_story_memory_tool("harbor", "铜钥匙 秘密", top_k=50, memory=novel):
        assert "另一个项目" not in chunk.content
    state = get_entity_state_tool("harbor", "林晚", 1, 1, memory=novel)
    assert state is not None and "x" not in state.state
    assert search_story_memory_tool("harbor", "铜钥匙", memory=novel.for_tenant("t2")) == []
    # story text never shows up in dialogue search
    assert novel.search("铜钥匙 七号仓", top_k=50) == []
    with pytest.raises(InvalidInputError) as caught:
        other.add_memory_chunks([{"chapter_index": 1, "scene_index": 1, "content": "  "}])
    assert caught.value.field == "chunks[0].content"
    with pytest.raises(InvalidInputError):
        novel.for_tenant("evil\x1fstory:harbor")  # nobody can name a story space


def test_failing_embedder_leaves_memories_lexical_and_says_so(tmp_path: Path) -> None:
    embedder = OutageEmbedder()
    with Memory.open(str(tmp_path / "s.db"), embedder=embedder, workers=0) as memory:
        load_project(memory, "harbor", DEMO)
        embedder.down = True
        before = memory.instruments()["scene_context_degraded_parts_total"].value
        context = build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=memory)
        assert any(
            part.startswith("relevant_memories: embedder failed") for part in context.degraded
        )
        assert context.relevant_memories  # lexical answers still come back
        assert context.entity_states  # the database part is unaffected
        after = memory.instruments()["scene_context_degraded_parts_total"].value
        assert after == before + len(context.degraded)


def test_closed_database_degrades_every_part_and_still_writes(tmp_path: Path) -> None:
    memory = Memory.open(str(tmp_path / "s.db"), embedder=HashingEmbedder(), workers=0)
    load_project(memory, "harbor", DEMO)
    memory.close()
    out = tmp_path / "out" / "scene.json"
    context = build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=memory, output_path=out)
    assert context.relevant_memories == [] and context.entity_states == []
    assert context.timeline_context is None
    parts = {part.split(":")[0] for part in context.degraded}
    assert parts == {"relevant_memories", "entity_states", "timeline_context"}
    assert SceneMemoryContext.model_validate_json(out.read_text(encoding="utf-8")).degraded


def test_failed_json_write_is_a_warning_not_an_error(novel: Memory, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    context = build_scene_memory_context(
        PLAN, CAST, "harbor", 3, 1, memory=novel, output_path=blocker / "scene.json"
    )
    assert context.relevant_memories and context.degraded[-1].startswith("output:")


class _PlannerHandler(BaseHTTPRequestHandler):
    replies: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        content = type(self).replies.pop(0)
        payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def test_llm_planner_is_validated_and_falls_back_to_rules(novel: Memory) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PlannerHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    planner = LLMScenePlanner(f"http://127.0.0.1:{server.server_port}/v1", "planner")
    try:
        _PlannerHandler.replies = [
            json.dumps(
                {"entities": ["周伯"], "events": ["守夜人的证词"], "queries": ["守夜人 证词 雨夜"]}
            ),
            json.dumps({"entities": "周伯", "queries": []}),
        ]
        good = build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=novel, planner=planner)
        assert good.queries == ["守夜人 证词 雨夜"] and good.degraded == []
        assert [s.entity_id for s in good.entity_states] == ["周伯"]
        bad = build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=novel, planner=planner)
        assert bad.degraded == ["planner: PlannerError; used the rule planner"]
        assert PLAN.summary in bad.queries
    finally:
        planner.close()
        server.shutdown()
        server.server_close()


def test_scene_over_http_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "cli.db")
    out = tmp_path / "scene.json"
    assert (
        main(
            ["--store", store, "--embedder", "hashing", "scene", "harbor", "--demo", "-o", str(out)]
        )
        == 0
    )
    context = SceneMemoryContext.model_validate_json(out.read_text(encoding="utf-8"))
    assert context.entity_states and context.relevant_memories
    assert main(["--store", store, "--embedder", "hashing", "story", "second", str(DEMO)]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 11
    app = create_app(ServerSettings(store=store, auth=False, workers=0))
    with TestClient(app) as client:
        response = client.post(
            "/v1/scenes",
            json={
                "project_id": "second",
                "scene_plan": PLAN.model_dump(),
                "characters": CAST.model_dump(),
            },
        )
        assert response.status_code == 200, response.text
        body = SceneMemoryContext.model_validate(response.json())
        assert body.project_id == "second" and body.relevant_memories
        bad = client.post(
            "/v1/scenes", json={"project_id": "second", "scene_plan": {"chapter_index": -1}}
        )
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "scene_plan.chapter_index"
        added = client.post(
            "/v1/story/second/states",
            json={
                "states": [
                    {
                        "project_id": "second",
                        "entity_id": "沈舟",
                        "chapter_index": 2,
                        "scene_index": 9,
                        "state": {"stance": "动摇"},
                    }
                ]
            },
        )
        assert added.status_code == 200
        again = client.post(
            "/v1/scenes",
            json={
                "project_id": "second",
                "scene_plan": PLAN.model_dump(),
                "characters": CAST.model_dump(),
            },
        )
        states = {s["entity_id"]: s for s in again.json()["entity_states"]}
        assert states["沈舟"]["state"] == {"stance": "动摇"}


def test_a_scene_past_the_story_range_is_refused_not_left_empty(novel: Memory) -> None:
    """Chapter 2,000,000 or scene 10**12 gave a context with every part empty and only a
    `degraded` note; no story read takes an index past MAX_CHAPTER, so it is refused."""
    far = 2_000_000
    plan = PLAN.model_dump()
    for scene_plan, chapter, scene, field in [
        ({**plan, "chapter_index": far}, 3, 1, "scene_plan.chapter_index"),
        ({**plan, "scene_index": 10**12}, 3, 1, "scene_plan.scene_index"),
        (PLAN, far, 1, "chapter_index"),
        (PLAN, 3, 10**12, "scene_index"),
    ]:
        with pytest.raises(InvalidInputError) as caught:
            build_scene_memory_context(scene_plan, CAST, "harbor", chapter, scene, memory=novel)
        assert caught.value.field == field
    last = build_scene_memory_context(PLAN, CAST, "harbor", MAX_CHAPTER, MAX_CHAPTER, memory=novel)
    assert last.degraded == [] and last.relevant_memories
    app = create_app(ServerSettings(auth=False), memory=novel)
    with TestClient(app) as client:
        for change, field in [
            ({"chapter_index": far}, "scene_plan.chapter_index"),
            ({"scene_index": 10**12}, "scene_plan.scene_index"),
        ]:
            refused = client.post(
                "/v1/scenes", json={"project_id": "harbor", "scene_plan": {**plan, **change}}
            )
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == field
        edge = {"chapter_index": MAX_CHAPTER, "scene_index": MAX_CHAPTER}
        answered = client.post(
            "/v1/scenes", json={"project_id": "harbor", "scene_plan": {**plan, **edge}}
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["degraded"] == []


def _project(folder: Path, chapters: dict[str, str], states: str = "") -> Path:
    (folder / "chapters").mkdir(parents=True, exist_ok=True)
    for name, text in chapters.items():
        (folder / "chapters" / name).write_text(text, encoding="utf-8")
    if states:
        (folder / "states.jsonl").write_text(states, encoding="utf-8")
    return folder


def test_a_reloaded_project_keeps_no_chunk_of_text_it_no_longer_has(tmp_path: Path) -> None:
    folder = _project(
        tmp_path / "p",
        {
            "chapter_01_v2.md": "序章的开头，没有场景标题。\n\n## 场景 1\n林晚拿到刻着OLDTEXT的铜钥匙。\n",
            "chapter_02.md": "## 场景 0\n沈舟在码头等船。\n",
        },
    )
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        assert load_project(memory, "p", folder)["chunks"] == 3
        story = memory.story("p")
        found = story.search("序章 开头 码头 铜钥匙", top_k=10)
        # text before the first heading is scene 0, as is a scene numbered 0; the file's
        # first number is its chapter
        assert {(c.chapter_index, c.scene_index) for c in found} == {(1, 0), (1, 1), (2, 0)}
        (folder / "chapters" / "chapter_01_v2.md").write_text(
            "## 场景 1\n林晚拿到刻着NEWTEXT的铜钥匙。\n", encoding="utf-8"
        )
        story.add_memory_chunks(  # a chunk the caller added to another chapter stays
            [{"chapter_index": 9, "scene_index": 1, "content": "番外：铜钥匙的来历"}]
        )
        assert load_project(memory, "p", folder)["chunks"] == 2
        texts = [c.content for c in story.search("OLDTEXT NEWTEXT 铜钥匙 序章", top_k=10)]
        assert not any("OLDTEXT" in t or "序章" in t for t in texts)
        assert any("NEWTEXT" in t for t in texts) and any("番外" in t for t in texts)


@pytest.mark.parametrize(
    ("chapters", "states", "field"),
    [
        (
            {"c1.md": "## 场景 1\n正文。\n"},
            '{"entity_id": 5, "chapter_index": 1, "scene_index": 1}\n',
            "states[0].entity_id",
        ),
        ({"c1.md": "## 场景 100000\n正文。\n"}, "", "c1.md"),
    ],
)
def test_a_bad_project_file_is_named_and_nothing_is_stored(
    tmp_path: Path, chapters: dict[str, str], states: str, field: str
) -> None:
    folder = _project(tmp_path / "p", chapters, states)
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        with pytest.raises(InvalidInputError) as caught:
            load_project(memory, "p", folder)
        assert caught.value.field == field
        assert memory.story("p").chunk_ids() == []


def test_a_scene_context_refuses_a_callers_mistakes_and_degrades_only_for_failures(
    novel: Memory, tmp_path: Path
) -> None:
    for options, field in (({"top_k": 0}, "top_k"), ({"timeline_window": -1}, "timeline_window")):
        with pytest.raises(InvalidInputError) as caught:
            build_scene_memory_context(PLAN, CAST, "harbor", 3, 1, memory=novel, **options)
        assert caught.value.field == field
    long_name = PLAN.model_dump() | {"characters": ["林晚", "X" * 201]}
    with pytest.raises(InvalidInputError) as caught:
        build_scene_memory_context(long_name, CAST, "harbor", 3, 1, memory=novel)
    assert caught.value.field == "scene_plan.characters.1"

    class Silent:
        name = "silent"

        def plan(self, scene: Any, cast: Any) -> Any:
            return None

    context = build_scene_memory_context(
        PLAN, CAST, "harbor", 3, 1, memory=novel, planner=Silent(), output_path="/tmp/a\0b.json"
    )
    assert context.relevant_memories and context.entity_states  # the rule planner's
    assert [note.split(":")[0] for note in context.degraded] == ["planner", "output"]
    assert context.timeline_context is not None
    assert all("version" in event for event in context.timeline_context["events"])
