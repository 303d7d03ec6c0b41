"""``/docs`` (Swagger UI) and ``/redoc`` from assets shipped in a package, not a CDN.

The assets come from the ``fastapi-offline`` wheel (Swagger UI 5, which reads OpenAPI
3.1, and ReDoc), served under ``/docs-assets``; the pages work on a machine offline.
"""

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS", "install_docs"]

ASSETS = "/docs-assets"
_FILES = Path(fastapi_offline.__file__).parent / "static"


def install_docs(app: FastAPI) -> None:
    """Add /docs and /redoc (not in the schema) and the static assets they load."""
    app.mount(ASSETS, StaticFiles(directory=_FILES), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
