"""API keys of the HTTP service, hashed at rest (SQLite store mixin).

A key is ``cm_`` + 32 random bytes (URL-safe base64), shown once when created; the store
keeps its SHA-256 (keys are high-entropy random tokens, so a fast hash is enough: there
is nothing to brute-force) and the tenant it maps to.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from convmem.errors import InvalidInputError, NotFoundError
from convmem.ids import check_tenant
from convmem.models import text_problem
from convmem.store.contract import Backend

__all__ = ["KEYS_SCHEMA", "KeyTables", "hash_key"]

KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    revoked_at REAL
)
"""


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class KeyTables(Backend):
    """Mixin for :class:`~convmem.store.base.SQLStore`."""

    def create_api_key(self, tenant: str, name: str = "") -> tuple[str, str]:
        """Create a key for ``tenant``; returns ``(key_id, secret)``. The secret is not stored.
        Every path that makes keys (the library, the CLI, the admin route) checks here."""
        tenant = check_tenant(tenant)
        if not isinstance(name, str) or len(name) > 200 or text_problem(name):
            raise InvalidInputError(
                f"name must be a string of at most 200 characters, got {name!r}", field="name"
            )
        secret = "cm_" + secrets.token_urlsafe(32)
        key_id = "key_" + secrets.token_hex(6)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO api_keys (key_id, key_hash, tenant, name, created_at) "
                "VALUES (?,?,?,?,?)",
                (key_id, hash_key(secret), tenant, name, self.now()),
            )
        return key_id, secret

    def api_key_tenant(self, secret: str) -> str | None:
        """The tenant of a live key, or None."""
        row = (
            self._db()
            .execute(
                "SELECT tenant FROM api_keys WHERE key_hash=? AND revoked_at IS NULL",
                (hash_key(secret),),
            )
            .fetchone()
        )
        return row[0] if row else None

    def list_api_keys(self) -> list[dict[str, Any]]:
        return [
            {"key_id": r[0], "tenant": r[1], "name": r[2], "created_at": r[3], "revoked_at": r[4]}
            for r in self._db().execute(
                "SELECT key_id, tenant, name, created_at, revoked_at FROM api_keys ORDER BY "
                "created_at"
            )
        ]

    def revoke_api_key(self, key_id: str) -> None:
        with self._write() as conn:
            changed = conn.execute(
                "UPDATE api_keys SET revoked_at=? WHERE key_id=? AND revoked_at IS NULL",
                (self.now(), key_id),
            ).rowcount
        if not changed:
            raise NotFoundError(f"no live API key {key_id}")
