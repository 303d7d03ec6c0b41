"""Story memory and the demo: story, scene, demo."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from convmem.cli.commands.data import ingest_file, show_hits
from convmem.cli.common import (
    bounded_int,
    drain_index,
    open_memory,
    print_json,
    read_text_file,
    seconds,
    settings_of,
)
from convmem.errors import InvalidInputError

__all__ = ["DEMO_QUERIES", "register"]

DEMO_QUERIES = [
    ("我的护照什么时候到期？", None),
    ("团队下季度主推什么产品", None),
    ("我在饮食和座位上有什么偏好", None),
    ("报告要什么时候交给谁", {"conversation_id": "demo_work"}),
    ("华东区销售额是多少", None),
]


def cmd_story(args: argparse.Namespace) -> int:
    from convmem.story import load_project

    with open_memory(args) as memory:
        print_json(load_project(memory, args.project, Path(args.folder)))
    return 0


def _read_plan(args: argparse.Namespace) -> tuple[Any, Any]:
    from convmem.story import CharactersConfig, ScenePlan

    if not args.plan:
        raise InvalidInputError("scene needs --plan FILE (or --demo)", field="--plan")
    plan = ScenePlan.model_validate_json(read_text_file(args.plan, field="--plan"))
    characters = (
        CharactersConfig.model_validate_json(read_text_file(args.characters, field="--characters"))
        if args.characters
        else CharactersConfig()
    )
    return plan, characters


def cmd_scene(args: argparse.Namespace) -> int:
    from convmem.story import ScenePlan, build_scene_memory_context, load_project
    from convmem.story.loader import read_characters

    with open_memory(args) as memory:
        if args.demo:
            folder = resources.files("convmem") / "data" / "story_demo"
            with resources.as_file(folder) as demo:
                load_project(memory, args.project, demo)
                plan = ScenePlan.model_validate_json((demo / "scene_plan.json").read_text("utf-8"))
                characters = read_characters(demo)
        else:
            plan, characters = _read_plan(args)
        context = build_scene_memory_context(
            plan,
            characters,
            args.project,
            args.chapter if args.chapter is not None else plan.chapter_index,
            args.scene if args.scene is not None else plan.scene_index,
            memory=memory,
            output_path=args.output,
            top_k=args.top_k,
        )
        if args.output is None:
            print_json(context.model_dump(mode="json"))
        else:
            print(
                f"wrote {args.output}: {len(context.entity_states)} entity states, "
                f"{len(context.relevant_memories)} memories, "
                f"{len((context.timeline_context or {}).get('events', []))} timeline events"
                + (f"; degraded: {context.degraded}" if context.degraded else ""),
                file=sys.stderr,
            )
    return 0


def _fresh_demo_store() -> str:
    from convmem.store import default_store_path

    path = default_store_path().with_name("demo.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    for stale in path.parent.glob("demo.db.*.usearch*"):
        stale.unlink()
    return str(path)


def cmd_demo(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    if settings.store is None:
        settings.store = _fresh_demo_store()
    sample = resources.files("convmem") / "data" / "sample_zh.jsonl"
    with resources.as_file(sample) as sample_path, open_memory(args) as memory:
        counts = ingest_file(memory, sample_path)
        drain_index(memory, args, timeout=args.timeout)
        stats = memory.stats()
        print(f"store: {stats['store']}")
        print(
            f"ingested {counts['accepted']} turns of {counts['conversations']} conversations "
            f"with {stats['embedding_model']}; {stats['chunks']} chunks"
        )
        marks_command = f"convmem --store {shlex.quote(settings.store)} marks demo_trip"
        print(
            f"Stage 2 marking kept {stats['turns_kept']} of {stats['turns_marked']} turns "
            f"(assistant small talk and speculation dropped; '{marks_command}' shows "
            f"why) and wrote {sum(stats['notes'].values())} notes\n"
        )
        for query, filters in DEMO_QUERIES:
            where = f"  filters={json.dumps(filters, ensure_ascii=False)}" if filters else ""
            print(f"? {query}{where}")
            show_hits(memory.search(query, top_k=2, filters=filters), False)
            print()
        result = memory.delete("demo_trip", turn_range=(3, 4))
        drain_index(memory, args, timeout=args.timeout)
        print(f"deleted turns 3-4 of demo_trip ({result.deleted} chunks); searching again:")
        print(f"? {DEMO_QUERIES[0][0]}")
        show_hits(memory.search(DEMO_QUERIES[0][0], top_k=2), False)
    return 0


def register(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    story = sub.add_parser(
        "story",
        parents=common,
        help="load a story project folder (chapters, characters, states)",
        description="Load a story project: chapters/*.md, characters.json, states.jsonl.",
    )
    story.add_argument("project")
    story.add_argument("folder")
    story.set_defaults(func=cmd_story)

    scene = sub.add_parser(
        "scene", parents=common, help="build the memory context of one scene as JSON"
    )
    scene.add_argument("project")
    scene.add_argument("--plan", help="ScenePlan JSON file")
    scene.add_argument("--characters", help="CharactersConfig JSON file")
    scene.add_argument("--chapter", type=bounded_int(0), help="default: the plan's chapter_index")
    scene.add_argument("--scene", type=bounded_int(0), help="default: the plan's scene_index")
    scene.add_argument("--top-k", type=bounded_int(1, 1000), default=10)
    scene.add_argument("-o", "--output", help="write the SceneMemoryContext JSON here")
    scene.add_argument(
        "--demo", action="store_true", help="load the bundled Chinese story and use its plan"
    )
    scene.set_defaults(func=cmd_scene)

    demo = sub.add_parser(
        "demo", parents=common, help="ingest the bundled Chinese sample and search it"
    )
    demo.add_argument("--timeout", type=seconds, default=120.0)
    demo.set_defaults(func=cmd_demo)
