"""Time to first audio through the official ``cartesia`` SDK: the ``/tts/websocket`` on speakwire.

    python bench/dialects/cartesia.py [--url http://127.0.0.1:8000] [--repeats 5]

``first_audio_s`` opens the WebSocket first (Cartesia's advice: connect before the first generation; the
handshake is not timed), then measures from ``ctx.push(text)`` + ``ctx.no_more_inputs()`` on a new context
to the first ``chunk`` event, and reads the context to ``done``: pcm_s16le at 24 kHz, the default voice.
``first_audio_sse_s`` is the same text through ``tts.generate_sse`` (the request is timed). Without --url
a server is started on a free port.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# Run as a script, this file's folder is first on sys.path, and its name would hide the cartesia package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from cartesia import Cartesia  # noqa: E402

from speakwire.bench.timing import first_chunk_s  # noqa: E402

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. Is there anything "
    "else I can help you with today?"
)
VOICE = {"mode": "id", "id": "alloy"}
OUTPUT_FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


def client_for(base_url: str, api_key: str) -> Cartesia:
    return Cartesia(api_key=api_key, base_url=base_url, websocket_base_url=base_url.replace("http", "ws", 1))


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
        output_format=OUTPUT_FORMAT,  # type: ignore[arg-type]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running speakwire (default: start one)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    live = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
        from support.live_server import start_server

        live = start_server()
        url = live.url
    try:
        for name, probe in (("/tts/websocket", first_audio_s), ("/tts/sse", first_audio_sse_s)):
            probe(url, PARAGRAPH)  # warm-up
            times = [probe(url, PARAGRAPH) for _ in range(args.repeats)]
            print(f"cartesia {name} first audio: median {statistics.median(times) * 1000:.0f} ms, "
                  f"min {min(times) * 1000:.0f} ms over {len(times)} runs")  # fmt: skip
    finally:
        if live is not None:
            live.stop()


if __name__ == "__main__":
    main()
