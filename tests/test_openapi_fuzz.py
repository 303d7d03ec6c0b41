"""Schema-driven fuzzing of the served OpenAPI document (schemathesis 4).

The app runs over a real SQLite file with auth on and a real API key. For every operation
in ``/openapi.json``, schemathesis draws requests from the documented schema (a fixed
number per operation, derandomised so CI runs the same requests every time) and each
response must be documented: no 5xx other than the documented 503/504, a documented status
code and content type, a body that matches the documented schema (errors: ``ErrorBody``).

schemathesis's pytest plugin does not load under this pytest, so its Hypothesis
strategies drive a plain Hypothesis test per operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from convmem import HashingEmbedder, Memory
from convmem.server import ServerSettings, create_app
from helpers import make_turns

ADMIN = "admin-key-for-the-fuzz-run"
EXAMPLES_PER_OPERATION = 25
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

CONTRACT = {
    ("POST", "/v1/conversations/{conversation_id}/turns"),
    ("GET", "/v1/conversations/{conversation_id}/turns"),
    ("GET", "/v1/conversations/{conversation_id}/status"),
    ("GET", "/v1/conversations/{conversation_id}/marks"),
    ("GET", "/v1/conversations/{conversation_id}/pins"),
    ("POST", "/v1/search"),
    ("POST", "/v1/delete"),
    ("POST", "/v1/update"),
    ("GET", "/v1/notes"),
    ("GET", "/v1/policy"),
    ("PUT", "/v1/policy"),
    ("GET", "/v1/jobs/{job_id}"),
    ("POST", "/v1/jobs/{job_id}/retry"),
    ("POST", "/v1/story/{project_id}/chunks"),
    ("POST", "/v1/story/{project_id}/states"),
    ("POST", "/v1/scenes"),
    ("GET", "/v1/admin/keys"),
    ("POST", "/v1/admin/keys"),
    ("DELETE", "/v1/admin/keys/{key_id}"),
    ("GET", "/v1/admin/status"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
}

# Operations whose generated requests must get past validation at least once, so the run
# exercises the store and not only the 422 path.
REACH_THE_STORE = {
    ("POST", "/v1/conversations/{conversation_id}/turns"),
    ("POST", "/v1/search"),
    ("POST", "/v1/delete"),
    ("PUT", "/v1/policy"),
    ("POST", "/v1/story/{project_id}/chunks"),
    ("POST", "/v1/scenes"),
    ("POST", "/v1/admin/keys"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    memory = Memory.open(str(folder / "fuzz.db"), embedder=HashingEmbedder(), workers=0)
    # the app does not own this Memory, so the transport's per-call lifespan leaves it open
    app = create_app(ServerSettings(admin_key=ADMIN), memory=memory)
    _, secret = memory.create_api_key("fuzz-tenant", "fuzz")
    tenant = memory.for_tenant("fuzz-tenant")
    tenant.add_turns("c", make_turns(["我喜欢靠窗的座位。", "好的。", "记住这个"]))
    tenant.flush()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = {
        (op.method.upper(), op.path): op for op in (r.ok() for r in schema.get_all_operations())
    }
    yield {"operations": operations, "key": secret, "spec": schema.raw_schema}
    memory.close()


def test_the_schema_lists_exactly_the_contract_routes(served: dict[str, Any]) -> None:
    assert set(served["operations"]) == CONTRACT


def _headers(path: str, key: str) -> dict[str, str]:
    secret = ADMIN if path.startswith("/v1/admin/") else key
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("operation_key", sorted(CONTRACT), ids=lambda k: f"{k[0]} {k[1]}")
def test_generated_requests_get_documented_answers(
    served: dict[str, Any], operation_key: tuple[str, str]
) -> None:
    operation = served["operations"][operation_key]
    headers = _headers(operation_key[1], served["key"])
    seen: list[int] = []

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        response = case.call(headers=headers)
        seen.append(response.status_code)
        assert response.status_code not in range(500, 600) or response.status_code in (503, 504), (
            case.method,
            case.formatted_path,
            response.text[:500],
        )
        case.validate_response(response, checks=CHECKS)

    check()
    assert seen, "no request was generated"
    assert 401 not in seen and 403 not in seen, f"the key was not accepted: {seen}"
    if operation_key in REACH_THE_STORE:
        assert any(200 <= status < 300 for status in seen), f"nothing got through: {seen}"


# Operations with something to make invalid (a path or query parameter, or a body).
NEGATABLE = sorted(
    key
    for key in CONTRACT
    if "{" in key[1] or key[0] in ("POST", "PUT") or key[1] in ("/v1/notes", "/v1/admin/status")
)


@pytest.mark.parametrize("operation_key", NEGATABLE, ids=lambda k: f"{k[0]} {k[1]}")
def test_invalid_requests_get_documented_4xx_never_5xx(
    served: dict[str, Any], operation_key: tuple[str, str]
) -> None:
    """Requests drawn to violate the schema: wrong types, missing fields, out-of-range."""
    operation = served["operations"][operation_key]
    headers = _headers(operation_key[1], served["key"])

    @settings(
        max_examples=15,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    def check(case: Any) -> None:
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
        case.validate_response(response, checks=CHECKS)

    check()


def test_errors_are_documented_as_the_one_error_body(served: dict[str, Any]) -> None:
    spec = served["spec"]
    assert "HTTPValidationError" not in str(spec)
    assert set(spec["components"]["securitySchemes"]) == {
        "bearer",
        "apiKey",
        "adminBearer",
        "adminApiKey",
    }
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            errors = {code: r for code, r in operation["responses"].items() if code >= "400"}
            assert "422" in errors or not path.startswith("/v1"), (method, path)
            for code, response in errors.items():
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorBody"), (method, path, code)
            schemes = {name for option in operation.get("security", []) for name in option}
            if path.startswith("/v1/admin/"):
                assert schemes == {"adminBearer", "adminApiKey"} and "403" in errors
            elif path.startswith("/v1/"):
                assert schemes == {"bearer", "apiKey"} and "401" in errors
            else:
                assert not schemes and set(errors) == {"503"}


def test_generated_bodies_without_a_key_get_401_in_the_one_shape(served: dict[str, Any]) -> None:
    operation = served["operations"][("POST", "/v1/search")]

    @settings(max_examples=10, derandomize=True, database=None, deadline=None)
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        response = case.call(headers={"Authorization": "Bearer cm_not_a_key"})
        assert response.status_code == 401
        case.validate_response(response, checks=CHECKS)

    check()
