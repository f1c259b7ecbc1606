"""Over a real server: an utterance's leading silence is cut on every protocol, and nothing else is.

Two seeded servers (Piper is then noise-free, so the same text gives the same samples) differ only in
``trim_leading_silence``: the trimmed audio is the untrimmed audio from some sample on, that sample is
within the onset of the first audible one, and word times move back by exactly what was cut.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from speakwire.audio.leading_silence import ONSET_S, THRESHOLD
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from speakwire.synthesis.utterance import MIN_FIRST_AUDIO_S
from support.live_server import LiveServer, start_server

TEXT = "Hello there. This is the second sentence."
RATE = 24_000


@pytest.fixture(scope="module")
def servers(piper_engine: PiperEngine) -> Iterator[tuple[LiveServer, LiveServer]]:
    trimmed = start_server(Settings(default_seed=7), engine=piper_engine)
    untrimmed = start_server(Settings(default_seed=7, trim_leading_silence=False), engine=piper_engine)
    yield trimmed, untrimmed
    trimmed.stop()
    untrimmed.stop()


def http_samples(server: LiveServer) -> np.ndarray:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "audio"}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0


def first_audible(samples: np.ndarray) -> int:
    return int(np.flatnonzero(np.abs(samples) > THRESHOLD)[0])


def test_http_audio_starts_within_the_onset_of_speech_and_is_otherwise_the_engines(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    trimmed, untrimmed = (http_samples(server) for server in servers)
    cut = len(untrimmed) - len(trimmed)
    assert cut > 0, "Piper starts an utterance with silence: something should have been cut"
    assert np.array_equal(trimmed, untrimmed[cut:])
    assert first_audible(trimmed) <= round(ONSET_S * RATE) + 1
    assert first_audible(untrimmed) > first_audible(trimmed)


async def ws_audio(server: LiveServer) -> bytes:
    audio = bytearray()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += message
            elif json.loads(message).get("type") == "session.done":
                return bytes(audio)


async def test_the_websocket_stream_is_trimmed_the_same_as_http(servers: tuple[LiveServer, LiveServer]) -> None:
    trimmed, untrimmed = servers
    ws_trimmed, ws_untrimmed = await ws_audio(trimmed), await ws_audio(untrimmed)
    cut = len(ws_untrimmed) - len(ws_trimmed)
    assert cut > 0 and ws_trimmed[:4800] == ws_untrimmed[cut : cut + 4800]


def sse_words(server: LiveServer) -> list[dict[str, object]]:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True}
    words: list[dict[str, object]] = []
    audio = bytearray()
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "speech.audio.words":
                    words += event["words"]
                elif event["type"] == "speech.audio.delta":
                    audio += base64.b64decode(event["audio"])
    words.append({"samples": len(audio) // 2})
    return words


def test_word_times_move_back_by_what_was_cut(servers: tuple[LiveServer, LiveServer]) -> None:
    trimmed, untrimmed = (sse_words(server) for server in servers)
    cut_ms = (int(untrimmed.pop()["samples"]) - int(trimmed.pop()["samples"])) * 1000 / RATE  # type: ignore[call-overload]
    assert [w["word"] for w in trimmed] == [w["word"] for w in untrimmed] and trimmed
    for after, before in zip(trimmed, untrimmed, strict=True):
        assert abs(int(before["start_ms"]) - cut_ms - int(after["start_ms"])) <= 1  # type: ignore[call-overload]


async def test_a_first_chunk_the_trim_leaves_short_goes_out_with_the_next_and_nothing_is_lost(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    # Fed word by word as an LLM writes, Piper's first decoder window of this reply is mostly silence: cut, it
    # left 48-108 ms, and a listener with a 100 ms jitter buffer heard a stall unless the next chunk came within
    # ~150 ms. The first frame now carries at least MIN_FIRST_AUDIO_S; the stream is the untrimmed one from the
    # cut on, sample for sample.
    text = "Our train left the station a little late, but the driver made up the time along the coast."

    async def frames(server: LiveServer) -> list[bytes]:
        got: list[bytes] = []
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
            for word in text.split(" "):
                await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
                await asyncio.sleep(0.02)  # an LLM's pace: the first sentence is cut, and started, before the rest
            await ws.send(json.dumps({"type": "input.done"}))
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    got.append(message)
                elif json.loads(message).get("type") == "session.done":
                    return got

    trimmed, untrimmed = await frames(servers[0]), await frames(servers[1])
    assert len(trimmed[0]) >= 2 * round(MIN_FIRST_AUDIO_S * RATE)
    whole_trimmed, whole_untrimmed = b"".join(trimmed), b"".join(untrimmed)
    cut = len(whole_untrimmed) - len(whole_trimmed)
    assert cut > 0 and whole_trimmed == whole_untrimmed[cut:]
