"""Time to first audio through the official elevenlabs SDK: ``convert_realtime`` (stream-input) on speakwire.

    python bench/dialects/elevenlabs.py [--url http://127.0.0.1:8000] [--repeats 5]

``first_audio_s`` measures from the call into the SDK's generator (which opens the WebSocket, sends the init
message, the text and ``{"text": ""}``) to the first audio chunk it yields: ``pcm_24000``, voice ``alloy``
(our default voice). The loopback handshake is inside the figure: the SDK gives no way to open the socket
first. The rest of the audio is drained. Without --url a server is started on a free port.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is first on sys.path, and its name would hide the elevenlabs package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from elevenlabs.client import ElevenLabs  # noqa: E402

from speakwire.bench.timing import first_chunk_s  # noqa: E402

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. Is there anything "
    "else I can help you with today?"
)


def first_audio_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from starting ``convert_realtime`` to its first audio bytes; the stream is drained to its end."""
    client = ElevenLabs(api_key=api_key, base_url=base_url)
    client.text_to_speech._ws_base_url = base_url.replace("https://", "wss://").replace("http://", "ws://")
    started = time.perf_counter()
    chunks = client.text_to_speech.convert_realtime(
        voice_id="alloy", text=iter([text]), model_id="eleven_flash_v2_5", output_format="pcm_24000"
    )
    return first_chunk_s(chunks, started, missing="no audio before the stream ended")


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
    print(f"elevenlabs stream-input first audio: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms over {len(times)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
