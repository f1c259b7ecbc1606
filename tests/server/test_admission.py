"""Admission control: past capacity, new streams are refused clearly and accepted ones keep going."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

LONG = " ".join(["This stream holds the only slot on the server for a while."] * 20)


@pytest.fixture(scope="module")
def one_slot(piper_engine: PiperEngine):  # type: ignore[no-untyped-def]
    live = start_server(Settings(max_streams=1), engine=piper_engine)
    yield live
    live.stop()


async def test_full_server_refuses_new_streams_and_keeps_the_running_one(one_slot: LiveServer) -> None:
    async with connect(one_slot.ws_url) as holder:
        await holder.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await holder.send(json.dumps({"type": "input.text", "text": LONG}))
        await holder.send(json.dumps({"type": "input.done"}))
        while not isinstance(await asyncio.wait_for(holder.recv(), 30), bytes):
            pass

        async with httpx.AsyncClient() as http:
            refused = await http.post(f"{one_slot.url}/v1/audio/speech", json={"input": "Me too?"})
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert "capacity" in refused.json()["error"]["message"]

        async with connect(one_slot.ws_url) as late:
            await late.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
            await late.send(json.dumps({"type": "input.text", "text": "Me too?"}))
            error = json.loads(await asyncio.wait_for(late.recv(), 10))
            assert error["type"] == "error" and error["code"] == "busy"
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(late.recv(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013

        # The accepted stream finishes normally.
        kinds = []
        while "session.done" not in kinds:
            message = await asyncio.wait_for(holder.recv(), 60)
            if isinstance(message, str):
                kinds.append(json.loads(message)["type"])
        assert "error" not in kinds

    async with httpx.AsyncClient() as http:
        again = await http.post(f"{one_slot.url}/v1/audio/speech", json={"input": "Now there is room."})
    assert again.status_code == 200


def test_metrics_count_streams_and_rejections(one_slot: LiveServer) -> None:
    body = httpx.get(f"{one_slot.url}/metrics").text
    assert 'speakwire_rejections_total{engine="piper",protocol="http"} 1.0' in body
    assert 'speakwire_rejections_total{engine="piper",protocol="websocket"} 1.0' in body
    assert "speakwire_time_to_first_audio_seconds_bucket" in body
    assert 'speakwire_active_streams{engine="piper",protocol="websocket"} 0.0' in body


async def test_a_session_ended_by_its_first_text_gives_its_slot_back(one_slot: LiveServer) -> None:
    # The utterance's speaker is cancelled before it first runs; the slot must be released all the same.
    async with connect(one_slot.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
        await ws.send(json.dumps({"type": "input.text", "text": "a" * 110_000}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["type"] == "error" and error["code"] == "too_large"
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    async with httpx.AsyncClient() as http:
        after = await http.post(f"{one_slot.url}/v1/audio/speech", json={"input": "Is the slot free?"})
        body = (await http.get(f"{one_slot.url}/metrics")).text
    assert after.status_code == 200
    assert 'speakwire_active_streams{engine="piper",protocol="websocket"} 0.0' in body


# Sentences, not one giant word: the first one is spoken (and the response streams) long before the rest.
OVER_BUFFER = " ".join(["Operators may allow texts longer than the stream buffer."] * 2_000)  # ~116,000 characters
"""Longer than the 100,000 characters an utterance buffers by default, within the operator's larger limit."""

LONG_INPUT_ROUTES = {
    "openai": ("/v1/audio/speech", {"input": OVER_BUFFER, "response_format": "pcm", "stream_format": "audio"}),
    "deepgram": ("/v1/speak?encoding=linear16&container=none", {"text": OVER_BUFFER}),
    "cartesia": ("/tts/bytes", {"model_id": "sonic-3", "transcript": OVER_BUFFER,
                                "voice": {"mode": "id", "id": "alloy"},
                                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}}),
    "elevenlabs": ("/v1/text-to-speech/alloy/stream?output_format=pcm_24000", {"text": OVER_BUFFER}),
}  # fmt: skip


@pytest.fixture  # one server per route, so a slot one route leaks does not fail the next
def one_slot_long_inputs(piper_engine: PiperEngine):  # type: ignore[no-untyped-def]
    live = start_server(Settings(max_streams=1, max_input_chars=200_000), engine=piper_engine)
    yield live
    live.stop()


def _wait_until_idle(live: LiveServer, timeout_s: float = 10) -> int:
    """The server's active streams once they reach 0, or what they still are at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        active: int = httpx.get(f"{live.url}/ready").json()["load"]["active_streams"]
        if active == 0 or time.monotonic() > deadline:
            return active
        time.sleep(0.05)


@pytest.mark.parametrize("route", LONG_INPUT_ROUTES)
def test_text_over_the_stream_buffer_but_within_max_input_chars_is_spoken_and_gives_its_slot_back(
    one_slot_long_inputs: LiveServer, route: str
) -> None:
    # An operator's max_input_chars over 100,000 once let the text overflow the utterance's own buffer
    # after it was admitted: the client got the WebSocket's "send input.done" 413 and the slot leaked for good.
    live = one_slot_long_inputs
    path, body = LONG_INPUT_ROUTES[route]
    with httpx.stream("POST", f"{live.url}{path}", json=body, timeout=60) as response:
        status = response.status_code
        first = next(response.iter_bytes(), b"")  # audio flows; hanging up here cancels the rest
    assert _wait_until_idle(live) == 0, "the request's admission slot was not released"
    after = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Is the slot free?"}, timeout=60)
    assert after.status_code == 200, after.text
    assert status == 200, first
    assert first


class _FirstStartFails:
    """The transport of the first ``/v1/audio/speech`` response breaks before its first byte: every send of that
    request raises, as a socket reset under the response's start would."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/audio/speech" or self.failed:
            await self.app(scope, receive, send)
            return
        self.failed += 1

        async def broken(message: Any) -> None:
            raise OSError("connection reset before the response started")

        with contextlib.suppress(Exception):  # what the broken send raised, as Starlette passes it on (not logged)
            await self.app(scope, receive, broken)


def test_a_streamed_body_that_never_starts_gives_its_slot_back(piper_engine: PiperEngine) -> None:
    # The body generator owns the admission, but a generator closed before its first step runs none of its code:
    # before the response released it itself, a start that failed held the only slot for good (429 ever after).
    broken: list[_FirstStartFails] = []

    def wrap(app: Any) -> Any:
        broken.append(_FirstStartFails(app))
        return broken[0]

    live = start_server(Settings(max_streams=1), engine=piper_engine, wrap=wrap)
    try:
        body = {"input": LONG, "stream_format": "audio"}
        lost = httpx.post(f"{live.url}/v1/audio/speech", json=body, timeout=30)
        assert lost.status_code == 500  # uvicorn's own answer to an app that never started its response
        assert broken[0].failed == 1
        assert _wait_until_idle(live) == 0, "the admission of the response that never started was not released"
        after = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Is the slot free?"}, timeout=60)
        assert after.status_code == 200, after.text
    finally:
        live.stop()
