"""SageMaker's default bidirectional path speaks two protocols, told apart by the client's first message.

The path has no query or subpath to say which (pipecat's ``NvidiaSageMakerTTSService`` opens the stream with
no ``model_invocation_path``), so the connection is accepted, its first message read, and the session chosen
by it then runs on a ``ReplayingWebSocket``: the same connection, already accepted, whose first ``receive``
gives that message back. A session therefore reads its protocol from the start as on any other path.

A Magpie client may instead wait for the server's ``conversation.created`` before it sends anything (the NIM
realtime API greets first). So the router waits only ``GREETING_GRACE_S`` for a first message; if none came, it
greets as Magpie and waits out the rest of the config timeout. A vLLM-Omni client slower than that grace sees one
``conversation.created`` event before its own session begins (an unknown event type, which its clients skip).
"""

from __future__ import annotations

import asyncio

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

GREETING_GRACE_S = 1.0
"""How long the default path waits for a client's first message before greeting as Magpie does."""


async def read_first_message(websocket: WebSocket, timeout_s: float) -> Message | None:
    """The accepted ``websocket``'s first ASGI message (a disconnect included), or None if none came in time."""
    try:
        async with asyncio.timeout(timeout_s):  # in this task: wait_for (3.11) would add one per connection
            return await websocket.receive()
    except TimeoutError:
        return None


def message_text(message: Message | None) -> str | None:
    """The text of a text frame; None for anything else."""
    if message is None or message["type"] != "websocket.receive":
        return None
    text = message.get("text")
    return text if isinstance(text, str) else None


class ReplayingWebSocket(WebSocket):
    """``accepted`` again, for a session to run on: accepting is a no-op, and ``first`` is received first."""

    def __init__(self, accepted: WebSocket, first: Message | None = None) -> None:
        super().__init__(accepted.scope, receive=self._next, send=accepted.send)
        self.client_state = self.application_state = WebSocketState.CONNECTED
        self._accepted = accepted
        self._first = first

    def replay(self, first: Message | None) -> None:
        """Give ``first`` back at the next ``receive`` (a message read before the session was chosen)."""
        self._first = first

    async def accept(self, subprotocol: str | None = None, headers: object = None) -> None:
        """Already accepted (before its first message was read)."""

    async def _next(self) -> Message:
        first, self._first = self._first, None
        if first is not None:
            return first
        return await self._accepted.receive()
