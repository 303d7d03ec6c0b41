"""ASGI middleware: the body size and nesting limits, request timing with one access-log
line each, and (auth off) the refusal of requests addressed to a DNS name.

The access log (logger ``convmem.server.access``, INFO) has one line per request:
method, route template (never the raw path, which holds ids), status, duration in ms and
a short hash of the tenant. Bodies, query strings and keys are never logged.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
import time
from collections.abc import MutableMapping
from itertools import accumulate
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convmem.metrics import Histogram
from convmem.server.errors import error_body

__all__ = [
    "MAX_JSON_DEPTH",
    "BodyLimit",
    "LoopbackHost",
    "RequestLog",
    "json_depth",
    "rebindable_host",
    "tenant_hash",
]

#: The request methods the service's metrics label as themselves; any other is "other".
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
access_log = logging.getLogger("convmem.server.access")

#: The deepest nesting of arrays and objects a body may have. Python's JSON parser gives
#: up near 1,000 levels, with an error that did not say why.
MAX_JSON_DEPTH = 256
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))


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
        # only a body with that many brackets can nest that deep (most bodies: no scan)
        if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH:
            depth = json_depth(body)
            if depth > MAX_JSON_DEPTH:
                response = error_body(
                    400,
                    "invalid_body",
                    f"the body nests arrays and objects {depth} levels deep; the limit is "
                    f"{MAX_JSON_DEPTH}: send flatter JSON",
                    None,
                )
                await response(scope, receive, send)
                return
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


def json_depth(body: bytes) -> int:
    """How deeply a JSON text nests arrays and objects (brackets inside strings not counted)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    return max(accumulate(1 if byte in b"[{" else -1 for byte in brackets), default=0)


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
        # path_format: the template without convertors ({conversation_id}, not :path)
        matched = scope.get("route")
        route = getattr(matched, "path_format", None) or getattr(matched, "path", "unmatched")
        method = str(scope.get("method", ""))
        # a fixed set of labels: a client's made-up method is one series, not one each
        key = (method if method in HTTP_METHODS else "other", str(route))
        histogram = self.request_seconds.get(key)
        if histogram is None:
            histogram = self.request_seconds.setdefault(key, Histogram("http_request_seconds"))
        histogram.observe(seconds)
        tenant = (scope.get("state") or {}).get("tenant")
        access_log.info(
            "%s %s %d %.1fms tenant=%s", key[0], key[1], status, seconds * 1000, tenant_hash(tenant)
        )


def rebindable_host(host: str | None) -> str | None:
    """The name in a ``Host`` header that someone else's DNS may answer for, or None.

    That is a dotted name that is neither an address nor under ``.localhost``: a page
    that rebinds its own name (``attacker.example``) to 127.0.0.1 sends it, and reads
    what the service answers as if it were its own origin. An address, ``localhost`` and
    a one-label name (resolved by this machine and its own network) are not.
    """
    if not host:
        return None
    if host.startswith("["):  # [::1]:8077
        return None
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".").lower()
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    if "." not in name or name.endswith(".localhost"):
        return None
    return name


class LoopbackHost:
    """Auth off: refuses (403) a request whose ``Host`` is a name another DNS server may
    answer for (:func:`rebindable_host`). Without a key, only the loopback address keeps the
    memory to this machine, and a DNS-rebinding page reaches that address under its own
    name: it could read and delete every turn."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = dict(scope.get("headers") or []).get(b"host")
            name = rebindable_host(raw.decode("latin-1") if raw is not None else None)
            if name is not None:
                response = error_body(
                    403,
                    "forbidden",
                    f"this service runs without API keys (--no-auth) and answers only "
                    f"requests addressed to this machine (127.0.0.1, localhost, [::1]), not "
                    f"to {name!r}; connect to the loopback address, or serve with API keys",
                    "host",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
