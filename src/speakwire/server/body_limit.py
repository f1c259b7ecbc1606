"""One limit on every request body, multipart and chunked included, before a route buffers it.

Routes have their own, tighter limits (a reference clip, a voice archive); this one stops a client
from making the server read an unbounded body into memory on any route, including routes that
parse the body before their own checks run. A declared ``Content-Length`` over the limit is refused
before anything is read; a chunked body is counted as it arrives. Either way the route's body read
raises ``PayloadTooLargeError``, which the error handlers turn into a 413 with the usual JSON shape.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from speakwire.errors import PayloadTooLargeError

MAX_BODY_BYTES = 48 * 1024 * 1024
"""Room for the largest upload a route takes (a 25 MiB reference clip) sent as base64 JSON."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), None)
        too_big = declared is not None and declared.isdigit() and int(declared) > self.max_bytes
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            if too_big:
                raise self._error(int(declared or 0))
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._error(seen)
            return message

        await self.app(scope, limited, send)

    def _error(self, size: int) -> PayloadTooLargeError:
        limit_mib = self.max_bytes / 2**20
        return PayloadTooLargeError(
            f"Request body is over {limit_mib:g} MiB ({size / 2**20:.1f} MiB seen); send less, or stream text over "
            "the WebSocket."
        )
