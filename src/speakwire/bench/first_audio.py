"""Time to first audio for one 3-sentence paragraph, HTTP streaming and the WebSocket (the core issues' figures).

    speakwire bench first-audio [--url http://127.0.0.1:8000] [--repeats 5]

Without --url it starts ``speakwire serve`` on a free port itself. Reports medians of
``--repeats`` runs after one warm-up:
- HTTP: time to the first audio byte of ``stream_format: audio`` (PCM), beside the time
  to synthesize the whole paragraph (last byte);
- WebSocket: from the first ``input.text`` of the paragraph sent in 5-word pieces every
  50 ms (like an LLM) to the first binary audio frame;
- both: the first audible sample (above −40 dBFS, as a player started at the first byte hears it:
  ``speakwire.bench.audible``) beside the first byte.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from speakwire.bench.audible import AudibleOnset
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.http_client import http_client
from speakwire.bench.loadgen import text_pieces, websocket_reply
from speakwire.bench.machine import describe, one_line
from speakwire.bench.servers import speakwire_server, websocket_url

PARAGRAPH = (
    "Thanks for calling, this is the voice assistant speaking. Your order shipped this morning and should "
    "arrive on Tuesday. Is there anything else I can help you with today?"
)


CLIENT = http_client()


def http_once(url: str) -> tuple[float, float, float | None]:
    """(first byte, last byte, first audible sample) of one streamed request, seconds from sending it."""
    body = {"input": PARAGRAPH, "response_format": "pcm", "stream_format": "audio"}
    onset = AudibleOnset()
    started = time.perf_counter()
    first = None
    with CLIENT.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as response:
        rate = int(response.headers.get("x-audio-sample-rate", 24000))
        for chunk in response.iter_raw():
            now = time.perf_counter()
            onset.feed(now, chunk)
            if first is None and chunk:
                first = now - started
    assert first is not None
    audible = onset.heard_at(rate)
    return first, time.perf_counter() - started, None if audible is None else audible - started


async def ws_once(url: str) -> tuple[float, float | None]:
    """(first audio frame, first audible sample), seconds from the first ``input.text``."""
    stream_url = websocket_url(url, "/v1/audio/speech/stream")
    reply = await websocket_reply(stream_url, text_pieces(PARAGRAPH, 5), piece_interval_s=0.05, timeout_s=60)
    if reply.error or not reply.arrivals or reply.first_sent is None:
        raise RuntimeError(reply.error or "no audio")
    audible = reply.onset.heard_at(reply.sample_rate)
    return reply.arrivals[0][0] - reply.first_sent, None if audible is None else audible - reply.first_sent


def measure(url: str, repeats: int) -> tuple[list[tuple[float, float, float | None]], list[tuple[float, float | None]]]:
    """One warm-up each, then ``repeats`` HTTP (first byte, last byte, audible) and WebSocket timings."""
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

    def ms(values: Sequence[float | None]) -> list[int | None]:
        return [None if x is None else round(x * 1000) for x in values]

    def median_ms(values: Sequence[float | None]) -> float | None:
        known = [x for x in values if x is not None]
        return round(statistics.median(known) * 1000, 1) if known else None

    first, total, http_audible = [h[0] for h in http], [h[1] for h in http], [h[2] for h in http]
    ws_first, ws_audible = [w[0] for w in ws], [w[1] for w in ws]
    report = {
        "machine": one_line(machine),
        "paragraph_chars": len(PARAGRAPH),
        "http_first_byte_ms": ms(first),
        "http_first_byte_median_ms": median_ms(first),
        "http_first_audible_ms": ms(http_audible),
        "http_first_audible_median_ms": median_ms(http_audible),
        "http_whole_paragraph_ms": ms(total),
        "http_whole_paragraph_median_ms": median_ms(total),
        "ws_first_audio_ms": ms(ws_first),
        "ws_first_audio_median_ms": median_ms(ws_first),
        "ws_first_audible_ms": ms(ws_audible),
        "ws_first_audible_median_ms": median_ms(ws_audible),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
