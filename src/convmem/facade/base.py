"""What every part of the facade holds: the shared engine and the tenant it is bound to."""

from __future__ import annotations

from convmem.engine import Engine

__all__ = ["FacadeBase"]


class FacadeBase:
    """A view of one tenant on one engine."""

    def __init__(self, engine: Engine, tenant: str) -> None:
        self._engine = engine
        self._tenant = tenant

    @property
    def tenant(self) -> str:
        return self._tenant
