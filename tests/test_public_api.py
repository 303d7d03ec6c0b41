"""One public namespace, sorted, with every name importable."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import convmem
from convmem import InvalidInputError, Memory, errors


def test_all_is_sorted_and_importable() -> None:
    assert convmem.__all__ == sorted(convmem.__all__)
    for name in convmem.__all__:
        assert hasattr(convmem, name), name


def test_exception_tree() -> None:
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.TurnConflictError, errors.InvalidInputError)
    assert issubclass(errors.FilterError, errors.InvalidInputError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.FlushTimeoutError, TimeoutError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ConvmemError)


def test_importing_the_library_loads_no_http_client() -> None:
    """httpx is loaded by what calls a remote endpoint (the OpenAI-compatible embedder, the
    chat client, the HTTP client), not by ``import convmem``: it brought some 10,000
    objects that every full collection of the garbage collector walked in every process."""
    import subprocess
    import sys

    code = "import sys, convmem; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


BAD_OPTIONS = [
    ("url", ""),
    ("url", 123),
    ("workers", "2"),
    ("workers", -1),
    ("workers", True),
    ("workers", 10**6),
    ("durability", "fast"),
    ("max_text_chars", 0),
    ("retry_base_seconds", float("nan")),
    ("retry_max_seconds", -1),
    ("max_attempts", 2.5),
    ("lease_seconds", 0),
    ("job_batch", "64"),
    ("allow_model_change", "yes"),
    ("model_cache_dir", 5),
    ("ann_min_rows", -1),
    ("vector_weight", float("inf")),
    ("marker", "rules"),
    ("sweep_seconds", "60"),
    ("sweep_seconds", -1),
    ("user_dict", "/no/such/dictionary.txt"),
    ("clock", 5),
    ("chunking", {"max_turns": 4}),
]


def test_memory_open_refuses_a_bad_option_before_it_opens_anything(tmp_path: Path) -> None:
    """Each wrong option is an InvalidInputError naming it, raised before a file is made or
    a worker started (a string for ``workers`` was a TypeError; a million workers started
    threads until the machine refused, and left them running)."""
    threads = threading.active_count()
    for name, value in BAD_OPTIONS:
        path = tmp_path / f"{name}.db"
        options: dict[str, Any] = {"embedder": "hashing"}
        if name == "url":
            target: Any = value
        else:
            target, options[name] = str(path), value
        with pytest.raises(InvalidInputError) as caught:
            Memory.open(target, **options)
        assert caught.value.field == name, (name, value)
        assert not path.exists(), name
    with pytest.raises(InvalidInputError) as caught:
        Memory.open(str(tmp_path / "r.db"), retry_base_seconds=10, retry_max_seconds=5)
    assert caught.value.field == "retry_max_seconds"
    assert threading.active_count() == threads
    # a pathlib.Path is a store path too
    with Memory.open(tmp_path / "p.db", embedder="hashing", workers=0) as memory:
        memory.add_turns("c", [{"turn_id": "1", "role": "user", "text": "我喜欢靠窗的座位"}])
        memory.run_pending()
        assert memory.search("座位")
    assert (tmp_path / "p.db").exists()


def test_public_methods_refuse_wrong_arguments_naming_them(tmp_path: Path) -> None:
    """A truthy string was a yes (``purge(all_tenants="no")`` purged every tenant), a
    string of ids was read as its characters, and None or a wrong shape failed with a
    TypeError or KeyError deep inside."""
    with Memory.open(tmp_path / "m.db", embedder="hashing", workers=0) as memory:
        other = memory.for_tenant("other")
        other.add_turns("c", [{"turn_id": "1", "role": "user", "text": "我对花生过敏"}])
        other.run_pending()
        other.delete("c")
        calls: list[tuple[str, Any]] = [
            ("turns", lambda: memory.add_turns("c", None)),
            ("chunks", lambda: memory.upsert_chunks(None)),
            ("timeout", lambda: memory.flush("1")),
            ("timeout", lambda: memory.flush(float("nan"))),
            ("all_tenants", lambda: memory.purge(all_tenants="no")),
            ("all_tenants", lambda: memory.backlog(all_tenants="yes")),
            ("all_tenants", lambda: memory.job_counts(all_tenants=1)),
            ("kept_only", lambda: memory.recent_turns("c", kept_only="yes")),
            ("chunk_ids", lambda: memory.chunks(chunk_ids="abc")),
            ("batch_size", lambda: memory.reindex(batch_size=0)),
            ("parts", lambda: memory.count_degraded("2")),
            ("name", lambda: memory.create_api_key("t", 5)),
            ("point", lambda: memory.latest_entity_state("p", "e", (1,))),
            ("point[1]", lambda: memory.latest_entity_state("p", "e", (1, -1))),
            ("entity_id", lambda: memory.latest_entity_state("p", 5, (1, 1))),
            ("chapters", lambda: memory.entity_timeline("p", "x")),
            ("project_id", lambda: memory.entity_timeline(5, (1, 2))),
            ("rows", lambda: memory.put_entity_states("p", "notalist")),
            ("rows[0]", lambda: memory.put_entity_states("p", [5])),
            ("rows[0].entity_id", lambda: memory.put_entity_states("p", [{"chapter_index": 1}])),
            (
                "rows[0].project_id",
                lambda: memory.put_entity_states(
                    "p",
                    [{"project_id": "q", "entity_id": "e", "chapter_index": 1, "scene_index": 1}],
                ),
            ),
        ]
        for field, call in calls:
            with pytest.raises(InvalidInputError) as caught:
                call()
            assert caught.value.field == field
        # the refused purge removed nothing of the other tenant's deleted text
        assert other.purge()["turns"] == 1
        row = {"entity_id": "e", "chapter_index": 1, "scene_index": 2, "state": {"x": 1}}
        assert memory.put_entity_states("p", [row]) == 1
        found = memory.latest_entity_state("p", "e", (1, 2))
        assert found is not None and found["project_id"] == "p"
