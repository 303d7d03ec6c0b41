"""The HTTP memory service: ``create_app(settings)`` over one :class:`~convmem.Memory`.

Every route under ``/v1`` is scoped to the caller's tenant, resolved from the API key
(``Authorization: Bearer cm_...`` or ``X-API-Key``; :mod:`convmem.server.auth`). Errors
share one JSON body, ``{"error": {"type", "message", "field"}}``, mapped from the exception
tree in :func:`~convmem.server.errors.error_response`. The routes live in
:mod:`convmem.server.routers`, one router per concern, each route one facade call.
Endpoints are synchronous (FastAPI runs them in its thread pool); the store gives each
thread its own connection.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from convmem import Memory
from convmem.errors import ConvmemError, InvalidInputError
from convmem.server.auth import Service
from convmem.server.docs import install_docs
from convmem.server.errors import (
    ForbiddenError,
    UnauthorizedError,
    error_response,
    http_error_response,
    validation_response,
)
from convmem.server.middleware import BodyLimit, LoopbackHost, RequestLog
from convmem.server.routers import ROUTERS
from convmem.server.settings import LOOPBACK, LogLevel, ServerSettings
from convmem.store.keys import hash_key
from convmem.text import bilingual
from convmem.worker.heap import HeapTrimmer

__all__ = ["ServerSettings", "create_app", "error_response"]

logger = logging.getLogger(__name__)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(settings: ServerSettings | None = None, *, memory: Memory | None = None) -> FastAPI:
    """Build the service. Opens the store now (or uses ``memory``); closes it on shutdown.

    Raises:
        InvalidInputError: auth is off on a non-loopback host.
    """
    settings = settings or ServerSettings()
    if not settings.auth and not _is_loopback(settings.host):
        raise InvalidInputError(
            f"--no-auth is allowed only on a loopback address, not {settings.host}; create API "
            "keys with 'convmem keys create' instead",
            field="auth",
        )
    if settings.log_level is not None:
        _configure_logging(settings.log_level)
    owned = memory is None
    base = memory if memory is not None else _open_memory(settings)
    admin_hash = hash_key(settings.admin_key) if settings.admin_key else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        trimmer = HeapTrimmer(interval_seconds=settings.heap_trim_seconds)
        trimmer.start()
        # the word dictionary of questions in the other language than their memory, read
        # now (about 1.5 s, some 45 MB) so that no request waits for it
        threading.Thread(target=bilingual.lexicon, name="convmem-dictionary", daemon=True).start()
        yield
        trimmer.stop()
        if owned:
            base.close()  # releases in-flight jobs; a restarted worker resumes them

    app = FastAPI(
        title="convmem",
        version="1",
        description="Long-term conversation memory: durable turns in, evidence out.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    state = Service(memory=base, settings=settings, admin_hash=admin_hash)
    app.state.convmem = state
    _add_exception_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    install_docs(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if not settings.auth:
        app.add_middleware(LoopbackHost)
    app.add_middleware(RequestLog, request_seconds=state.request_seconds)
    return app


def _add_exception_handlers(app: FastAPI) -> None:
    # ConvmemError and the auth errors are answered inside the app; the Exception handler
    # runs in Starlette's outermost middleware, which logs and re-raises after answering.
    @app.exception_handler(ConvmemError)
    @app.exception_handler(UnauthorizedError)
    @app.exception_handler(ForbiddenError)
    @app.exception_handler(Exception)
    async def domain_error(_: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(exc, content_type=request.headers.get("content-type"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = exc.headers
        if exc.status_code == 405:  # Starlette names only the first route at this path
            headers = {**(headers or {}), "Allow": _allowed_methods(app, request)}
        return http_error_response(exc.status_code, exc.detail, headers)


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method some route accepts at the request's path (GET /v1/policy and PUT)."""
    methods: set[str] = set()
    routes = [*app.routes, *(route for router in ROUTERS for route in router.routes)]
    for route in routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches({**request.scope, "method": "GET"})
            if match is not Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods))


def _configure_logging(level: LogLevel) -> None:
    """Set the convmem loggers' level; give them a stderr handler if nothing else logs."""
    package = logging.getLogger("convmem")
    package.setLevel(level.upper())
    if not package.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        package.addHandler(handler)


def _open_memory(settings: ServerSettings) -> Memory:
    from convmem.embed import resolve_embedder
    from convmem.governance import resolve_marker

    embedder = settings.embedder_instance
    if embedder is None and settings.embedder:
        embedder = resolve_embedder(settings.embedder)
    options: dict[str, Any] = {
        "embedder": embedder,
        "workers": settings.workers,
        "marker": settings.marker_instance
        or resolve_marker(
            settings.marker,
            llm_url=os.environ.get("CONVMEM_LLM_URL"),
            llm_model=os.environ.get("CONVMEM_LLM_MODEL"),
            llm_key=os.environ.get("CONVMEM_LLM_KEY"),
        ),
        "policy": settings.policy,
        **settings.memory_options,
    }
    return Memory.open(settings.store, **options)
