"""Route ``POST /invocations`` to any of our routes by ``X-Amzn-SageMaker-Custom-Attributes: route=/path``.

SageMaker only forwards ``/invocations``; like the vLLM-Omni container we read the first
``route=/...`` among the custom attributes (others may sit alongside, comma-separated)
and rewrite the request path. Unlike it, a request without a route goes to the default
route (``/v1/audio/speech``) instead of an unrelated handler, and an unknown route is a
clear 404 naming the routes that exist.

One body names its protocol instead: NVIDIA's Magpie wrapper takes JSON ``{text, voice_name, language_code,
sample_rate_hz}`` on ``/invocations`` with no custom attributes (pipecat's ``NvidiaSageMakerHTTPTTSService``
sends it so), so a JSON body with ``text`` and no ``input`` and no route goes to Magpie's route. The body is
read here to tell (up to ``MAX_PEEK_BYTES``; a larger one is not Magpie's) and handed on unchanged.
"""

from __future__ import annotations

import json
import re

from fastapi import FastAPI
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from speakwire.server.json_message import parse_json
from speakwire.server.magpie.protocol import INVOCATIONS_PATH as MAGPIE_PATH
from speakwire.server.magpie.protocol import is_http_body

ROUTE_ATTRIBUTE = re.compile(r"route=(/[^\s,]+)")
CUSTOM_ATTRIBUTES = b"x-amzn-sagemaker-custom-attributes"
MAX_PEEK_BYTES = 1024 * 1024
"""The largest body read to tell whether it is Magpie's (text and a few settings)."""
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
        target = route_from_attributes(header)
        if target is None and _is_json(scope):
            receive, body = await peek_body(receive, MAX_PEEK_BYTES)
            if body is not None and _magpie_body(body):
                target = MAGPIE_PATH
        target = target or self.default_route
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


def _is_json(scope: Scope) -> bool:
    content_type = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-type"), b"")
    media = content_type.split(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _magpie_body(body: bytes) -> bool:
    if b'"text"' not in body:  # most bodies are OpenAI's: no second parse of their JSON
        return False
    try:
        return is_http_body(parse_json(body))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


async def peek_body(receive: Receive, limit: int) -> tuple[Receive, bytes | None]:
    """Read a request body of at most ``limit`` bytes; a ``receive`` that hands it on again, and the body (None
    when it is longer, or the client left before its end)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit or not message.get("more_body", False):
            break
    last = messages[-1]
    whole = last["type"] == "http.request" and not last.get("more_body", False) and size <= limit
    body = b"".join(m.get("body", b"") for m in messages) if whole else None

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay, body
