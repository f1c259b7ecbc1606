"""First audio through the official ``wyoming`` client, as Home Assistant asks: one-shot or streamed ``synthesize``.

The server must run with a Wyoming port (``speakwire serve --wyoming-port 10200``). ``base_url`` may be the
Wyoming URI (``tcp://127.0.0.1:10200``) or the server's HTTP URL, whose host is then used with
``SPEAKWIRE_WYOMING_PORT`` (default 10200; ``python -m bench.dialect_latency`` sets it).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from wyoming.audio import AudioChunk, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from bench.dialects import Probe
from bench.timing import afirst_chunk_s

TIMEOUT_S = 60


def wyoming_address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url if "://" in base_url else f"tcp://{base_url}")
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "tcp" and parts.port:
        return host, parts.port
    return host, int(os.environ.get("SPEAKWIRE_WYOMING_PORT") or 10200)


async def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending a one-shot ``synthesize`` to the first ``audio-chunk`` (then read to ``audio-stop``)."""
    async with AsyncTcpClient(*wyoming_address(base_url)) as client:
        started = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        return await _first_audio(client, started, AudioStop().event().type)


async def first_audio_streaming_s(base_url: str, text: str) -> float:
    """The same through ``synthesize-start`` / one ``synthesize-chunk`` per sentence / ``synthesize-stop``
    (as wyoming-bench streams), from the first chunk sent; read to ``synthesize-stopped``."""
    sentences = [s + " " for s in text.replace("? ", "?\n").replace(". ", ".\n").splitlines()]
    async with AsyncTcpClient(*wyoming_address(base_url)) as client:
        started = time.perf_counter()
        await client.write_event(SynthesizeStart().event())
        for sentence in sentences:
            await client.write_event(SynthesizeChunk(text=sentence).event())
        await client.write_event(SynthesizeStop().event())
        return await _first_audio(client, started, SynthesizeStopped().event().type)


async def _first_audio(client: AsyncTcpClient, started: float, last: str) -> float:
    return await afirst_chunk_s(_events_until(client, last), started, is_audio=lambda e: AudioChunk.is_type(e.type))


async def _events_until(client: AsyncTcpClient, last: str) -> AsyncIterator[Event]:
    """The server's events up to and including the first of type ``last``; an error event or a close raises."""
    while True:
        event = await asyncio.wait_for(client.read_event(), TIMEOUT_S)
        if event is None:
            raise RuntimeError("the server closed the connection")
        if event.type == "error":
            raise RuntimeError(f"the server answered an error: {event.data}")
        yield event
        if event.type == last:
            return


PROBES: dict[str, Probe] = {"wyoming": first_audio_s, "wyoming_streaming": first_audio_streaming_s}
