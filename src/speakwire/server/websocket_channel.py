"""WebSocketChannel: how a WebSocket session reads from and writes to its socket.

Every WebSocket protocol here (the speech stream and SageMaker's, the Deepgram, Cartesia and ElevenLabs
dialects) keeps reading client messages while speaker tasks send audio, so each needs the same few things:
one send lock, so a JSON event never lands between the frames of a chunk; every way a gone socket shows
itself (a disconnect, starlette's RuntimeError, an OSError) turned into one ``ChannelClosed``; a close
that is safe on a socket already closed; and the time of the client's last message, for the idle rule.
They were four near-identical copies; what still differs between protocols (what counts as busy, how an
idle connection is closed, frame sizes, close reasons) is passed in by the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState


class ChannelClosed(Exception):
    """The connection is over: the client left, or we closed it."""


class WebSocketChannel:
    """An accepted WebSocket: receive with the time of last activity, sends under one lock, a safe close."""

    def __init__(self, websocket: WebSocket) -> None:
        self.ws = websocket
        self.last_activity = time.monotonic()
        """When the client last sent a message; sessions also set it when a reply ends (idle counts from there)."""
        self._send_lock = asyncio.Lock()

    # ----- receiving --------------------------------------------------------------------

    async def receive(self) -> str | bytes:
        """The next client message, text or binary; raises ``ChannelClosed`` once the client has left."""
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            raise ChannelClosed
        self.last_activity = time.monotonic()
        text = message.get("text")
        if text is not None:
            return str(text)
        return bytes(message.get("bytes") or b"")

    async def receive_idle(self, idle_s: float, busy: Callable[[], bool]) -> str | bytes | None:
        """The next client message, or None once the connection has been idle for ``idle_s``.

        While ``busy()`` (synthesis still running or text still open) the connection is never idle, however
        long the client is quiet. On None the caller closes the connection its own protocol's way.
        """
        while True:
            try:
                return await asyncio.wait_for(self.receive(), timeout=idle_s)
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
        if self.ws.application_state != WebSocketState.CONNECTED:
            raise ChannelClosed

    @staticmethod
    async def _guarded(send: Awaitable[None]) -> None:
        try:
            await send
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise ChannelClosed from exc

    # ----- closing ----------------------------------------------------------------------

    async def close(self, code: int, reason: str = "") -> None:
        """Close with ``code`` and ``reason`` (the caller keeps it within 123 bytes) if still connected.

        Never raises: the client may have left, or be leaving, at any moment.
        """
        if self.ws.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason)
