"""Admission control: past capacity, new streams are refused clearly and accepted ones keep going."""

from __future__ import annotations

import asyncio
import json

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
