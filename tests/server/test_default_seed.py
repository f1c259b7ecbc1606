"""The server-wide default seed (``--seed``): requests that send none are seeded, a request's own seed wins.

On Piper any seed means noise-free synthesis, so a seeded server gives the same bytes for the same text
on every protocol. One sentence only: later segments may be decoded in frame windows or whole depending
on the listener's buffer, which moves the samples by ~1e-5.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect

from speakwire.engines.piper import PiperEngine
from speakwire.server.options import SpeechOptions, resolve_speech
from speakwire.server.state import ServerState
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

DEFAULT_SEED = 42
TEXT = "Every reply should sound like the same person."


@pytest.fixture(scope="module")
def seeded(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(default_seed=DEFAULT_SEED), engine=piper_engine)
    yield live
    live.stop()


def http_pcm(server: LiveServer, **fields: object) -> bytes:
    body = {"input": TEXT, "response_format": "pcm", **fields}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert len(response.content) > 24000
    return response.content


async def ws_pcm(server: LiveServer, **fields: object) -> bytes:
    audio = bytearray()
    async with connect(server.ws_url) as ws:
        config = {"type": "session.config", "response_format": "pcm", "stream_audio": True, **fields}
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += message
            elif json.loads(message).get("type") == "session.done":
                return bytes(audio)


def test_unseeded_http_requests_to_a_seeded_server_give_identical_audio(seeded: LiveServer) -> None:
    first = http_pcm(seeded)
    assert http_pcm(seeded) == first


async def test_unseeded_websocket_sessions_on_a_seeded_server_give_identical_audio(seeded: LiveServer) -> None:
    first = await ws_pcm(seeded)
    assert len(first) > 24000
    assert await ws_pcm(seeded) == first
    assert first == http_pcm(seeded)  # the same voice on both protocols


def test_the_elevenlabs_dialect_without_its_own_seed_gets_the_default(seeded: LiveServer) -> None:
    response = httpx.post(f"{seeded.url}/v1/text-to-speech/alloy", params={"output_format": "pcm_24000"},
                          json={"text": TEXT, "model_id": "eleven_flash_v2_5"}, timeout=60)  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.content == http_pcm(seeded)


def test_a_request_seed_equal_to_the_default_gives_the_same_audio_as_none(seeded: LiveServer) -> None:
    assert http_pcm(seeded, seed=DEFAULT_SEED) == http_pcm(seeded)


def test_a_request_with_another_seed_is_repeatable_with_itself(seeded: LiveServer) -> None:
    assert http_pcm(seeded, seed=7) == http_pcm(seeded, seed=7)


async def test_a_request_seed_wins_over_the_default_and_none_means_the_default(piper_engine: PiperEngine) -> None:
    seeded = ServerState(Settings(default_seed=DEFAULT_SEED))
    assert (await resolve_speech(seeded, piper_engine, SpeechOptions())).request.seed == DEFAULT_SEED
    assert (await resolve_speech(seeded, piper_engine, SpeechOptions(seed=7))).request.seed == 7
    assert (await resolve_speech(seeded, piper_engine, SpeechOptions(seed=0))).request.seed == 0
    unseeded = ServerState(Settings())
    assert (await resolve_speech(unseeded, piper_engine, SpeechOptions())).request.seed is None
