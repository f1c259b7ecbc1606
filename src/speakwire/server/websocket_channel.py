"""WebSocketChannel: how a WebSocket session reads from and writes to its socket.

Every WebSocket protocol here (the speech stream and SageMaker's, the Deepgram, Cartesia and ElevenLabs
dialects) keeps reading client messages while speaker tasks send audio, so each needs the same few things:
one send lock, so a JSON event never lands between the frames of a chunk; every way a gone socket shows
itself (a disconnect, starlette's RuntimeError, an OSError) turned into one ``ChannelClosed``; a close
that is safe on a socket already closed; and the time of the client's last message, for the idle rule.
They were four near-identical copies; what still differs between protocols (what counts as busy, how an
idle connection is closed, frame sizes, close reasons) is passed in by the session.

Every send is timed by the session's ``WriteStall`` (``server.flow``): a client that takes nothing for the
write-stall timeout gets a 1008 close with the reason (queued behind what it has not read yet), and the
session's receive ends with ``ChannelClosed``, so the session ends its utterances and gives their slots back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from speakwire.server.flow import ReaderStalled, WriteStall
from speakwire.server.limits import CLOSE_POLICY

STALLED_REASON = "client read no audio for the write-stall timeout"
STALLED_CLOSE_GRACE_S = 10.0
"""How long the 1008 close waits for room behind the unread audio (a client that reads again gets it)."""


class ChannelClosed(Exception):
    """The connection is over: the client left, or we closed it."""


class WebSocketChannel:
    """An accepted WebSocket: receive with the time of last activity, sends under one lock, a safe close."""

    def __init__(self, websocket: WebSocket, stall: WriteStall | None = None) -> None:
        self.ws = websocket
        self.last_activity = time.monotonic()
        """When the client last sent a message; sessions also set it when a reply ends (idle counts from there)."""
        self._send_lock = asyncio.Lock()
        self._stall = stall or WriteStall(None, "websocket")
        self._stalled = False
        self._receiver: asyncio.Task[Any] | None = None
        self._receive_ended = False
        """Set just before the stalled close cancels the receive: only that cancel becomes ``ChannelClosed``."""
        self._closer: asyncio.Task[None] | None = None

    @property
    def stalled(self) -> bool:
        """True once a send waited the write-stall timeout (the connection is being closed 1008)."""
        return self._stalled

    # ----- receiving --------------------------------------------------------------------

    async def receive(self) -> str | bytes:
        """The next client message, text or binary; raises ``ChannelClosed`` once the client has left."""
        if self._stalled:
            await self.close(CLOSE_POLICY)  # the 1008 goes out (or its grace ends) before the session can end
            raise ChannelClosed
        self._receiver = asyncio.current_task()
        try:
            message = await self.ws.receive()
        except asyncio.CancelledError:
            task = self._receiver
            if self._receive_ended and task is not None and task.uncancel() == 0:
                raise ChannelClosed from None  # the stalled close gave up waiting: the session is over
            raise
        finally:
            self._receiver = None
        if message["type"] == "websocket.disconnect":
            raise ChannelClosed
        self.last_activity = time.monotonic()
        text = message.get("text")
        if text is not None:
            return str(text)
        return bytes(message.get("bytes") or b"")

    async def receive_within(self, timeout_s: float) -> str | bytes:
        """``receive``, raising ``TimeoutError`` after ``timeout_s``.

        The wait runs in the caller's task (``asyncio.timeout``): ``asyncio.wait_for`` on Python 3.11 runs the
        receive in a task of its own, one more task held by every connection that waits for its client (2,000 idle
        sessions held 4,000 tasks; ``python -m bench.idle_sessions``).
        """
        async with asyncio.timeout(timeout_s):
            return await self.receive()

    async def receive_idle(self, idle_s: float, busy: Callable[[], bool]) -> str | bytes | None:
        """The next client message, or None once the connection has been idle for ``idle_s``.

        While ``busy()`` (synthesis still running or text still open) the connection is never idle, however
        long the client is quiet. On None the caller closes the connection its own protocol's way.
        """
        while True:
            try:
                return await self.receive_within(idle_s)
            except TimeoutError:
                if busy():
                    continue
                if time.monotonic() - self.last_activity >= idle_s:
                    return None

    # ----- sending ----------------------------------------------------------------------

    async def send_json(self, event: dict[str, Any]) -> None:
        """``event`` as one text frame (UTF-8 JSON, non-ASCII kept); raises ``ChannelClosed``."""
        async with self._send_lock:
            self._check_open()
            await self._guarded(self.ws.send_text(json.dumps(event, ensure_ascii=False)))

    async def send_bytes(self, data: bytes, max_frame_bytes: int | None = None) -> None:
        """``data`` in binary frames of at most ``max_frame_bytes``, back to back (None: one frame, even empty).

        Raises ``ChannelClosed`` (the frames already sent stay sent).
        """
        async with self._send_lock:
            if max_frame_bytes is None:
                self._check_open()
                await self._guarded(self.ws.send_bytes(data))
                return
            for start in range(0, len(data), max_frame_bytes):
                self._check_open()
                await self._guarded(self.ws.send_bytes(data[start : start + max_frame_bytes]))

    def _check_open(self) -> None:
        if self._stalled or self.ws.application_state != WebSocketState.CONNECTED:
            raise ChannelClosed

    async def _guarded(self, send: Awaitable[None]) -> None:
        try:
            await self._stall.write(send)
        except ReaderStalled:
            self._on_stalled()
            raise ChannelClosed from None
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise ChannelClosed from exc

    def _on_stalled(self) -> None:
        if self._stalled:
            return
        self._stalled = True
        self._stall.noticed("closing the WebSocket 1008")
        self._closer = asyncio.get_running_loop().create_task(self._close_stalled())

    async def _close_stalled(self) -> None:
        """Close 1008 once the socket has room for the close frame; then (or at the grace's end) end receive."""
        try:
            async with asyncio.timeout(STALLED_CLOSE_GRACE_S):
                await self.ws.close(CLOSE_POLICY, STALLED_REASON)
        except Exception:
            pass
        finally:
            receiver = self._receiver
            if receiver is not None and not receiver.done():
                self._receive_ended = True  # a cancel from elsewhere (drain, shutdown) stays a cancel
                receiver.cancel()

    # ----- closing ----------------------------------------------------------------------

    async def close(self, code: int, reason: str = "") -> None:
        """Close with ``code`` and ``reason`` (the caller keeps it within 123 bytes) if still connected.

        Never raises: the client may have left, or be leaving, at any moment. A stalled connection is already
        being closed (1008): this waits for that close (at most ``STALLED_CLOSE_GRACE_S``), so a session that
        ends meanwhile does not drop the connection before the 1008 is out.
        """
        if self._closer is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._closer)
            return
        if self.ws.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason)
