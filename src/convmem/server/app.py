"""The HTTP memory service: ``create_app(settings)`` over one :class:`~convmem.Memory`.

Every route under ``/v1`` is scoped to the caller's tenant, resolved from the API key
(``Authorization: Bearer cm_...`` or ``X-API-Key``). Errors share one JSON body,
``{"error": {"type", "message", "field"}}``, mapped from the exception tree in
:func:`error_response`. Endpoints are synchronous (FastAPI runs them in its thread pool);
the store gives each thread its own connection.
"""

# No "from __future__ import annotations": FastAPI reads the route annotations at runtime,
# and the tenant dependency is a local alias.
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convmem.errors import (
    ConvmemError,
    EmbedderError,
    EmbeddingMismatchError,
    FlushTimeoutError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    TurnConflictError,
)
from convmem.memory import Memory
from convmem.metrics import Histogram
from convmem.models import MAX_SEQ
from convmem.server.metrics import render_prometheus
from convmem.story import (
    CharactersConfig,
    EntityStateSnapshot,
    SceneMemoryContext,
    ScenePlan,
    StoryMemoryChunk,
    build_scene_memory_context,
)

__all__ = ["ServerSettings", "create_app", "error_response"]

logger = logging.getLogger(__name__)

LOOPBACK = {"localhost"}


