"""/metrics shows what a leak would raise first: the event loop's tasks, the threads, the process's descriptors and
memory; over a real loopback server, each is back to its idle count once a mix of streams is done."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from speakwire.bench.loadgen import websocket_reply
from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer, start_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process_* metrics are Linux's")

RUNTIME = ("speakwire_event_loop_tasks", "speakwire_threads", "process_open_fds")
TRANSIENT_THREADS = ("speakwire-memory-release",)
"""Timers that outlive work by design (Piper's last trim, ``engines.allocator``): the counts are taken without them."""


@pytest.fixture(scope="module")
def live(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    server = start_server(engine=piper_engine)
    yield server
    server.stop()


def without_transient_threads(timeout_s: float = 60) -> None:
    """Wait (the server runs in this process) until no timer that outlives the work by design is alive."""
    deadline = time.monotonic() + timeout_s
    while any(t.name in TRANSIENT_THREADS for t in threading.enumerate()):
        assert time.monotonic() < deadline, f"a timer still alive after {timeout_s} s: {threading.enumerate()}"
        time.sleep(0.1)


def settled(live: LiveServer, timeout_s: float = 30) -> dict[str, float]:
    """A scrape whose runtime counts the one before it agrees with (a socket closing, a thread ending: settled)."""
    deadline = time.monotonic() + timeout_s
    last = scrape(live)
    while True:
        time.sleep(0.2)
        now = scrape(live)
        if all(now[name] == last[name] for name in RUNTIME) or time.monotonic() > deadline:
            return now
        last = now


def scrape(live: LiveServer) -> dict[str, float]:
    text = httpx.get(f"{live.url}/metrics", timeout=10).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


async def ws_stream(live: LiveServer, text: str) -> int:
    reply = await websocket_reply(live.ws_url, [text], piece_interval_s=0, timeout_s=60)
    assert reply.error is None, reply.error
    return sum(count for _, count in reply.arrivals)


async def http_stream(live: LiveServer, text: str) -> int:
    body = {"input": text, "voice": "alloy", "response_format": "pcm", "stream_format": "audio"}
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(f"{live.url}/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return len(response.content)


def test_the_runtime_gauges_are_scraped_and_return_to_their_idle_counts_after_streams(live: LiveServer) -> None:
    without_transient_threads()
    idle = settled(live)
    assert all(name in idle for name in RUNTIME), sorted(idle)
    assert idle["speakwire_event_loop_tasks"] >= 1 and idle["speakwire_threads"] >= 1
    assert idle["process_resident_memory_bytes"] > 0

    async def mix() -> list[int]:
        texts = ["Hello there.", "A second stream, a little longer than the first.", "Third."]
        return await asyncio.gather(*(ws_stream(live, t) for t in texts), *(http_stream(live, t) for t in texts))

    assert all(size > 0 for size in asyncio.run(mix()))
    without_transient_threads()
    deadline = time.monotonic() + 30
    while True:
        after = scrape(live)
        done = all(after[name] == idle[name] for name in RUNTIME)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {name: after[name] for name in RUNTIME} == {name: idle[name] for name in RUNTIME}
