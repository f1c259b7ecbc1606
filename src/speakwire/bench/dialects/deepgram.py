"""Time to first audio through the official deepgram-sdk: Aura's ``/v1/speak`` WebSocket on speakwire.

    python bench/dialects/deepgram.py [--url http://127.0.0.1:8000] [--repeats 5]

``first_audio_s`` opens a session (the handshake and ``Metadata`` are not timed), then measures from
sending the text in one ``Speak`` followed by ``Flush`` (how Deepgram's docs drive it) to the first binary
audio frame: linear16 at 24 kHz, the default voice. Without --url a server is started on a free port.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from itertools import takewhile
from pathlib import Path
from urllib.parse import urlsplit

# Run as a script, this file's folder is first on sys.path, and its name would hide the deepgram package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from deepgram import DeepgramClient, DeepgramClientEnvironment  # noqa: E402
from deepgram.speak.v1 import SpeakV1Text  # noqa: E402

from speakwire.bench.timing import first_chunk_s  # noqa: E402

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. Is there anything "
    "else I can help you with today?"
)


def first_audio_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from ``Speak`` + ``Flush`` to the first audio byte; the socket is drained to ``Flushed``."""
    host = urlsplit(base_url).netloc
    environment = DeepgramClientEnvironment(base=f"http://{host}", production=f"ws://{host}",
                                            agent=f"ws://{host}", agent_rest=f"http://{host}")  # fmt: skip
    client = DeepgramClient(api_key=api_key, environment=environment)
    with client.speak.v1.connect(model="aura-2-thalia-en", encoding="linear16", sample_rate=24000) as socket:
        next(message for message in socket if getattr(message, "type", None) == "Metadata")
        started = time.perf_counter()
        socket.send_text(SpeakV1Text(text=text))
        socket.send_flush()
        until_flushed = takewhile(lambda message: isinstance(message, bytes) or message.type != "Flushed", socket)
        first = first_chunk_s(
            until_flushed,
            started,
            is_audio=lambda message: isinstance(message, bytes) and bool(message),
            missing="no audio before Flushed",
        )
        socket.send_close()
    return first


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
        first_audio_s(url, PARAGRAPH)  # warm-up
        times = [first_audio_s(url, PARAGRAPH) for _ in range(args.repeats)]
    finally:
        if live is not None:
            live.stop()
    print(f"deepgram /v1/speak first audio: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms over {len(times)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
