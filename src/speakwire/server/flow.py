"""Where audio meets the transport: a reader that takes nothing for ``write_stall_timeout_s`` is let go.

Two halves of one flow control. The lead (``synthesis.Utterance``, ``Settings.max_lead_s``) keeps synthesis
at most a bounded amount ahead of what the reader has taken: every protocol reads its utterance's events
and writes each to its transport before it asks for the next, and a transport that is full makes that
write wait (uvicorn waits for the socket to drain before the next HTTP body part or WebSocket message;
Wyoming awaits ``drain()``), so the utterance sees the reader stop. This module is the other half: such a
write that waits ``write_stall_timeout_s`` means the reader took nothing for that long, and the stream is
ended the protocol's way (a WebSocket closed 1008 with a reason, an HTTP body cut short, a Wyoming
connection closed), its admission slot given back, a log line and ``speakwire_stalled_closes_total``.

``WriteStall`` watches the writes of one connection (the WebSocket channel, ``StallingResponse`` for every
streamed or whole-file HTTP body, a Wyoming connection). A write only notes when it started; one timer per
timeout period checks whether the write in flight is older than the timeout (``asyncio.timeout`` around
each write cost ~14 us a write here, its cancelled timer handles piling up in the loop's heap), so a
reader that keeps up pays two attribute stores per write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

FILE_PART_BYTES = 64 * 1024
"""A whole-file body goes out in parts of this size, so its writes wait for the reader too."""


class ReaderStalled(Exception):
    """A write to the transport waited ``WriteStall.timeout_s`` without the reader taking anything."""


class WriteStall:
    """The write-stall rule of one connection: its timeout (None: never) and its protocol, for the count.

    One write at a time (each transport here sends under a lock, or in order).
    """

    def __init__(self, timeout_s: float | None, protocol: str, state: ServerState | None = None) -> None:
        self.timeout_s = timeout_s
        self.protocol = protocol
        self.state = state
        self._since: float | None = None
        """When the write in flight started (loop time), None between writes."""
        self._writer: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._fired = False

    def noticed(self, what: str) -> None:
        """Log the stall and count it in ``speakwire_stalled_closes_total{protocol}``."""
        logger.warning("%s: the client took nothing for %g s; %s", self.protocol, self.timeout_s or 0, what)
        metrics = self.state.metrics if self.state is not None else None
        if metrics is not None:
            metrics.stalled_closes.labels(engine=metrics.engine, protocol=self.protocol).inc()

    async def write(self, write: Awaitable[None]) -> None:
        """Await ``write``; raises ``ReaderStalled`` if it takes ``timeout_s`` or more."""
        timeout_s = self.timeout_s
        if timeout_s is None:
            await write
            return
        loop = asyncio.get_running_loop()
        self._since, self._writer = loop.time(), asyncio.current_task()
        if self._timer is None:
            self._timer = loop.call_later(timeout_s, self._check)
        try:
            await write
        except asyncio.CancelledError:
            writer = self._writer
            if self._fired and writer is not None and writer.uncancel() == 0:
                raise ReaderStalled from None
            raise
        finally:
            self._since = None

    def _check(self) -> None:
        """Timer: stop the write in flight if it is ``timeout_s`` old; re-arm while writes go on."""
        self._timer = None
        since, timeout_s = self._since, self.timeout_s
        if since is None or timeout_s is None or self._fired:
            return  # no write in flight: the next write arms the timer again
        loop = asyncio.get_running_loop()
        waited = loop.time() - since
        if waited >= timeout_s and self._writer is not None:
            self._fired = True
            self._writer.cancel()
        else:
            self._timer = loop.call_later(timeout_s - waited, self._check)

    def close(self) -> None:
        """Stop watching (the connection is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def write_stall(state: ServerState, protocol: str) -> WriteStall:
    """The server's write-stall rule (``Settings.write_stall_timeout_s``; 0 turns it off) for ``protocol``."""
    timeout_s = state.settings.write_stall_timeout_s
    return WriteStall(timeout_s if timeout_s and timeout_s > 0 else None, protocol, state)


class StallingResponse(StreamingResponse):
    """A streamed HTTP body whose every write is timed by a ``WriteStall``.

    When a write stalls the body is cut short: the body's iterator is closed at once (its ``finally``
    gives the utterance's slot back) and the app returns without the final empty part, so uvicorn closes
    the connection and the client sees an incomplete body, never one that looks complete.

    ``release`` (idempotent) runs however the response ends, also when the body never started: a
    generator closed before its first step runs none of its code, so an admission held inside it would
    never be given back (the start message's write stalled, or failed).
    """

    def __init__(
        self,
        content: AsyncIterable[bytes],
        stall: WriteStall,
        *,
        media_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
        release: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(content, status_code=status_code, headers=headers, media_type=media_type)
        self._stall = stall
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stall = self._stall

        def timed_send(message: Message) -> Awaitable[None]:
            return stall.write(send(message))  # not a coroutine of its own: one frame less per body part

        try:
            await super().__call__(scope, receive, timed_send)
        except ReaderStalled:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
            stall.noticed("ending the response body")
        finally:
            stall.close()  # else its timer wakes the loop once more, after the response, for nothing
            if self._release is not None:
                self._release()


def file_response(
    data: bytes, stall: WriteStall, *, media_type: str, headers: Mapping[str, str] | None = None
) -> StallingResponse:
    """A whole file (``Content-Length`` set), written in parts so a reader that stops is let go too."""

    async def parts() -> AsyncIterator[bytes]:
        view = memoryview(data)
        for start in range(0, len(data), FILE_PART_BYTES):
            yield bytes(view[start : start + FILE_PART_BYTES])

    all_headers: dict[str, Any] = {**(headers or {}), "content-length": str(len(data))}
    return StallingResponse(parts(), stall, media_type=media_type, headers=all_headers)
