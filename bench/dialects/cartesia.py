"""Time to first audio through the official ``cartesia`` SDK: the ``/tts/websocket`` and ``/tts/sse`` on speakwire.

``first_audio_s`` opens the WebSocket first (Cartesia's advice: connect before the first generation; the
handshake is not timed), then measures from ``ctx.push(text)`` + ``ctx.no_more_inputs()`` on a new context
to the first ``chunk`` event, and reads the context to ``done``: pcm_s16le at 24 kHz, the default voice.
``first_audio_sse_s`` is the same text through ``tts.generate_sse`` (the request is timed).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from cartesia import Cartesia

from bench.dialects import Probe
from bench.timing import first_chunk_s
from speakwire.bench.servers import websocket_url

VOICE: Any = {"mode": "id", "id": "alloy"}  # the SDK's TypedDicts, as plain JSON
OUTPUT_FORMAT: Any = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


def client_for(base_url: str, api_key: str) -> Cartesia:
    return Cartesia(api_key=api_key, base_url=base_url, websocket_base_url=websocket_url(base_url))


def first_audio_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from pushing the text on an open connection to the first audio chunk."""
    with client_for(base_url, api_key).tts.websocket_connect() as connection:
        context = connection.context(model_id="sonic-3", voice=VOICE, output_format=OUTPUT_FORMAT, timeout=60)
        started = time.perf_counter()
        context.push(text)
        context.no_more_inputs()
        return first_chunk_s(
            raising_errors(context.receive()),
            started,
            is_audio=lambda event: event.type == "chunk" and bool(event.audio),
            missing="no audio before done",
        )


def first_audio_sse_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from sending ``POST /tts/sse`` to the first chunk event (then read to ``done``)."""
    started = time.perf_counter()
    with client_for(base_url, api_key).tts.generate_sse(
        model_id="sonic-3",
        transcript=text,
        voice=VOICE,
        output_format=OUTPUT_FORMAT,
    ) as stream:
        return first_chunk_s(
            stream, started, is_audio=lambda event: event.type == "chunk", missing="no audio before done"
        )


def raising_errors(events: Iterable[Any]) -> Iterator[Any]:
    """The context's events, raising at the first ``error`` event."""
    for event in events:
        if event.type == "error":
            raise RuntimeError(f"{event.title}: {event.message}")
        yield event


PROBES: dict[str, Probe] = {"cartesia": first_audio_s, "cartesia_sse": first_audio_sse_s}
