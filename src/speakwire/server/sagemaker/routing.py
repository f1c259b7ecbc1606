"""Route ``POST /invocations`` to any of our routes by ``X-Amzn-SageMaker-Custom-Attributes: route=/path``.

SageMaker only forwards ``/invocations``; like the vLLM-Omni container we read the first
``route=/...`` among the custom attributes (others may sit alongside, comma-separated)
and rewrite the request path. Unlike it, a request without a route goes to the default
route (``/v1/audio/speech``) instead of an unrelated handler, and an unknown route is a
clear 404 naming the routes that exist.
"""

from __future__ import annotations

import json
import re

from fastapi import FastAPI
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

ROUTE_ATTRIBUTE = re.compile(r"route=(/[^\s,]+)")
CUSTOM_ATTRIBUTES = b"x-amzn-sagemaker-custom-attributes"
INVOCATION_SCOPE_KEY = "speakwire.sagemaker_invocation"
"""Set on rewritten scopes, so auth can trust SageMaker's IAM-authenticated invocations."""


def route_from_attributes(value: str | None) -> str | None:
    """The first ``route=/path`` in a custom-attributes header, or None."""
    if not value:
        return None
    match = ROUTE_ATTRIBUTE.search(value)
    return match.group(1) if match else None


class InvocationsRouter:
    """ASGI middleware: rewrites ``POST /invocations`` before the app's router sees it."""

    def __init__(self, app: ASGIApp, *, default_route: str, api: FastAPI) -> None:
        self.app = app
        self.default_route = default_route
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/invocations":
            await self.app(scope, receive, send)
            return
        header = next(
            (v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == CUSTOM_ATTRIBUTES), None
        )
        target = route_from_attributes(header) or self.default_route
        path, _, query = target.partition("?")
        method = self._method_for(path, scope["method"])
        if method is None:
            await self._not_found(send, path)
            return
        rewritten = dict(scope, path=path, raw_path=path.encode(), method=method)
        rewritten[INVOCATION_SCOPE_KEY] = True
        if query:
            rewritten["query_string"] = query.encode()
        await self.app(rewritten, receive, send)

    def _method_for(self, path: str, method: str) -> str | None:
        """The method to dispatch with: the request's own, or GET for read-only routes (e.g. /v1/models)."""
        if path == "/invocations":
            return None
        for candidate in (method, "GET"):
            probe = {"type": "http", "path": path, "method": candidate, "root_path": ""}
            if any(route.matches(probe)[0] == Match.FULL for route in self.api.router.routes):
                return candidate
        return None

    async def _not_found(self, send: Send, path: str) -> None:
        names = sorted(p for p in self.api.openapi().get("paths", {}) if p.startswith("/v1"))
        message = f"Unknown route '{path}' in X-Amzn-SageMaker-Custom-Attributes. Routes: {', '.join(names)}."
        body = json.dumps({"error": {"message": message, "type": "NotFoundError", "param": "route", "code": 404}})
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})
