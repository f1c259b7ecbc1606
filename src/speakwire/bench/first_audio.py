"""Time to first audio for one 3-sentence paragraph, HTTP streaming and the WebSocket (the core issues' figures).

    speakwire bench first-audio [--url http://127.0.0.1:8000] [--repeats 5]

Without --url it starts ``speakwire serve`` on a free port itself. Reports medians of
``--repeats`` runs after one warm-up:
- HTTP: time to the first audio byte of ``stream_format: audio`` (PCM), beside the time
  to synthesize the whole paragraph (last byte);
- WebSocket: from the first ``input.text`` of the paragraph sent in 5-word pieces every
  50 ms (like an LLM) to the first binary audio frame.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.http_client import http_client
from speakwire.bench.loadgen import text_pieces
from speakwire.bench.machine import describe, one_line
from speakwire.bench.servers import speakwire_server, websocket_url
from speakwire.client.stream import SpeechStreamClient

PARAGRAPH = (
    "Thanks for calling, this is the voice assistant speaking. Your order shipped this morning and should "
    "arrive on Tuesday. Is there anything else I can help you with today?"
)


CLIENT = http_client()


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
    async with await SpeechStreamClient.connect(websocket_url(url, "/v1/audio/speech/stream")) as client:
        await client.configure(response_format="pcm", stream_audio=True)
        result = await client.speak(text_pieces(PARAGRAPH, 5), piece_delay_s=0.05)
    assert result.time_to_first_audio_s is not None
    return result.time_to_first_audio_s


def measure(url: str, repeats: int) -> tuple[list[tuple[float, float]], list[float]]:
    """One warm-up each, then ``repeats`` HTTP (first byte, last byte) and WebSocket first audio timings."""
    http_once(url)
    asyncio.run(ws_once(url))
    http = [http_once(url) for _ in range(repeats)]
    ws = [asyncio.run(ws_once(url)) for _ in range(repeats)]
    return http, ws


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--url", help="a running speakwire (default: start one)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    machine = describe()
    if args.url:
        http, ws = measure(args.url.rstrip("/"), args.repeats)
    else:
        with tempfile.TemporaryDirectory() as logs, speakwire_server(Path(logs)) as server:
            http, ws = measure(server.url, args.repeats)

    def ms(values: list[float]) -> list[int]:
        return [round(x * 1000) for x in values]

    first, total = [h[0] for h in http], [h[1] for h in http]
    report = {
        "machine": one_line(machine),
        "paragraph_chars": len(PARAGRAPH),
        "http_first_byte_ms": ms(first),
        "http_first_byte_median_ms": round(statistics.median(first) * 1000, 1),
        "http_whole_paragraph_ms": ms(total),
        "http_whole_paragraph_median_ms": round(statistics.median(total) * 1000, 1),
        "ws_first_audio_ms": ms(ws),
        "ws_first_audio_median_ms": round(statistics.median(ws) * 1000, 1),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
