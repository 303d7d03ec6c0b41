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
