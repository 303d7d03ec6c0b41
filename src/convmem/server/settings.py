"""How ``convmem serve`` and :func:`~convmem.server.create_app` run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LOOPBACK", "LogLevel", "ServerSettings"]

LOOPBACK = {"localhost"}
LogLevel = Literal["critical", "error", "warning", "info", "debug"]


class ServerSettings(BaseModel):
    """How ``convmem serve`` and :func:`create_app` run.

    Attributes:
        store: store URL (None: the default store in the user data directory).
        embedder: an embedder spec (``hashing``, ``all-MiniLM-L6-v2``, a folder...).
        auth: require API keys. Without auth every request acts on ``default_tenant``;
            allowed only when ``host`` is a loopback address, and a request addressed to a
            DNS name (``Host: attacker.example``, what a DNS-rebinding page sends) is 403.
        admin_key: the key that manages API keys (``/v1/admin/keys``).
        workers: index worker threads inside the server process (0: run
            ``convmem worker`` processes beside it).
        max_body_bytes: larger request bodies get 413.
        max_turns_per_request: more turns in one write get 422.
        heap_trim_seconds: how often freed heap memory is given back to the OS (glibc
            keeps it otherwise, and a busy server's RSS creeps up); 0 turns it off.
        log_level: the level of the ``convmem`` loggers (the access log is INFO); None
            leaves logging as the embedding program set it.
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
    log_level: LogLevel | None = None
    heap_trim_seconds: float = Field(default=30.0, ge=0, le=86400)
    # Programmatic use and tests: ready-made parts instead of specs.
    embedder_instance: Any = None
    marker_instance: Any = None
    memory_options: dict[str, Any] = Field(default_factory=dict)
