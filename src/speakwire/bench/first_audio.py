"""Time to first audio for one 3-sentence paragraph, HTTP streaming and the WebSocket (the core issues' figures).

    python bench/first_audio.py [--url http://127.0.0.1:8000] [--repeats 5]

Without --url it starts ``speakwire serve`` on a free port itself. Reports medians of
``--repeats`` runs after one warm-up:
- HTTP: time to the first audio byte of ``stream_format: audio`` (PCM), beside the time
  to synthesize the whole paragraph (last byte);
- WebSocket: from the first ``input.text`` of the paragraph sent in 5-word pieces every
  50 ms (like an LLM) to the first binary audio frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import statistics
import subprocess
import sys
import time

import httpx

from speakwire.client.stream import SpeechStreamClient

PARAGRAPH = (
    "Thanks for calling, this is the voice assistant speaking. Your order shipped this morning and should "
    "arrive on Tuesday. Is there anything else I can help you with today?"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# httpx writes a request's headers and body separately; without TCP_NODELAY, Nagle's algorithm holds the body
# until the server's delayed ACK (~40 ms on Linux) and that wait would be measured as server latency.
CLIENT = httpx.Client(transport=httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]))


def http_once(url: str) -> tuple[float, float]:
    body = {"input": PARAGRAPH, "response_format": "pcm", "stream_format": "audio"}
    started = time.perf_counter()
    first = None
    with CLIENT.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as response:
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter() - started
    assert first is not None
    return first, time.perf_counter() - started


async def ws_once(url: str) -> float:
    words = PARAGRAPH.split(" ")
    pieces = [" ".join(words[i : i + 5]) + " " for i in range(0, len(words), 5)]
    ws_url = url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    async with await SpeechStreamClient.connect(ws_url) as client:
        await client.configure(response_format="pcm", stream_audio=True)
        result = await client.speak(pieces, piece_delay_s=0.05)
    assert result.time_to_first_audio_s is not None
    return result.time_to_first_audio_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "-m", "speakwire", "serve", "--port", str(port), "--log-level", "warning"]
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
    try:
        http_once(url)
        asyncio.run(ws_once(url))  # warm-up
        http = [http_once(url) for _ in range(args.repeats)]
        ws = [asyncio.run(ws_once(url)) for _ in range(args.repeats)]
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
    ms = lambda xs: [round(x * 1000) for x in xs]  # noqa: E731
    first, total = [h[0] for h in http], [h[1] for h in http]
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "paragraph_chars": len(PARAGRAPH),
        "http_first_byte_ms": ms(first),
        "http_first_byte_median_ms": round(statistics.median(first) * 1000, 1),
        "http_whole_paragraph_ms": ms(total),
        "http_whole_paragraph_median_ms": round(statistics.median(total) * 1000, 1),
        "ws_first_audio_ms": ms(ws),
        "ws_first_audio_median_ms": round(statistics.median(ws) * 1000, 1),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
