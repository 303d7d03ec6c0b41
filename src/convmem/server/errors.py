"""The service's one error body and the table that maps exceptions to HTTP statuses.

Every 4xx/5xx answer is ``{"error": {"type", "message", "field", "details"?}}``
(:class:`ErrorBody` in the OpenAPI document). :func:`error_response` is the one place an
exception becomes such an answer; :func:`documented` lists, for a route, the error
statuses it can return, so that ``/openapi.json`` says what clients will get.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from convmem.errors import WIRE, ConvmemError, InvalidInputError

__all__ = [
    "ErrorBody",
    "ForbiddenError",
    "UnauthorizedError",
    "documented",
    "error_body",
    "error_response",
    "http_error_response",
    "validation_response",
]

logger = logging.getLogger(__name__)

# Order matters: the first matching class wins (TurnConflictError is an InvalidInputError).
STATUS: list[tuple[type[BaseException], int, str]] = list(WIRE)

# pydantic names the member of a union that failed: int, constrained-str, tuple[...], ...
UNION_TAG = re.compile(r"^(int|str|bool|float|none|constrained-\w+|[\w-]+\[.*\])$")
ERROR_BODY_REF = "#/components/schemas/ErrorBody"
HTTP_KINDS = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}

DESCRIPTIONS = {
    400: "invalid_json or invalid_body: the body is not UTF-8 JSON, or nests too deeply",
    401: "unauthorized: no API key, or an unknown or revoked one",
    403: "forbidden: the route needs the admin key",
    404: "not_found: no such job, note or key in the caller's tenant",
    409: "turn_conflict: a turn id already stored with other text",
    413: "body_too_large: the body is over the server's max_body_bytes",
    422: "invalid_input: a field has the wrong type, range or value; `field` names it",
    503: "store_unavailable or embedder_unavailable: retry later",
    504: "flush_timeout: the index backlog did not drain in time",
}


class UnauthorizedError(Exception):
    """No API key, or one that maps to no tenant (401)."""


class ForbiddenError(Exception):
    """The route needs the admin key (403)."""


class ErrorProblem(BaseModel):
    """One problem of a request that had several."""

    field: str | None = Field(description="the offending field, e.g. turns[3].text")
    message: str


class ErrorInfo(BaseModel):
    type: str = Field(description="a stable machine-readable kind, e.g. invalid_input")
    message: str = Field(description="what happened and how to fix it")
    field: str | None = Field(description="the offending field as a path, or null")
    details: list[ErrorProblem] | None = Field(
        default=None, description="every problem, present only when there are several"
    )


class ErrorBody(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorInfo


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of these error statuses, each an :class:`ErrorBody`."""
    return {
        status: {"model": ErrorBody, "description": DESCRIPTIONS[status]} for status in statuses
    }


def _printable(text: str) -> str:
    # An echoed lone surrogate would make the error itself unencodable.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(
    status: int,
    kind: str,
    message: str,
    field: str | None,
    details: Sequence[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The one error shape, as a response."""
    error: dict[str, Any] = {
        "type": kind,
        "message": _printable(message),
        "field": None if field is None else _printable(field),
    }
    if details:
        error["details"] = [
            {
                "field": None if item.get("field") is None else _printable(str(item["field"])),
                "message": _printable(str(item.get("message", ""))),
            }
            for item in details
        ]
    return JSONResponse(status_code=status, content={"error": error}, headers=headers)


def error_response(exc: BaseException) -> JSONResponse:
    """The one place exceptions become HTTP errors."""
    if isinstance(exc, UnauthorizedError):
        return error_body(401, "unauthorized", str(exc), "authorization")
    if isinstance(exc, ForbiddenError):
        return error_body(403, "forbidden", str(exc), "authorization")
    for kind, status, name in STATUS:
        if isinstance(exc, kind):
            field = getattr(exc, "field", None)
            details = getattr(exc, "errors", None) if isinstance(exc, InvalidInputError) else None
            if details and len(details) <= 1:
                details = None
            return error_body(status, name, str(exc), field, details)
    if isinstance(exc, ConvmemError):
        return error_body(500, "internal_error", str(exc), None)
    logger.exception("unhandled error", exc_info=exc)
    return error_body(500, "internal_error", "internal error; see the server log", None)


def field_path(loc: Sequence[Any]) -> str | None:
    """``("body", "turns", 3, "text")`` -> ``turns[3].text``; pydantic's union tags dropped."""
    path = ""
    for part in loc:
        if part in ("body", "query", "path", "header"):
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif UNION_TAG.match(str(part)):
            continue  # a union member's tag such as "tuple[str, str]", not a field
        else:
            path += f".{part}" if path else str(part)
    return path or None


def _is_json(content_type: str | None) -> bool:
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def validation_response(
    exc: RequestValidationError, *, content_type: str | None = None
) -> JSONResponse:
    """FastAPI's request validation errors in the one error shape (400 for bad JSON).

    ``content_type``: the request's header; FastAPI reads a body as JSON only when it says
    so, and otherwise failed it as "not a valid dictionary", naming no field.
    """
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        reason = first.get("ctx", {}).get("error", first.get("msg"))
        return error_body(400, "invalid_json", f"the body is not valid JSON: {reason}", None)
    if isinstance(exc.body, bytes | bytearray) and exc.body and not _is_json(content_type):
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type"
        return error_body(
            422,
            "invalid_input",
            f"the body was sent with {sent}; send JSON with the header "
            "Content-Type: application/json",
            "content-type",
        )
    problems = [
        {"field": field_path(error.get("loc", ())), "message": str(error.get("msg", ""))}
        for error in errors
    ]
    field = problems[0]["field"] if problems else None
    message = "; ".join(
        f"{p['field']}: {p['message']}" if p["field"] else str(p["message"]) for p in problems
    )
    return error_body(422, "invalid_input", message, field, problems if len(problems) > 1 else None)


def http_error_response(
    status: int, detail: Any, headers: Mapping[str, str] | None
) -> JSONResponse:
    """Starlette's own errors (unknown route, wrong method, unreadable body) in the one shape.

    The headers are kept: a 405 carries ``Allow``.
    """
    message = detail if isinstance(detail, str) else "bad request"
    if status == 400 and "parsing the body" in message:
        message = "the body could not be read: send UTF-8 JSON"
    if status == 405:
        allowed = (headers or {}).get("Allow", "")
        message = f"method not allowed here; this route accepts {allowed or 'no other method'}"
    return error_body(status, HTTP_KINDS.get(status, "http_error"), message, None, headers=headers)
