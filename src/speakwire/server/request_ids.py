"""Request ids: one id names a request everywhere it shows, in its response headers, its error bodies and its log lines.

An HTTP request's id is the client's ``X-Request-ID`` when it sent a sane one (so a caller can follow its own id
through our logs), else a new one; every response carries it back as ``x-request-id``, as OpenAI's API does (its
SDKs expose it as ``request_id``, and LiveKit's OpenAI TTS warns "no request_id provided" without it). A WebSocket
connection gets one the same way at the upgrade; its sessions bind their own per utterance (``bound``).

The current id lives in a ``ContextVar``: ``RequestIdMiddleware`` binds it around the request's handling, so code
running for the request (its handler, a streamed body, tasks it creates) reads it with ``current_request_id()``
and ``RequestIdFilter`` writes it on every log record (``record.request_id``, ``"-"`` outside any request). Threads
started with ``asyncio.to_thread`` see it too; ``loop.run_in_executor`` does not copy the context.

Dialects whose vendor has an id of its own (Deepgram's ``dg-request-id``, Cartesia's and Deepgram's error
``request_id``) send this id there, so a request has one id, not two.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
"""The request and response header (HTTP headers are case-insensitive; ASGI gives them lower-case)."""
SCOPE_KEY = "request_id"
"""Key of the connection's id in ``scope["state"]``: ``request.state.request_id`` / ``websocket.state.request_id``."""
MAX_LENGTH = 128
"""The longest client id we take (OpenAI's ``req_…`` ids are 36 characters, a UUID 36)."""
NO_REQUEST = "-"
"""``record.request_id`` of a log line that is about no request (start-up, the drain, the engine's threads)."""

_current: ContextVar[str | None] = ContextVar("speakwire_request_id", default=None)
_HEADER_BYTES = HEADER.encode()
_STARTS = frozenset({"http.response.start", "websocket.accept", "websocket.http.response.start"})
"""ASGI messages that carry response headers: an HTTP response, a WebSocket upgrade's answer, its denial."""


def new_request_id() -> str:
    """A fresh id: a random UUID, the form Deepgram and Cartesia use for theirs."""
    return str(uuid.uuid4())


def is_sane(value: str) -> bool:
    """Whether a client's id may be echoed and logged as it is: 1-128 printable ASCII characters, no spaces."""
    return 0 < len(value) <= MAX_LENGTH and all("!" <= c <= "~" for c in value)


def accepted_request_id(value: str | None) -> str:
    """The client's ``X-Request-ID`` when it is sane (``is_sane``), else a new id.

    An id with spaces, control characters or non-ASCII would let a client forge log lines or break a header, and a
    long one would bloat every line; such an id is replaced rather than cleaned, so what we echo is what was sent.
    """
    return value if value is not None and is_sane(value) else new_request_id()


def current_request_id() -> str | None:
    """The id bound for the running code (``bound``, ``RequestIdMiddleware``), or None outside any request."""
    return _current.get()


@contextmanager
def bound(request_id: str) -> Iterator[str]:
    """Bind ``request_id`` for the block: its code, and tasks created inside it, read it as the current id.

    A session binds each utterance's id around the code that serves it (and the tasks it starts for it), so their
    log lines name the utterance rather than the connection.
    """
    token = _current.set(request_id)
    try:
        yield request_id
    finally:
        _current.reset(token)


def scope_request_id(scope: Scope) -> str:
    """The id ``RequestIdMiddleware`` gave a connection (``scope["state"]["request_id"]``).

    Falls back to the current id, then a new one, for an app served without the middleware.
    """
    stored = scope.get("state", {}).get(SCOPE_KEY)
    return stored if isinstance(stored, str) else current_request_id() or new_request_id()


def _header(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == _HEADER_BYTES:
            return bytes(value).decode("latin-1")
    return None


class RequestIdMiddleware:
    """Pure ASGI (no buffering, WebSockets pass through): gives every HTTP request and WebSocket connection its id.

    The id is stored in ``scope["state"]`` (the same dict the layers around this one hold, so Starlette's error
    handler outside sees it too), bound as the current id while the app runs, and put as ``x-request-id`` on the
    response's start message (HTTP responses of every kind, the WebSocket upgrade's accept or denial). It replaces
    any ``x-request-id`` the app set itself, so a response names one id.

    It must run outside everything that answers a request itself: Starlette's ``ServerErrorMiddleware`` (the 500 of
    an unhandled error), the API-key check (401), the body limit (413), and SageMaker's ``InvocationsRouter`` (its
    404 for an unknown route; the request it rewrites keeps the id, as the scope's ``state`` is shared).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = accepted_request_id(_header(scope))
        scope.setdefault("state", {})[SCOPE_KEY] = request_id
        header = (_HEADER_BYTES, request_id.encode())

        def send_with_id(message: Message) -> Awaitable[None]:
            if message["type"] in _STARTS:
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _HEADER_BYTES]
                message = {**message, "headers": [*headers, header]}
            return send(message)  # not a coroutine of its own: one frame less per message

        token = _current.set(request_id)
        await self.app(scope, receive, send_with_id)
        # Reset only when the app returns: an exception leaves the id bound, so the server's own report of it
        # (uvicorn's "Exception in ASGI application", logged once the exception is out of the app) names the
        # request. uvicorn runs every request and connection in a task of its own, so the id goes no further.
        _current.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record as ``record.request_id`` (``"-"`` when there is none).

    Install it on handlers, not loggers: a logger's filters see only the records logged on that very logger, a
    handler's see every record that reaches it. A record that already has an id (``extra={"request_id": …}``,
    for a line logged on behalf of a request from outside it) keeps it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(getattr(record, "request_id", None), str):
            record.request_id = _current.get() or NO_REQUEST
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: [req=%(request_id)s] %(message)s"
"""``speakwire serve``'s log line: every line names its request (``req=-`` when it is about none)."""


def install_log_filter(handlers: list[logging.Handler]) -> None:
    """Add a ``RequestIdFilter`` to each handler that has none (idempotent)."""
    for handler in handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
