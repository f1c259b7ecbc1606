"""Agent frameworks' own OpenAI TTS services, unchanged, pointed at a loopback server by base_url.

pipecat's ``OpenAITTSService`` asks for ``response_format: "pcm"`` without ``stream_format`` and
reads 24 kHz s16le as it streams; LiveKit's ``openai.TTS`` asks for SSE and decodes by Content-Type.
Both must get the same audio our own HTTP endpoint gives for the text.
"""

from __future__ import annotations

import asyncio

import httpx
from livekit.plugins import openai as livekit_openai
from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame
from pipecat.services.openai.tts import OpenAITTSService

from support.live_server import LiveServer

TEXT = "Hello there. How are you today?"


def close_to(seconds: float, expected: float) -> bool:
    """Within 10%: Piper's duration predictor samples noise, so unseeded lengths vary by a few percent."""
    return abs(seconds - expected) < 0.1 * expected


def http_pcm_seconds(server: LiveServer, text: str) -> float:
    body = {"input": text, "response_format": "pcm", "stream_format": "audio"}
    return len(httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60).content) / 2 / 24000


def test_pipecat_openai_tts_service_gets_streamed_24khz_pcm(server: LiveServer) -> None:
    async def speak() -> tuple[bytes, list[int]]:
        tts = OpenAITTSService(api_key="local", base_url=f"{server.url}/v1", sample_rate=24000,
                               settings=OpenAITTSService.Settings(model="gpt-4o-mini-tts", voice="marin"))  # fmt: skip
        tts._sample_rate = 24000  # normally set in setup(); the chunk size is 0 otherwise
        pcm, rates = bytearray(), []
        async for frame in tts.run_tts(TEXT, "ctx-1"):
            if isinstance(frame, TTSAudioRawFrame):
                pcm += frame.audio
                rates.append(frame.sample_rate)
            elif isinstance(frame, ErrorFrame):
                raise AssertionError(frame.error)
        return bytes(pcm), rates

    pcm, rates = asyncio.run(speak())
    assert set(rates) == {24000}
    assert len(rates) >= 2  # pipecat emits half-second frames as the stream arrives, not one blob
    assert close_to(len(pcm) / 2 / 24000, http_pcm_seconds(server, TEXT))


def test_livekit_openai_tts_gets_sse_audio(server: LiveServer) -> None:
    async def speak() -> tuple[bytes, set[int]]:
        tts = livekit_openai.TTS(base_url=f"{server.url}/v1", api_key="local", model="gpt-4o-mini-tts",
                                 voice="ash", response_format="pcm")  # fmt: skip
        pcm, rates = bytearray(), set()
        try:
            async with tts.synthesize(TEXT) as stream:
                async for event in stream:
                    pcm += event.frame.data.tobytes()
                    rates.add(event.frame.sample_rate)
        finally:
            await tts.aclose()
        return bytes(pcm), rates

    pcm, rates = asyncio.run(speak())
    assert rates == {24000}
    assert close_to(len(pcm) / 2 / 24000, http_pcm_seconds(server, TEXT))