class ServerSettings(BaseModel):
    """How ``convmem serve`` and :func:`create_app` run.

    Attributes:
        store: store URL (None: the default store in the user data directory).
        embedder: an embedder spec (``hashing``, ``all-MiniLM-L6-v2``, a folder...).
        auth: require API keys. Without auth every request acts on ``default_tenant``;
            allowed only when ``host`` is a loopback address.
        admin_key: the key that manages API keys (``/v1/admin/keys``).
        workers: index worker threads inside the server process (0: run
            ``convmem worker`` processes beside it).
        max_body_bytes: larger request bodies get 413.
        max_turns_per_request: more turns in one write get 422.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    store: str | None = None
    embedder: str | None = None
    host: str = "127.0.0.1"
    port: int = 8077
    auth: bool = True
    admin_key: str | None = None
    default_tenant: str = "default"
    workers: int = 1
    marker: str = "rules"
    policy: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    max_turns_per_request: int = 1000
    # Programmatic use and tests: ready-made parts instead of specs.
    embedder_instance: Any = None
    marker_instance: Any = None
    memory_options: dict[str, Any] = Field(default_factory=dict)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- errors -------------------------------------------------------------------------------

_STATUS: list[tuple[type[BaseException], int, str]] = [
    (TurnConflictError, 409, "turn_conflict"),
    (InvalidInputError, 422, "invalid_input"),
    (NotFoundError, 404, "not_found"),
    (EmbeddingMismatchError, 409, "embedding_mismatch"),
    (FlushTimeoutError, 504, "flush_timeout"),
    (StoreError, 503, "store_unavailable"),
    (EmbedderError, 503, "embedder_unavailable"),
]


def _body(
    status: int, kind: str, message: str, field: str | None, details: Any = None
) -> JSONResponse:
    error: dict[str, Any] = {"type": kind, "message": message, "field": field}
    if details:
        error["details"] = details
    return JSONResponse(status_code=status, content={"error": error})


def error_response(exc: BaseException) -> JSONResponse:
    """The one place exceptions become HTTP errors."""
    for kind, status, name in _STATUS:
        if isinstance(exc, kind):
            field = getattr(exc, "field", None)
            details = getattr(exc, "errors", None) if isinstance(exc, InvalidInputError) else None
            if details and len(details) <= 1:
                details = None
            return _body(status, name, str(exc), field, details)
    if isinstance(exc, ConvmemError):
        return _body(500, "internal_error", str(exc), None)
    logger.exception("unhandled error", exc_info=exc)
    return _body(500, "internal_error", "internal error; see the server log", None)


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    problems = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
        problems.append({"field": ".".join(loc) or None, "message": error.get("msg", "")})
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return _body(
            400,
            "invalid_json",
            f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}",
            None,
        )
    field = problems[0]["field"] if problems else None
    message = "; ".join(
        f"{p['field']}: {p['message']}" if p["field"] else p["message"] for p in problems
    )
    return _body(422, "invalid_input", message, field, problems if len(problems) > 1 else None)


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
        response = _body(
            413,
            "body_too_large",
            f"request body is larger than {self.limit} bytes; send fewer turns per request",
            None,
        )
        await response(scope, receive, send)


# -- request and response models -------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnsIn(_Strict):
    turns: list[dict[str, Any]] = Field(
        description="turns: turn_id (int or string ending in digits), role "
        "(user|assistant|tool|system) or speaker, text, timestamp (ISO 8601), optional name, meta"
    )


class TurnsOut(BaseModel):
    conversation_id: str
    status: Literal["accepted", "duplicate"]
    accepted_turn_ids: list[int | str]
    duplicate_turn_ids: list[int | str]
    job_id: int | None
    accepted_at: str
    message: str


class SearchIn(_Strict):
    query_text: str = Field(min_length=1, max_length=8000)
    top_k: int = Field(default=6, ge=1, le=1000)
    filters: dict[str, Any] | None = None
    hints: dict[str, Any] | None = None
    mode: Literal["hybrid", "vector", "lexical"] = "hybrid"


class DeleteIn(_Strict):
    conversation_id: str = Field(min_length=1, max_length=200)
    turn_range: tuple[int, int] | None = None
    chunk_ids: list[str] | None = Field(default=None, max_length=1000)


class UpdateIn(_Strict):
    """Either ``chunk`` (overwrite a chunk by id) or ``note_id`` with a verdict.

    A verdict is ``confirm`` (true/false), or the seed's form: ``requires_confirmation:
    false`` / ``status: "confirmed"`` to confirm, ``status: "rejected"`` to reject;
    ``evidence_level`` may be raised on confirm.
    """

    chunk: dict[str, Any] | None = None
    note_id: str | None = Field(default=None, max_length=200)
    confirm: bool | None = None
    status: Literal["confirmed", "rejected"] | None = None
    requires_confirmation: bool | None = None
    evidence_level: str | None = Field(default=None, max_length=40)


class SceneIn(_Strict):
    project_id: str = Field(min_length=1, max_length=200)
    chapter_index: int | None = Field(default=None, ge=0, le=1_000_000)
    scene_index: int | None = Field(default=None, ge=0, le=1_000_000)
    scene_plan: ScenePlan
    characters: CharactersConfig = Field(default_factory=CharactersConfig)
    top_k: int = Field(default=10, ge=1, le=100)


class StoryChunksIn(_Strict):
    chunks: list[StoryMemoryChunk] = Field(max_length=1000)


class StoryStatesIn(_Strict):
    states: list[EntityStateSnapshot] = Field(max_length=1000)


class KeyIn(_Strict):
    tenant: str = Field(min_length=1, max_length=100)
    name: str = Field(default="", max_length=200)


Metrics = dict[tuple[str, str], Histogram]
JobId = Annotated[int, Path(ge=1, le=MAX_SEQ)]


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
    owned = memory is None
    if memory is None:
        memory = _open_memory(settings)
    base = memory
    request_seconds: Metrics = {}
    admin_hash = None
    if settings.admin_key:
        from convmem.store.keys import hash_key

        admin_hash = hash_key(settings.admin_key)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        yield
        if owned:
            base.close()  # releases in-flight jobs; a restarted worker resumes them

    app = FastAPI(
        title="convmem",
        version="1",
        description="Long-term conversation memory: durable turns in, evidence out.",
        lifespan=lifespan,
    )
    app.state.memory = base

    @app.exception_handler(ConvmemError)
    async def _convmem_error(_: Request, exc: ConvmemError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}
        detail = exc.detail if isinstance(exc.detail, str) else "bad request"
        if exc.status_code == 400 and "parsing the body" in detail:
            detail = "the body could not be read: send UTF-8 JSON"
        return _body(exc.status_code, kinds.get(exc.status_code, "http_error"), detail, None)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    @app.middleware("http")
    async def _timing(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        began = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        key = (request.method, path)
        histogram = request_seconds.get(key)
        if histogram is None:
            histogram = request_seconds.setdefault(key, Histogram("http_request_seconds"))
        histogram.observe(time.perf_counter() - began)
        return response

    def caller(request: Request) -> Memory:
        """The tenant view of the API key (or the default tenant without auth)."""
        if not settings.auth:
            return base.for_tenant(settings.default_tenant)
        secret = _presented_key(request)
        if secret is None:
            raise _UnauthorizedError("send an API key: 'Authorization: Bearer cm_...' or X-API-Key")
        tenant = base.api_key_tenant(secret)
        if tenant is None:
            raise _UnauthorizedError("unknown or revoked API key")
        return base.for_tenant(tenant)

    def admin(request: Request) -> None:
        secret = _presented_key(request)
        if admin_hash is None:
            raise _ForbiddenError("no admin key is configured (set CONVMEM_ADMIN_KEY)")
        from convmem.store.keys import hash_key

        if secret is None or hash_key(secret) != admin_hash:
            raise _ForbiddenError("this route needs the admin key")

    @app.exception_handler(_UnauthorizedError)
    async def _unauthorized(_: Request, exc: _UnauthorizedError) -> JSONResponse:
        return _body(401, "unauthorized", str(exc), "authorization")

    @app.exception_handler(_ForbiddenError)
    async def _forbidden(_: Request, exc: _ForbiddenError) -> JSONResponse:
        return _body(403, "forbidden", str(exc), "authorization")

    Caller = Annotated[Memory, Depends(caller)]  # noqa: N806 (a type alias)

    @app.post("/v1/conversations/{conversation_id}/turns", status_code=202)
    def add_turns(
        conversation_id: str, body: TurnsIn, memory: Caller, response: Response
    ) -> TurnsOut:
        """Store turns durably (fsync'd) and queue them for indexing; 202 once durable.

        Re-posting the same turns is a no-op (200, ``status: duplicate``); the same id with
        other text is 409.
        """
        if len(body.turns) > settings.max_turns_per_request:
            raise InvalidInputError(
                f"{len(body.turns)} turns in one request; the limit is "
                f"{settings.max_turns_per_request}: split them into several requests",
                field="turns",
            )
        receipt = memory.add_turns(conversation_id, body.turns)
        duplicate = not receipt.accepted_turn_ids
        if duplicate:
            response.status_code = 200
        return TurnsOut(
            conversation_id=receipt.conversation_id,
            status="duplicate" if duplicate else "accepted",
            accepted_turn_ids=receipt.accepted_turn_ids,
            duplicate_turn_ids=receipt.duplicate_turn_ids,
            job_id=receipt.job_id,
            accepted_at=receipt.accepted_at.isoformat(),
            message="every turn was already stored; nothing changed"
            if duplicate
            else f"{len(receipt.accepted_turn_ids)} turns stored durably and queued for indexing",
        )

    @app.get("/v1/conversations/{conversation_id}/status")
    def status(conversation_id: str, memory: Caller) -> dict[str, Any]:
        """Index backlog, last indexed turn and failed jobs of a conversation."""
        return memory.status(conversation_id)

    @app.get("/v1/conversations/{conversation_id}/turns")
    def recent_turns(
        conversation_id: str,
        memory: Caller,
        limit: Annotated[int, Query(ge=1, le=10000)] = 50,
    ) -> list[dict[str, Any]]:
        """The newest live turns (the event log), oldest first."""
        return [
            {
                "turn_id": turn.turn_id,
                "role": turn.role,
                "name": turn.name,
                "text": turn.text,
                "timestamp": turn.timestamp.isoformat(),
            }
            for turn in memory.recent_turns(conversation_id, limit=limit)
        ]

    @app.get("/v1/conversations/{conversation_id}/marks")
    def marks(conversation_id: str, memory: Caller) -> list[dict[str, Any]]:
        """Each turn's Stage 2 mark with its reason."""
        return [mark.model_dump(mode="json") for mark in memory.marks(conversation_id)]

    @app.get("/v1/conversations/{conversation_id}/pins")
    def pins(conversation_id: str, memory: Caller) -> list[dict[str, Any]]:
        return [pin.model_dump(mode="json") for pin in memory.pins(conversation_id)]

    @app.post("/v1/search")
    def search(body: SearchIn, memory: Caller) -> dict[str, Any]:
        """Hybrid search in the caller's tenant; deleted and expired memory never returned.

        With ``hints`` (``{"strategies": [...], "params": {...}}``) the hierarchical service
        reads the tiers they ask for (STM, MTM, LTM); the hints applied are echoed.
        """
        if body.hints is not None:
            result = memory.retrieve(
                body.query_text, body.hints, filters=body.filters, top_k=body.top_k
            )
            return result.as_dict()
        hits = memory.search(
            body.query_text, top_k=body.top_k, filters=body.filters, mode=body.mode
        )
        return {"hits": [hit.model_dump(mode="json") for hit in hits], "hints": None}

    @app.post("/v1/delete")
    def delete(body: DeleteIn, memory: Caller) -> dict[str, Any]:
        """Logical delete by ``conversation_id`` + ``turn_range`` or ``chunk_ids``."""
        if body.turn_range is None and body.chunk_ids is None:
            raise InvalidInputError(
                "send turn_range or chunk_ids; to delete a whole conversation send "
                "turn_range [0, 9007199254740991]",
                field="turn_range",
            )
        result = memory.delete(body.conversation_id, body.turn_range, body.chunk_ids)
        return {
            "deleted": result.deleted,
            "turns_deleted": result.turns_deleted,
            "errors": result.errors,
        }

    @app.post("/v1/update")
    def update(body: UpdateIn, memory: Caller) -> dict[str, Any]:
        """Overwrite a chunk, or confirm/reject a note (the confirmation loop)."""
        if (body.chunk is None) == (body.note_id is None):
            raise InvalidInputError("send exactly one of chunk or note_id", field="note_id")
        if body.chunk is not None:
            result = memory.update(body.chunk)
            if result.errors and not (result.upserted or result.updated):
                raise InvalidInputError("; ".join(result.errors), field="chunk")
            return {"upserted": result.upserted, "updated": result.updated, "errors": result.errors}
        assert body.note_id is not None
        verdicts = {
            body.confirm,
            None if body.status is None else body.status == "confirmed",
            None if body.requires_confirmation is None else not body.requires_confirmation,
        } - {None}
        if len(verdicts) != 1:
            raise InvalidInputError(
                "send one verdict: confirm true/false (or status, or requires_confirmation "
                "false), and not two that disagree",
                field="confirm",
            )
        note = memory.update_note(
            body.note_id, confirm=verdicts.pop() is True, evidence_level=body.evidence_level
        )
        return note.model_dump(mode="json")

    @app.get("/v1/notes")
    def notes(
        memory: Caller,
        conversation_id: Annotated[str | None, Query(max_length=200)] = None,
        status: Literal["pending", "confirmed", "rejected"] | None = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 200,
    ) -> list[dict[str, Any]]:
        """Live notes (pending and confirmed by default)."""
        return [
            note.model_dump(mode="json")
            for note in memory.notes(conversation_id, status, limit=limit)
        ]

    @app.get("/v1/jobs/{job_id}")
    def job(job_id: JobId, memory: Caller) -> dict[str, Any]:
        return memory.job(job_id).model_dump(mode="json")

    @app.post("/v1/jobs/{job_id}/retry")
    def retry(job_id: JobId, memory: Caller) -> dict[str, Any]:
        return memory.retry_job(job_id).model_dump(mode="json")

    @app.post("/v1/story/{project_id}/chunks")
    def add_story_chunks(project_id: str, body: StoryChunksIn, memory: Caller) -> dict[str, Any]:
        """Store story memory chunks of a project (stable ids: re-sending overwrites)."""
        ids = memory.story(project_id).add_memory_chunks(body.chunks)
        return {"project_id": project_id, "chunk_ids": ids}

    @app.post("/v1/story/{project_id}/states")
    def add_story_states(project_id: str, body: StoryStatesIn, memory: Caller) -> dict[str, Any]:
        """Store entity state snapshots of a project."""
        count = memory.story(project_id).add_entity_state(*body.states)
        return {"project_id": project_id, "states": count}

    @app.post("/v1/scenes")
    def scene(body: SceneIn, memory: Caller) -> SceneMemoryContext:
        """Build the memory context of one scene (seed 003), from before the scene."""
        return build_scene_memory_context(
            body.scene_plan,
            body.characters,
            body.project_id,
            body.chapter_index if body.chapter_index is not None else body.scene_plan.chapter_index,
            body.scene_index if body.scene_index is not None else body.scene_plan.scene_index,
            memory=memory,
            top_k=body.top_k,
        )

    @app.get("/v1/policy")
    def get_policy(memory: Caller) -> dict[str, Any]:
        """The retention policy in force for the caller's tenant."""
        return memory.policy().as_dict()

    @app.put("/v1/policy")
    def put_policy(overrides: dict[str, Any], memory: Caller) -> dict[str, Any]:
        """Set the tenant's retention overrides (``{}`` clears them)."""
        return memory.set_policy(overrides or None).as_dict()

    @app.post("/v1/admin/keys", status_code=201, dependencies=[Depends(admin)])
    def create_key(body: KeyIn) -> dict[str, str]:
        """Create an API key for a tenant; the key is shown only in this response."""
        key_id, secret = base.create_api_key(body.tenant, body.name)
        return {"key_id": key_id, "key": secret, "tenant": body.tenant}

    @app.get("/v1/admin/keys", dependencies=[Depends(admin)])
    def list_keys() -> list[dict[str, Any]]:
        return base.list_api_keys()

    @app.delete("/v1/admin/keys/{key_id}", dependencies=[Depends(admin)])
    def revoke_key(key_id: str) -> dict[str, str]:
        base.revoke_api_key(key_id)
        return {"key_id": key_id, "status": "revoked"}

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        pending, failed = base.backlog(all_tenants=True)
        return {
            "status": "ok",
            "embedding_model": base.embedding.model_id,
            "backlog": pending,
            "failed_jobs": failed,
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        """Prometheus text format."""
        return render_prometheus(base, request_seconds)

    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app


class _UnauthorizedError(Exception):
    pass


class _ForbiddenError(Exception):
    pass


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return request.headers.get("x-api-key") or None


def _open_memory(settings: ServerSettings) -> Memory:
    import os

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
