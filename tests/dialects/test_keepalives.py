"""The keep-alives stock clients send, per dialect, over a real loopback server with a 1-second idle timeout.

A keep-alive gets no audio and no error, and the session outlives the idle timeout by several times; afterwards
it still speaks. Each dialect's messages are the ones its clients send:

* ElevenLabs stream-input: ``{"text": " "}`` (ElevenLabs' documented keep-alive; ``""`` would end the input).
* ElevenLabs multi-stream-input: ``{"text": ""}`` with no context (pipecat's ``_send_keepalive`` before a context
  is open) and ``{"text": "", "context_id"}`` (ElevenLabs' "keeping a context alive", pipecat once it is open).
  Both use ElevenLabs' own ``inactivity_timeout`` query parameter, which the server honours.
* Deepgram ``/v1/speak``: ``{"type": "KeepAlive"}``, unanswered, as on Deepgram's other sockets.
* Cartesia has no keep-alive message (its SDK sends WebSocket pings, LiveKit's plugin nothing): a connection
  with no open context lasts Cartesia's 5-minute idle window, whatever the server-wide timeout, so LiveKit's
  plugin reuses its pooled connection after a pause.
* Our vLLM-Omni stream (Baseten's plugin): an empty ``input.done`` every 15 s, answered ``session.done``.

A session that sends nothing is closed at the timeout (the control), so the keep-alives are what keeps them open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from cartesia import AsyncCartesia
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

IDLE_S = 1.0
KEEPALIVE_EVERY_S = 0.25
QUIET_S = 3 * IDLE_S
"""How long the keep-alives go on: three idle timeouts."""


@pytest.fixture(scope="module")
def idle_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(ws_idle_timeout_s=IDLE_S), engine=piper_engine)
    yield live
    live.stop()


def ws_base(server: LiveServer) -> str:
    return server.url.replace("http://", "ws://")


async def keep_alive(ws: ClientConnection, send: Callable[[], Awaitable[None]]) -> list[str | bytes]:
    """Send a keep-alive every ``KEEPALIVE_EVERY_S`` for ``QUIET_S``; what came back meanwhile (raises if closed)."""
    received: list[str | bytes] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + QUIET_S
    while loop.time() < end:
        await send()
        with contextlib.suppress(TimeoutError):
            received.append(await asyncio.wait_for(ws.recv(), KEEPALIVE_EVERY_S))
    return received


async def send_json(ws: ClientConnection, **message: Any) -> None:
    await ws.send(json.dumps(message))


async def json_until(ws: ClientConnection, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    async with asyncio.timeout(60):
        while not messages or not done(messages[-1]):
            raw = await ws.recv()
            assert isinstance(raw, str)
            messages.append(json.loads(raw))
    return messages


def elevenlabs_url(server: LiveServer, route: str) -> str:
    # LiveKit's elevenlabs.TTS() default voice; ElevenLabs' smallest inactivity_timeout.
    query = {"model_id": "eleven_flash_v2_5", "output_format": "pcm_24000", "inactivity_timeout": 1}
    return f"{ws_base(server)}/v1/text-to-speech/hpp4J3VqNfWAUOO0d1Us/{route}?{urlencode(query)}"


async def test_elevenlabs_stream_input_keeps_alive_on_a_single_space(idle_server: LiveServer) -> None:
    async with connect(elevenlabs_url(idle_server, "stream-input")) as ws:
        await send_json(ws, text=" ")  # the first message
        quiet = await keep_alive(ws, lambda: send_json(ws, text=" "))
        assert quiet == []
        await send_json(ws, text="Still here.")
        await send_json(ws, text="")
        messages = await json_until(ws, lambda m: bool(m.get("isFinal")))
    assert not any("error" in m for m in messages)
    assert any(m.get("audio") for m in messages)


async def test_elevenlabs_multi_stream_keeps_the_connection_and_a_context_alive(idle_server: LiveServer) -> None:
    async with connect(elevenlabs_url(idle_server, "multi-stream-input")) as ws:
        before = await keep_alive(ws, lambda: send_json(ws, text=""))  # no context open yet (pipecat)
        await send_json(ws, text=" ", context_id="a")  # opens the context
        during = await keep_alive(ws, lambda: send_json(ws, text="", context_id="a"))
        assert before == [] and during == []  # no audio, no error, and context "a" was not closed (no isFinal)
        await send_json(ws, text="Still here. ", context_id="a", flush=True)
        spoken = await json_until(ws, lambda m: bool(m.get("audio")))
        await send_json(ws, context_id="a", close_context=True)
        final = await json_until(ws, lambda m: bool(m.get("isFinal")))
    assert {m["contextId"] for m in spoken + final} == {"a"}
    assert not any("error" in m for m in spoken + final)


async def test_deepgram_keepalive_is_unanswered_and_keeps_the_session(idle_server: LiveServer) -> None:
    url = f"{ws_base(idle_server)}/v1/speak?{urlencode({'model': 'aura-2-andromeda-en', 'encoding': 'linear16'})}"
    async with connect(url) as ws, connect(url) as silent:
        assert json.loads(await ws.recv())["type"] == "Metadata"
        assert json.loads(await silent.recv())["type"] == "Metadata"
        quiet = await keep_alive(ws, lambda: send_json(ws, type="KeepAlive"))
        assert quiet == []
        # The control: the session that sent nothing is gone, Deepgram's way.
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(30):
                await silent.recv()
        assert silent.close_code == 1011 and "NET-0001" in (silent.close_reason or "")
        # A keep-alive inside an utterance leaves it open: one Flush, one utterance.
        await send_json(ws, type="Speak", text="Still ")
        await send_json(ws, type="KeepAlive")
        await send_json(ws, type="Speak", text="here.")
        await send_json(ws, type="Flush")
        audio, events = 0, []
        async with asyncio.timeout(60):
            while not events or events[-1]["type"] != "Flushed":
                message = await ws.recv()
                if isinstance(message, bytes):
                    audio += len(message)
                else:
                    events.append(json.loads(message))
    assert audio > 0 and [e["type"] for e in events] == ["Flushed"] and events[0]["sequence_id"] == 0


async def test_cartesia_connection_outlives_the_servers_idle_timeout(idle_server: LiveServer) -> None:
    client = AsyncCartesia(api_key="local", base_url=idle_server.url, websocket_base_url=ws_base(idle_server))
    fmt: Any = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    voice: Any = {"mode": "id", "id": "f786b574-daa5-4673-aa0c-cbe3e8534c02"}  # LiveKit's cartesia.TTS() default

    async def speak(connection: Any, context_id: str) -> list[str]:
        ctx = connection.context(context_id, model_id="sonic-3", voice=voice, output_format=fmt)
        await ctx.push("Hello there.")
        await ctx.no_more_inputs()
        kinds = []
        async with asyncio.timeout(60):
            async for event in ctx.receive():
                kinds.append(event.type)
        return kinds

    async with client.tts.websocket_connect() as connection:
        first = await speak(connection, "one")
        await asyncio.sleep(QUIET_S)  # the SDK's pings go every 20 s: nothing at all reaches the server
        second = await speak(connection, "two")
    await client.close()
    for kinds in (first, second):
        assert "chunk" in kinds and kinds[-1] == "done" and "error" not in kinds


async def test_vllm_omni_empty_input_done_is_answered_with_session_done(idle_server: LiveServer) -> None:
    async with connect(idle_server.ws_url) as ws:
        await send_json(ws, type="session.config", response_format="pcm", stream_audio=True)
        quiet = await keep_alive(ws, lambda: send_json(ws, type="input.done"))
        kinds = [json.loads(m)["type"] for m in quiet if isinstance(m, str)]
        assert kinds and set(kinds) == {"session.done"} and all(isinstance(m, str) for m in quiet)
        await send_json(ws, type="input.text", text="Still here.")
        await send_json(ws, type="input.done")
        audio, events = 0, []
        async with asyncio.timeout(60):
            while not events or events[-1] != "session.done":
                message = await ws.recv()
                if isinstance(message, bytes):
                    audio += len(message)
                else:
                    events.append(json.loads(message)["type"])
    assert audio > 0 and "error" not in events


async def test_livekit_cartesia_reuses_its_pooled_connection_after_a_pause(idle_server: LiveServer) -> None:
    """LiveKit's ``cartesia.TTS`` keeps its WebSocket in a pool for up to 300 s and sends nothing meanwhile."""
    from livekit.agents.utils import http_context
    from livekit.plugins import cartesia

    async def turn(plugin: cartesia.TTS, text: str) -> tuple[int, bool]:
        audio = 0
        async with plugin.stream() as stream:
            stream.push_text(text)
            stream.end_input()
            async for event in stream:
                audio += len(event.frame.data)
        return audio, plugin._pool.last_connection_reused

    async with http_context.open():
        plugin = cartesia.TTS(base_url=idle_server.url, api_key="local")
        try:
            async with asyncio.timeout(120):
                first, _ = await turn(plugin, "Hello there.")
                await asyncio.sleep(QUIET_S)
                second, reused = await turn(plugin, "Still here.")
        finally:
            await plugin.aclose()
    assert first > 0 and second > 0 and reused
