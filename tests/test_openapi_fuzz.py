"""Generated requests from /openapi.json (schemathesis strategies) never get a 5xx.

schemathesis's pytest plugin does not load under this pytest, so its Hypothesis
strategies drive a plain Hypothesis test: one property per operation of the schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import HashingEmbedder, Memory
from convmem.server import ServerSettings, create_app
from helpers import make_turns


@pytest.fixture(scope="module")
def operations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    memory = Memory.open(str(folder / "fuzz.db"), embedder=HashingEmbedder(), workers=0)
    # the app does not own this Memory, so the transport's per-call lifespan leaves it open
    app = create_app(ServerSettings(auth=False), memory=memory)
    memory.add_turns("c", make_turns(["我喜欢靠窗的座位。", "好的。", "记住这个"]))
    memory.flush()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    yield [result.ok() for result in schema.get_all_operations()]
    memory.close()


def test_every_operation_is_in_the_schema(operations: list[Any]) -> None:
    assert len(operations) >= 15


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_operation_answers_5xx(operations: list[Any], data: st.DataObject) -> None:
    operation = data.draw(st.sampled_from(operations))
    case = data.draw(operation.as_strategy())
    response = case.call()
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:300])
    if response.status_code >= 400:
        assert set(response.json()) == {"error"}  # one error shape everywhere
