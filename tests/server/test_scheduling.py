"""Scheduling by playback deadline: a new stream's first audio does not wait behind another stream's long segment."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

LONG_SENTENCE = (
    "This single long sentence keeps the only engine worker busy for many seconds of audio while it goes on "
    "and on about nothing in particular so that another listener arrives in the middle of it and waits."
)


@pytest.fixture(scope="module")
def one_worker(piper_engine: PiperEngine):  # type: ignore[no-untyped-def]
    live = start_server(Settings(workers=1), engine=piper_engine)
    yield live
    live.stop()


async def test_a_new_stream_gets_the_worker_before_a_long_segment_finishes(one_worker: LiveServer) -> None:
    marks: dict[str, float] = {}

    async with connect(one_worker.ws_url) as a:
        await a.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await a.send(json.dumps({"type": "input.text", "text": LONG_SENTENCE}))
        await a.send(json.dumps({"type": "input.done"}))
        while not isinstance(await asyncio.wait_for(a.recv(), 30), bytes):
            pass

        async def listener_a() -> None:
            while True:
                message = await asyncio.wait_for(a.recv(), 60)
                if isinstance(message, str) and json.loads(message)["type"] == "audio.done":
                    marks.setdefault("a_segment_done", time.monotonic())
                if isinstance(message, str) and json.loads(message)["type"] == "session.done":
                    return

        async def listener_b() -> None:
            async with connect(one_worker.ws_url) as b:
                await b.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
                await b.send(json.dumps({"type": "input.text", "text": "Hello, I just arrived."}))
                await b.send(json.dumps({"type": "input.done"}))
                while True:
                    message = await asyncio.wait_for(b.recv(), 60)
                    if isinstance(message, bytes):
                        marks.setdefault("b_first_audio", time.monotonic())
                    elif json.loads(message)["type"] == "session.done":
                        return

        await asyncio.gather(listener_a(), listener_b())
    # One worker: B could only speak before A's segment ended if A yielded the worker mid-segment.
    assert marks["b_first_audio"] < marks["a_segment_done"]
