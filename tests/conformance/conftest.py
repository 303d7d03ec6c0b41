"""Backends under the conformance suite: SQLite (a real file), PostgreSQL (a real server)
and Citus (a real 3-node cluster, ``tests/conformance/citus_fixture.py``).

PostgreSQL comes from ``CONVMEM_TEST_POSTGRES_URL`` (``scripts/test`` starts one when the
server and pgvector are installed; ``.ci/run`` installs them). Outside CI an unreachable
server skips the PostgreSQL cases with the reason; in CI (``CI`` set) it fails them.
Every test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from citus_fixture import citus_base_url

BACKENDS = ["sqlite", "postgres", "citus"]


def postgres_base_url() -> str:
    """The server URL, or skip (fail in CI) with the reason it is not usable."""
    url = os.environ.get("CONVMEM_TEST_POSTGRES_URL")
    reason = None
    if not url:
        reason = "CONVMEM_TEST_POSTGRES_URL is not set (scripts/postgres install && start)"
    else:
        try:
            import psycopg

            with psycopg.connect(url, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # any failure to reach it is the reason to report
            reason = f"PostgreSQL at {url} is not reachable: {exc}"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL backend: {reason}")
        pytest.skip(reason)
    assert url is not None
    return url


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL of the backend under test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.db'}"
        return
    base = citus_base_url() if backend == "citus" else postgres_base_url()
    schema = "t_" + uuid.uuid4().hex[:12]
    joiner = "&" if "?" in base else "?"
    yield f"{base}{joiner}schema={schema}"
    drop_schema(base, schema)
