"""ASGI middleware: the body size limit, and request timing with one access-log line each.

The access log (logger ``convmem.server.access``, INFO) has one line per request:
method, route template (never the raw path, which holds ids), status, duration in ms and
a short hash of the tenant. Bodies, query strings and keys are never logged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convmem.metrics import Histogram
from convmem.server.errors import error_body

__all__ = ["BodyLimit", "RequestLog", "tenant_hash"]

access_log = logging.getLogger("convmem.server.access")


def tenant_hash(tenant: str | None) -> str:
    """A stable 8-hex-digit tag of a tenant name for logs ('-' when none)."""
    if not tenant:
        return "-"
    return hashlib.sha256(tenant.encode("utf-8", "backslashreplace")).hexdigest()[:8]


class BodyLimit:
    """Rejects bodies over ``limit`` bytes with 413 before the app reads them."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._reject(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_body(
            413,
            "body_too_large",
            f"request body is larger than {self.limit} bytes; send fewer turns per request",
            None,
        )
        await response(scope, receive, send)


class RequestLog:
    """Times each request into ``request_seconds[(method, route)]`` and logs one line."""

    def __init__(self, app: ASGIApp, request_seconds: dict[tuple[str, str], Histogram]) -> None:
        self.app = app
        self.request_seconds = request_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what the client sees if the app raises before answering

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            self._record(scope, status, time.perf_counter() - began)

    def _record(self, scope: MutableMapping[str, Any], status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")
        key = (str(scope.get("method", "")), str(route))
        histogram = self.request_seconds.get(key)
        if histogram is None:
            histogram = self.request_seconds.setdefault(key, Histogram("http_request_seconds"))
        histogram.observe(seconds)
        tenant = (scope.get("state") or {}).get("tenant")
        access_log.info(
            "%s %s %d %.1fms tenant=%s", key[0], key[1], status, seconds * 1000, tenant_hash(tenant)
        )
