"""Build the memory context of one scene from the bundled Chinese mystery (雨夜码头).

    python examples/story_scene.py [scene.json]

Loads the demo project (three chapters, four characters, entity states), then asks for
chapter 3 scene 1: only what came before that scene comes back.
"""

from __future__ import annotations

import sys
import tempfile
from importlib import resources
from pathlib import Path

from convmem import HashingEmbedder, Memory
from convmem.story import SceneMemoryContext, ScenePlan, build_scene_memory_context, load_project
from convmem.story.loader import read_characters


def build(store: str, output: str | None = None) -> SceneMemoryContext:
    with (
        resources.as_file(resources.files("convmem") / "data" / "story_demo") as project,
        Memory.open(store, embedder=HashingEmbedder(), workers=0) as memory,
    ):
        print("loaded:", load_project(memory, "harbor_novel", project))
        plan = ScenePlan.model_validate_json((project / "scene_plan.json").read_text("utf-8"))
        context = build_scene_memory_context(
            plan,
            read_characters(project),
            "harbor_novel",
            plan.chapter_index,
            plan.scene_index,
            memory=memory,
            output_path=output,
        )
    for state in context.entity_states:
        print(f"state: {state.entity_id} @ {state.chapter_index}-{state.scene_index}")
    for hit in context.relevant_memories[:3]:
        print(f"memory: {hit.chapter_index}-{hit.scene_index} {hit.content[:50]}")
    return context


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        build(str(Path(scratch) / "story.db"), sys.argv[1] if len(sys.argv) > 1 else None)
