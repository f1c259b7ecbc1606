"""A streamed HTTP body's write-stall timer ends with the response: none is left to wake the loop afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.types import Message

from speakwire.server.flow import StallingResponse, WriteStall


async def test_a_finished_response_leaves_no_write_stall_timer() -> None:
    stall = WriteStall(30.0, "test")

    async def body() -> AsyncIterator[bytes]:
        yield b"first"
        yield b"second"

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        await asyncio.sleep(3600)  # the client never leaves
        return {"type": "http.disconnect"}

    released: list[bool] = []
    response = StallingResponse(body(), stall, media_type="audio/pcm", release=lambda: released.append(True))
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "POST", "headers": []}
    await response(scope, receive, send)
    assert [m.get("body") for m in sent if m["type"] == "http.response.body"] == [b"first", b"second", b""]
    assert stall._timer is None, "the 30 s timer armed by the first write outlived the response"
    assert released == [True]
