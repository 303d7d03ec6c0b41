"""The Citus cluster under test: a coordinator URL and a fresh schema per test.

The cluster comes from ``CONVMEM_TEST_CITUS_URL`` (``scripts/citus install && scripts/citus
start`` prints it). Outside CI an unset or unreachable URL skips the Citus cases with the
reason; in CI (``CI`` set) it fails them, as for PostgreSQL.

To run the conformance suite on Citus too, ``conftest.py`` adds ``"citus"`` to
``BACKENDS`` and, in ``backend_url``, takes its base URL from :func:`citus_base_url`
(see docs/deployment.md).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def citus_base_url() -> str:
    """The coordinator's URL, or skip (fail in CI) with the reason it is not usable."""
    url = os.environ.get("CONVMEM_TEST_CITUS_URL")
    reason = None
    if not url:
        reason = "CONVMEM_TEST_CITUS_URL is not set (scripts/citus install && scripts/citus start)"
    else:
        try:
            import psycopg

            with psycopg.connect(url, connect_timeout=5) as conn:
                workers = conn.execute(
                    "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' "
                    "AND shouldhaveshards AND isactive"
                ).fetchone()
            if not workers or workers[0] < 2:
                reason = f"the Citus cluster at {url} has fewer than two active workers"
        except Exception as exc:  # any failure to reach it is the reason to report
            reason = f"Citus at {url} is not usable: {exc}"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Citus backend: {reason}")
        pytest.skip(reason)
    assert url is not None
    return url


def with_schema(base: str, schema: str) -> str:
    joiner = "&" if "?" in base else "?"
    return f"{base}{joiner}schema={schema}"


def drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def citus_schema_url(prefix: str = "c_") -> Iterator[str]:
    """A store URL in a new schema on the cluster, dropped (on every node) afterwards."""
    base = citus_base_url()
    schema = prefix + uuid.uuid4().hex[:12]
    try:
        yield with_schema(base, schema)
    finally:
        drop_schema(base, schema)
