"""Optional API key for HTTP routes (``Authorization: Bearer <key>``); only the probes stay open.

/metrics and the API docs say a lot about a deployment (traffic, voices, versions), so with a key they
need it too — Prometheus sends it with ``authorization: {credentials: KEY}`` — unless the operator opens
them (``--public-metrics``).

WebSocket sessions authenticate inside the stream (see ``stream/``), because
SageMaker strips headers; this middleware only looks at plain HTTP requests.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

PROBE_PATHS = frozenset({"/health", "/ready", "/ping"})
OBSERVABILITY_PATHS = frozenset({"/metrics", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"})


def key_matches(expected: str, offered: str | None) -> bool:
    return offered is not None and hmac.compare_digest(expected.encode(), offered.encode())


def bearer_token(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


class ApiKeyMiddleware:
    def __init__(
        self, app: ASGIApp, api_key: str, *, trust_invocations: bool = False, public_metrics: bool = False
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.trust_invocations = trust_invocations
        """In SageMaker mode, /invocations is authenticated by IAM and arrives with headers stripped."""
        self.open_paths = PROBE_PATHS | OBSERVABILITY_PATHS if public_metrics else PROBE_PATHS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        trusted = self.trust_invocations and scope.get("speakwire.sagemaker_invocation", False)
        if scope["type"] != "http" or scope["path"] in self.open_paths or trusted:
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        if key_matches(self.api_key, bearer_token(headers.get("authorization"))):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "message": "Missing or invalid API key: send 'Authorization: Bearer <key>'.",
                    "type": "AuthenticationError",
                    "param": None,
                    "code": 401,
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
            }
        )
        await send({"type": "http.response.body", "body": body})
