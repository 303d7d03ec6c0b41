"""A typed client for the HTTP service, shaped like :class:`~convmem.Memory`.

>>> from convmem.client import Client
>>> with Client("http://127.0.0.1:8077", api_key="cm_...") as memory:  # doctest: +SKIP
...     memory.add_turns("conv_abc", [{"turn_id": 1, "role": "user", "text": "..."}])
...     memory.flush()
...     hits = memory.search("护照哪天到期", top_k=3)

:class:`Client` and :class:`AsyncClient` share one layer that turns each method into a
request and each answer into a value (:class:`_Requests`); they differ only in how the
request is sent. Errors arrive as the service's one body, ``{"error": {"type", "message",
"field"}}``, and are raised as the library's own exception classes (one table,
:data:`ERRORS`), so code written against ``Memory`` catches the same errors remotely.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from convmem.errors import WIRE, ConvmemError, FilterError, FlushTimeoutError, InvalidInputError
from convmem.models import AddTurnsReceipt, Hit

__all__ = ["ERRORS", "AsyncClient", "AuthenticationError", "Client"]


class AuthenticationError(ConvmemError, PermissionError):
    """The service refused the API key (401) or the route needs the admin key (403)."""


#: The error body's ``type`` -> the exception the library raises for the same failure.
ERRORS: dict[str, type[ConvmemError]] = {
    **{name: cls for cls, _, name in WIRE},
    # bodies the service refuses before they reach a route, and the key checks
    "invalid_json": InvalidInputError,
    "invalid_body": InvalidInputError,
    "body_too_large": InvalidInputError,
    "unauthorized": AuthenticationError,
    "forbidden": AuthenticationError,
}


@dataclass(frozen=True)
class _Call:
    """One request and how to read its answer."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None
    read: Callable[[Any], Any] = field(default=lambda data: data)


def _error(response: httpx.Response) -> ConvmemError:
    """The library exception for an error response."""
    try:
        error = response.json()["error"]
        kind, message, where = error.get("type"), str(error.get("message")), error.get("field")
    except (ValueError, KeyError, TypeError):
        kind, message, where = None, f"HTTP {response.status_code}: {response.text[:200]}", None
    cls = ERRORS.get(str(kind), ConvmemError)
    if cls is InvalidInputError and isinstance(where, str) and where.split(".")[0] == "filters":
        cls = FilterError  # one wire type for both; the library raises its subclass for filters
    if issubclass(cls, InvalidInputError):
        return cls(message, field=where)
    return cls(message)


def _conversation(conversation_id: str) -> str:
    """The URL path of a conversation: the id percent-encoded as one segment, so that
    ``order%41`` is not read as ``orderA`` and ``a/b?c#d`` stays one id. A dot is encoded
    too: ``.`` and ``..`` would otherwise be resolved away by URL normalisation."""
    if not isinstance(conversation_id, str):
        raise InvalidInputError(
            f"conversation_id must be a string, got {type(conversation_id).__name__}",
            field="conversation_id",
        )
    segment = quote(conversation_id, safe="").replace(".", "%2E")
    return f"/v1/conversations/{segment}"


