"""Optional API key for HTTP routes; only the probes stay open.

The key travels in whichever header the client's protocol uses for its vendor's key
(``offered_key``): ``Authorization: Bearer`` (OpenAI, Cartesia), ``Authorization: Token``
(Deepgram), ``Authorization: Api-Key`` (Baseten), ``xi-api-key`` (ElevenLabs) or ``X-API-Key``
(Cartesia's older clients), so every dialect's SDK authenticates with its own api_key setting.

/metrics and the API docs say a lot about a deployment (traffic, voices, versions), so with a key they
need it too — Prometheus sends it with ``authorization: {credentials: KEY}`` — unless the operator opens
them (``--public-metrics``).

WebSocket sessions authenticate inside the stream (see ``stream/``), because
SageMaker strips headers; this middleware only looks at plain HTTP requests.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

PROBE_PATHS = frozenset({"/health", "/ready", "/ping"})
OBSERVABILITY_PATHS = frozenset({"/metrics", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"})


def key_matches(expected: str, offered: str | None) -> bool:
    return offered is not None and hmac.compare_digest(expected.encode(), offered.encode())


def bearer_token(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


KEY_HEADERS = ("xi-api-key", "x-api-key")
"""Vendor key headers, besides ``Authorization``, that carry our key."""
KEY_QUERY_PARAMS = ("api_key", "xi-api-key", "token", "access_token")
"""Query parameters that carry it, for clients that cannot set headers (browsers' WebSocket)."""


AUTHORIZATION_SCHEMES = ("bearer", "token", "api-key")
"""``Authorization`` schemes that carry our key: ``Bearer`` (OpenAI, Cartesia), ``Token`` (Deepgram), ``Api-Key``
(Baseten: LiveKit's Baseten plugins send ``Api-Key KEY``)."""


def authorization_key(header: str | None) -> str | None:
    """The credential of ``Authorization: <scheme> <key>`` for a scheme in ``AUTHORIZATION_SCHEMES`` (any case)."""
    if not header:
        return None
    scheme, _, credential = header.strip().partition(" ")
    if scheme.lower() in AUTHORIZATION_SCHEMES and credential.strip():
        return credential.strip()
    return None


def offered_key(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> str | None:
    """The API key a request offers in any header (or query parameter) a supported protocol uses."""
    key = authorization_key(headers.get("authorization"))
    for name in KEY_HEADERS:
        key = key or headers.get(name) or None
    for name in KEY_QUERY_PARAMS:
        key = key or (query or {}).get(name) or None
    return key


UNAUTHORIZED_BODIES: dict[str, Callable[[], dict[str, object]]] = {
    # ElevenLabs: the SDK raises ApiError with this body.
    "/v1/text-to-speech/": lambda: {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}},
    # Cartesia's error shape (error_code, title, message, request_id).
    "/tts/": lambda: {
        "error_code": "unauthorized",
        "title": "Invalid API key",
        "request_id": str(uuid.uuid4()),
        "message": "Send the key as 'Authorization: Bearer <key>' or 'X-API-Key'.",
    },
    # NVIDIA Magpie's SageMaker HTTP wrapper: {"error": message}.
    "/v1/magpie/": lambda: {"error": "Invalid API key."},
    # Deepgram's (err_code, err_msg, request_id).
    "/v1/speak": lambda: {
        "err_code": "INVALID_AUTH",
        "err_msg": "Invalid credentials.",
        "request_id": str(uuid.uuid4()),
    },
}
"""Path prefix → the 401 body in the shape that API answers with (its SDK hands it to the user)."""


def unauthorized_body(path: str) -> dict[str, object]:
    """The 401 body for ``path``: its vendor's shape (``UNAUTHORIZED_BODIES``), else OpenAI's."""
    for prefix, body in UNAUTHORIZED_BODIES.items():
        if path.startswith(prefix):
            return body()
    return {
        "error": {
            "message": "Missing or invalid API key: send 'Authorization: Bearer <key>'.",
            "type": "AuthenticationError",
            "param": None,
            "code": 401,
        }
    }


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
        if key_matches(self.api_key, offered_key(headers)):
            await self.app(scope, receive, send)
            return
        body = json.dumps(unauthorized_body(scope["path"])).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
            }
        )
        await send({"type": "http.response.body", "body": body})
