"""First audio through the official ``wyoming`` client, as Home Assistant asks: one-shot ``synthesize``.

The server must run with a Wyoming port (``speakwire serve --wyoming-port 10200``). ``base_url`` may be the
Wyoming URI (``tcp://127.0.0.1:10200``) or the server's HTTP URL, whose host is then used with
``SPEAKWIRE_WYOMING_PORT`` (default 10200).

    python bench/dialects/wyoming.py [--repeats 5]   # starts its own server, prints both paths' figures
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

# Run as a script, this file's folder is first on sys.path, and its name would hide the wyoming package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from wyoming.audio import AudioChunk, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped  # noqa: E402

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. Is there anything "
    "else I can help you with today?"
)
TIMEOUT_S = 60


def wyoming_address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url if "://" in base_url else f"tcp://{base_url}")
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "tcp" and parts.port:
        return host, parts.port
    return host, int(os.environ.get("SPEAKWIRE_WYOMING_PORT") or 10200)


async def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending a one-shot ``synthesize`` to the first ``audio-chunk`` (then read to ``audio-stop``)."""
    host, port = wyoming_address(base_url)
    async with AsyncTcpClient(host, port) as client:
        started = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        return await _first_chunk(client, started, AudioStop().event().type)


async def first_audio_streaming_s(base_url: str, text: str) -> float:
    """The same through ``synthesize-start`` / one ``synthesize-chunk`` per sentence / ``synthesize-stop``
    (as wyoming-bench streams), from the first chunk sent; read to ``synthesize-stopped``."""
    host, port = wyoming_address(base_url)
    sentences = [s + " " for s in text.replace("? ", "?\n").replace(". ", ".\n").splitlines()]
    async with AsyncTcpClient(host, port) as client:
        started = time.perf_counter()
        await client.write_event(SynthesizeStart().event())
        for sentence in sentences:
            await client.write_event(SynthesizeChunk(text=sentence).event())
        await client.write_event(SynthesizeStop().event())
        return await _first_chunk(client, started, SynthesizeStopped().event().type)


async def _first_chunk(client: AsyncTcpClient, started: float, last: str) -> float:
    first: float | None = None
    while True:
        event = await asyncio.wait_for(client.read_event(), TIMEOUT_S)
        if event is None:
            raise RuntimeError("the server closed the connection")
        if event.type == "error":
            raise RuntimeError(f"the server answered an error: {event.data}")
        if first is None and AudioChunk.is_type(event.type):
            first = time.perf_counter() - started
        if event.type == last:
            if first is None:
                raise RuntimeError("no audio")
            return first


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import httpx

    port, wyoming_port = _free_port(), _free_port()
    server = subprocess.Popen([sys.executable, "-m", "speakwire", "serve", "--port", str(port),
                               "--wyoming-port", str(wyoming_port), "--log-level", "warning"])  # fmt: skip
    uri = f"tcp://127.0.0.1:{wyoming_port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        asyncio.run(first_audio_s(uri, PARAGRAPH))  # warm-up
        one_shot = [asyncio.run(first_audio_s(uri, PARAGRAPH)) for _ in range(args.repeats)]
        streaming = [asyncio.run(first_audio_streaming_s(uri, PARAGRAPH)) for _ in range(args.repeats)]
    finally:
        server.terminate()
        server.wait(timeout=20)
    ms = lambda xs: [round(x * 1000, 1) for x in xs]  # noqa: E731
    print(json.dumps({
        "cores": len(os.sched_getaffinity(0)),
        "one_shot_first_audio_ms": ms(one_shot),
        "one_shot_first_audio_median_ms": round(statistics.median(one_shot) * 1000, 1),
        "streaming_first_audio_ms": ms(streaming),
        "streaming_first_audio_median_ms": round(statistics.median(streaming) * 1000, 1),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
