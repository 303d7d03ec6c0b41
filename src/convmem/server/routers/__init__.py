"""One FastAPI router per concern; :func:`convmem.server.app.create_app` includes them all."""

from convmem.server.routers import admin, conversations, governance, jobs, ops, search, story

ROUTERS = [
    conversations.router,
    search.router,
    governance.router,
    jobs.router,
    story.router,
    admin.router,
    ops.router,
]

__all__ = ["ROUTERS"]
