"""WebSocketChannel against a fake socket: the idle rule, framing, and a gone client as ChannelClosed."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from speakwire.server.flow import WriteStall
from speakwire.server.websocket_channel import ChannelClosed, WebSocketChannel


class FakeSocket:
    def __init__(self) -> None:
        self.application_state = WebSocketState.CONNECTED
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[str | bytes] = []
        self.closed: list[tuple[int, str]] = []
        self.fail_with: Exception | None = None

    async def receive(self) -> dict[str, Any]:
        return await self.incoming.get()

    async def send_text(self, text: str) -> None:
        self._send(text)

    async def send_bytes(self, data: bytes) -> None:
        self._send(data)

    def _send(self, item: str | bytes) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append(item)

    async def close(self, code: int, reason: str = "") -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.closed.append((code, reason))
        self.application_state = WebSocketState.DISCONNECTED


def channel_of(fake: FakeSocket) -> WebSocketChannel:
    return WebSocketChannel(cast(WebSocket, fake))


async def test_receive_returns_text_or_bytes_and_a_disconnect_is_channel_closed() -> None:
    fake = FakeSocket()
    channel = channel_of(fake)
    for message in ({"type": "websocket.receive", "text": "hi"}, {"type": "websocket.receive", "bytes": b"\x01"}):
        fake.incoming.put_nowait(message)
    fake.incoming.put_nowait({"type": "websocket.disconnect"})
    assert await channel.receive() == "hi"
    assert await channel.receive() == b"\x01"
    with pytest.raises(ChannelClosed):
        await channel.receive()


async def test_receive_idle_waits_while_busy_and_returns_none_once_idle() -> None:
    channel = channel_of(FakeSocket())
    busy = [True, True]
    assert await channel.receive_idle(0.01, lambda: bool(busy and busy.pop())) is None
    assert busy == []  # two timeouts were busy; the third found the connection idle


async def test_send_bytes_splits_into_frames_or_sends_one_frame() -> None:
    fake = FakeSocket()
    channel = channel_of(fake)
    await channel.send_bytes(b"abcde", 2)
    await channel.send_bytes(b"whole")
    await channel.send_json({"type": "x", "text": "é"})
    assert fake.sent == [b"ab", b"cd", b"e", b"whole", '{"type": "x", "text": "é"}']


@pytest.mark.parametrize("error", [WebSocketDisconnect(1006), RuntimeError("closed"), OSError("reset")])
async def test_a_failed_send_is_channel_closed_and_close_never_raises(error: Exception) -> None:
    fake = FakeSocket()
    channel = channel_of(fake)
    fake.fail_with = error
    with pytest.raises(ChannelClosed):
        await channel.send_json({"type": "x"})
    await channel.close(1000, "bye")  # raises inside: suppressed
    fake.fail_with = None
    await channel.close(1011, "again")
    await channel.close(1000, "already closed")  # not connected any more: nothing sent
    assert fake.closed == [(1011, "again")]
    with pytest.raises(ChannelClosed):
        await channel.send_bytes(b"late", 2)


class StuckSocket(FakeSocket):
    """A client that reads nothing: sends and the close frame wait forever."""

    async def send_text(self, text: str) -> None:
        await asyncio.Event().wait()

    async def close(self, code: int, reason: str = "") -> None:
        await asyncio.Event().wait()


async def test_a_cancel_from_outside_stays_a_cancel_while_a_stalled_close_is_pending() -> None:
    """Only the stalled close's own cancel of the receive ends the session as ``ChannelClosed``: a drain deadline
    or a shutdown cancelling the session's task meanwhile must still cancel it."""
    channel = WebSocketChannel(cast(WebSocket, StuckSocket()), WriteStall(0.05, "websocket"))
    receiver = asyncio.create_task(channel.receive_within(30))  # the session waits for its client
    await asyncio.sleep(0)
    with pytest.raises(ChannelClosed):
        await asyncio.wait_for(channel.send_json({"type": "x"}), 5)  # the speaker's write stalls
    assert channel.stalled and not receiver.done()  # the 1008 close is pending: its frame cannot go out
    receiver.cancel()  # from outside, before the close's grace ends
    with pytest.raises(asyncio.CancelledError):
        await receiver
    await channel.close(1000)  # the stalled close ends at its grace
