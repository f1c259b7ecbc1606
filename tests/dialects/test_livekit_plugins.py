"""LiveKit Agents' stock TTS plugins, unchanged and with their defaults, against a default loopback server.

Each plugin is built as a voice-agent developer would point it at speakwire: its base URL and an API key,
nothing else, so it sends its own default model and voice (``ash``, ``aura-2-andromeda-en``,
``hpp4J3VqNfWAUOO0d1Us``, Cartesia's Katie), which mean the server's default voice (``speakwire.voice_presets``).
Each speaks through ``synthesize()`` and through ``stream()`` (text pushed in pieces, then a flush, for two
turns); OpenAI's plugin cannot stream, so ``stream()`` goes through ``tts.StreamAdapter`` as ``AgentSession``
wraps it. The audio must be speech (frames at the plugin's rate, PCM well above silence, about as long as our own
HTTP route makes the same text), and the plugins that align their transcript must get every word, timed in order.
The HTTP session is LiveKit's own (``http_context.open()``, as its docs say to run plugins outside a worker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np
import pytest
from livekit.agents import tts
from livekit.agents.tts.tts import USERDATA_TIMED_TRANSCRIPT
from livekit.agents.types import TimedString
from livekit.agents.utils import http_context
from livekit.plugins import cartesia, deepgram, elevenlabs, openai

from support.live_server import LiveServer

FIRST = ["Hello there. ", "How are ", "you today?"]
SECOND = ["I am ", "fine, ", "thank you."]
TEXT = "".join(FIRST)


def openai_tts(server: LiveServer) -> tts.TTS:
    return openai.TTS(base_url=f"{server.url}/v1", api_key="local")


def deepgram_tts(server: LiveServer) -> tts.TTS:
    return deepgram.TTS(base_url=f"{server.url}/v1/speak", api_key="local")


def elevenlabs_tts(server: LiveServer) -> tts.TTS:
    return elevenlabs.TTS(base_url=f"{server.url}/v1", api_key="local")


def cartesia_tts(server: LiveServer) -> tts.TTS:
    return cartesia.TTS(base_url=server.url, api_key="local")


PLUGINS: dict[str, Callable[[LiveServer], tts.TTS]] = {
    "openai": openai_tts, "deepgram": deepgram_tts, "elevenlabs": elevenlabs_tts, "cartesia": cartesia_tts,
}  # fmt: skip


@dataclass
class Heard:
    """What a plugin's stream yielded."""

    rates: set[int] = field(default_factory=set)
    frames: int = 0
    pcm: bytearray = field(default_factory=bytearray)
    segments: dict[str, int] = field(default_factory=dict)
    """Audio bytes per segment id, in the order the segments came."""
    words: dict[str, list[TimedString]] = field(default_factory=dict)

    def add(self, event: tts.SynthesizedAudio) -> None:
        self.rates.add(event.frame.sample_rate)
        self.frames += 1
        data = event.frame.data.tobytes()
        self.pcm += data
        self.segments[event.segment_id] = self.segments.get(event.segment_id, 0) + len(data)
        timed = event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
        self.words.setdefault(event.segment_id, []).extend(timed)

    def seconds(self, rate: int) -> float:
        return len(self.pcm) / 2 / rate


def http_seconds(server: LiveServer, text: str) -> float:
    body = {"input": text, "response_format": "pcm", "stream_format": "audio"}
    return len(httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60).content) / 2 / 24000


def assert_speech(heard: Heard, plugin: tts.TTS, expected_s: float, tolerance: float) -> None:
    assert heard.rates == {plugin.sample_rate}
    assert heard.frames >= 5  # 200 ms frames (AudioEmitter): a sentence is several, never one blob
    samples = np.frombuffer(bytes(heard.pcm), dtype="<i2").astype(np.float64)
    assert np.sqrt(np.mean(samples**2)) > 300 and np.abs(samples).max() > 3000  # speech, not silence
    assert abs(heard.seconds(plugin.sample_rate) - expected_s) < tolerance * expected_s


def assert_timed_words(words: list[TimedString], text: str, audio_s: float, *, from_segment_start: bool) -> None:
    """Every word of ``text``, in order, each with times.

    Cartesia's times run from the context's first sample: they rise, and each word lies inside the audio.
    ElevenLabs' ``charStartTimesMs`` run from the start of the audio message that carries them (ElevenLabs'
    asyncapi: "relative to the returned chunk ... not the full audio response"; pipecat adds them up), while
    LiveKit's plugin (1.8.9 ``_to_timed_words``) reads them as running from the context's start, so across
    messages its times restart: only that they are there is checked.
    """
    assert [str(w).strip() for w in words if str(w).strip()] == text.split()
    previous = 0.0
    for word in words:
        assert isinstance(word.start_time, int | float) and isinstance(word.end_time, int | float)  # given
        assert word.start_time >= 0.0 and word.end_time >= 0.0
        if from_segment_start:
            assert previous <= word.start_time <= word.end_time <= audio_s + 0.05
            previous = word.start_time


@pytest.mark.parametrize("name", PLUGINS)
def test_livekit_plugin_synthesizes_with_its_defaults(server: LiveServer, name: str) -> None:
    async def run() -> tuple[tts.TTS, Heard]:
        async with http_context.open():
            plugin = PLUGINS[name](server)
            heard = Heard()
            try:
                async with asyncio.timeout(120):
                    async with plugin.synthesize(TEXT) as stream:
                        async for event in stream:
                            heard.add(event)
            finally:
                await plugin.aclose()
        return plugin, heard

    plugin, heard = asyncio.run(run())
    assert_speech(heard, plugin, http_seconds(server, TEXT), tolerance=0.1)


@pytest.mark.parametrize("name", PLUGINS)
def test_livekit_plugin_streams_pieces_and_a_flush_with_its_defaults(server: LiveServer, name: str) -> None:
    """Two turns, one ``stream()`` each (LiveKit 1.8 drops text pushed after a stream's first flush), on one TTS:
    the second reuses the connection where the plugin pools one."""

    async def run() -> tuple[tts.TTS, list[Heard]]:
        async with http_context.open():
            plugin = PLUGINS[name](server)
            streaming = plugin if plugin.capabilities.streaming else tts.StreamAdapter(tts=plugin)
            turns = []
            try:
                async with asyncio.timeout(120):
                    for pieces in (FIRST, SECOND):
                        heard = Heard()
                        async with streaming.stream() as stream:
                            for piece in pieces:
                                stream.push_text(piece)
                            stream.flush()
                            stream.end_input()
                            async for event in stream:
                                heard.add(event)
                        turns.append(heard)
            finally:
                if streaming is not plugin:
                    await streaming.aclose()
                await plugin.aclose()
        return plugin, turns

    plugin, turns = asyncio.run(run())
    for pieces, heard in zip((FIRST, SECOND), turns, strict=True):
        text = "".join(pieces)
        assert_speech(heard, plugin, http_seconds(server, text), tolerance=0.15)
        assert len(heard.segments) == 1
        if plugin.capabilities.aligned_transcript:  # ElevenLabs and Cartesia: timed words, every one, in order
            words = next(iter(heard.words.values()))
            audio_s = heard.seconds(plugin.sample_rate)
            assert_timed_words(words, text, audio_s, from_segment_start=name == "cartesia")