class _Requests:
    """Memory's methods as requests (shared by the sync and async clients)."""

    @staticmethod
    def add_turns(conversation_id: str, turns: Sequence[Mapping[str, Any]]) -> _Call:
        return _Call(
            "POST",
            f"{_conversation(conversation_id)}/turns",
            {"turns": list(turns)},
            read=lambda data: AddTurnsReceipt.model_validate(data),
        )

    @staticmethod
    def status(conversation_id: str) -> _Call:
        return _Call("GET", f"{_conversation(conversation_id)}/status")

    @staticmethod
    def search(
        query_text: str,
        top_k: int = 6,
        filters: Mapping[str, Any] | None = None,
        *,
        mode: str = "hybrid",
        hints: Mapping[str, Any] | None = None,
        granularity: str | None = None,
        min_score: float | None = None,
        decompose: bool | None = None,
    ) -> _Call:
        body = {"query_text": query_text, "top_k": top_k, "filters": filters, "mode": mode}
        if hints is not None:
            body["hints"] = hints
        if granularity is not None:
            body["granularity"] = granularity
        if min_score is not None:
            body["min_score"] = min_score
        if decompose is not None:
            body["decompose"] = decompose
        return _Call(
            "POST",
            "/v1/search",
            body,
            read=lambda data: [Hit.model_validate(h) for h in data["hits"]],
        )

    @staticmethod
    def delete(
        conversation_id: str,
        turn_range: Sequence[int] | None = None,
        chunk_ids: Sequence[str] | None = None,
    ) -> _Call:
        body = {
            "conversation_id": conversation_id,
            "turn_range": list(turn_range) if turn_range is not None else None,
            "chunk_ids": list(chunk_ids) if chunk_ids is not None else None,
        }
        return _Call("POST", "/v1/delete", body)

    @staticmethod
    def update(chunk: Mapping[str, Any]) -> _Call:
        return _Call("POST", "/v1/update", {"chunk": dict(chunk)})

    @staticmethod
    def notes(conversation_id: str | None = None, status: str | None = None) -> _Call:
        params = {k: v for k, v in (("conversation_id", conversation_id), ("status", status)) if v}
        return _Call("GET", "/v1/notes", params=params)

    @staticmethod
    def update_note(
        note_id: str, confirm: bool = True, *, evidence_level: str | None = None
    ) -> _Call:
        body: dict[str, Any] = {"note_id": note_id, "confirm": confirm}
        if evidence_level is not None:
            body["evidence_level"] = evidence_level
        return _Call("POST", "/v1/update", body)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _unsendable(value: Any, where: str) -> tuple[str, str] | None:
    """The first place in a body that JSON cannot carry, and why: a NaN or infinite number
    (JSON has none), or an object that is not a string, number, bool, None, list or dict."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, f"{value!r} is not a finite number")
    if value is None or isinstance(value, str | int | bool):
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return where, f"has the key {key!r}; JSON keys are strings"
            found = _unsendable(item, f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _unsendable(item, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    return where, f"is a {type(value).__name__}, which JSON cannot carry"


def _build(http: httpx.Client | httpx.AsyncClient, call: _Call) -> httpx.Request:
    """The request for a call; what JSON cannot carry is refused as the service would
    refuse it, naming the field, instead of failing inside the JSON encoder."""
    found = _unsendable(call.body, "")
    if found is not None:
        where, why = found
        raise InvalidInputError(f"{where or 'body'} {why}", field=where or None)
    return http.build_request(call.method, call.path, json=call.body, params=call.params)


def _answer(call: _Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise _error(response)
    return call.read(response.json())


class Client:
    """The HTTP service as a ``Memory``-shaped object (blocking)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout)

    def _send(self, call: _Call) -> Any:
        return _answer(call, self._http.send(_build(self._http, call)))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        build = getattr(_Requests, name)  # AttributeError for names the service lacks
        return lambda *args, **kwargs: self._send(build(*args, **kwargs))

    def flush(self, conversation_id: str, timeout: float = 60.0) -> None:
        """Wait until the conversation's backlog is indexed (FlushTimeoutError after timeout)."""
        deadline = time.monotonic() + timeout
        while self._send(_Requests.status(conversation_id))["backlog"]:
            if time.monotonic() >= deadline:
                raise FlushTimeoutError(
                    f"conversation {conversation_id!r} still indexing after {timeout:g}s"
                )
            time.sleep(0.05)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """The HTTP service as a ``Memory``-shaped object for ``asyncio`` code."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout
        )

    async def _send(self, call: _Call) -> Any:
        return _answer(call, await self._http.send(_build(self._http, call)))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        build = getattr(_Requests, name)
        return lambda *args, **kwargs: self._send(build(*args, **kwargs))

    async def flush(self, conversation_id: str, timeout: float = 60.0) -> None:
        """Wait until the conversation's backlog is indexed (FlushTimeoutError after timeout)."""
        deadline = time.monotonic() + timeout
        while (await self._send(_Requests.status(conversation_id)))["backlog"]:
            if time.monotonic() >= deadline:
                raise FlushTimeoutError(
                    f"conversation {conversation_id!r} still indexing after {timeout:g}s"
                )
            await asyncio.sleep(0.05)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
