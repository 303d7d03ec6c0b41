"""The HTTP memory service (FastAPI): ``create_app(settings)``, run by ``convmem serve``."""

from convmem.server.app import ServerSettings, create_app, error_response

__all__ = ["ServerSettings", "create_app", "error_response"]
