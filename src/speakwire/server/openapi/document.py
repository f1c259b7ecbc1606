"""The server's ``/openapi.json``: FastAPI's document, completed with what FastAPI cannot see.

Each route's real answers and requests come from ``routes.ROUTES``, the dialects' error bodies go into
``components.schemas``, and the document describes this server as it was started: text fields get its
``--max-input-chars`` as their ``maxLength``, language fields the pattern of what its engine speaks, fields its
engine cannot use ``null`` only (so the document is built once the engine is loaded), and with an API key the
routes ``ApiKeyMiddleware`` guards name the key's headers as their security (and answer 401); without one, no
route does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from speakwire.engines.base import EngineInfo
from speakwire.server.auth import OBSERVABILITY_PATHS, PROBE_PATHS
from speakwire.server.openapi.limits import set_engine_fields, set_text_limits
from speakwire.server.openapi.responses import component_schemas
from speakwire.server.openapi.routes import document_routes
from speakwire.settings import Settings

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer (also Token, Api-Key)."},
    "xi-api-key": {"type": "apiKey", "in": "header", "name": "xi-api-key", "description": "ElevenLabs' header."},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "Cartesia's older header."},
}
"""The headers that carry the key (``server/auth.py``: any of them, on any route)."""


def install(app: FastAPI, settings: Settings, engine: Callable[[], EngineInfo | None]) -> None:
    """Serve ``app``'s OpenAPI document completed as the module docstring says, for a server with ``settings``
    whose engine ``engine()`` describes (None until it is loaded)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:  # FastAPI builds the document once and caches it: complete it then
            document = generate()
            document.setdefault("components", {}).setdefault("schemas", {}).update(component_schemas())
            document_routes(document)
            set_text_limits(document, settings.max_input_chars)
            info = engine()
            set_engine_fields(document, info)
            _set_security(document, settings)
            if info is None:
                app.openapi_schema = None  # asked before the engine loaded: built again, with its languages, later
                return document
        return generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _set_security(document: dict[str, Any], settings: Settings) -> None:
    open_paths = PROBE_PATHS | OBSERVABILITY_PATHS if settings.public_metrics else PROBE_PATHS
    if settings.api_key:
        document["components"]["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            if settings.api_key and path not in open_paths:
                operation["security"] = [{name: []} for name in SECURITY_SCHEMES]
            else:
                operation.get("responses", {}).pop("401", None)
