from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem import HashingEmbedder, Memory
from convmem.governance import KeepAllMarker


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memory.db'}"


@pytest.fixture
def memory(store_url: str) -> Iterator[Memory]:
    with Memory.open(
        store_url, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as mem:
        yield mem


@pytest.fixture
def threaded_memory(store_url: str) -> Iterator[Memory]:
    with Memory.open(
        store_url, embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=1
    ) as mem:
        yield mem
