"""The open-loop benchmark says which admission rule refused a stream, from the server's own answer."""

from __future__ import annotations

import asyncio

from speakwire.bench.loadgen import text_pieces, websocket_reply
from speakwire.bench.open_loop import Stream, refusal_rule, summarize
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import start_server

LONG = "This reply holds the only stream the server admits while another client asks for one. " * 3


async def test_a_refused_stream_carries_the_rule_that_refused_it(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(max_streams=1), engine=piper_engine)
    try:
        holder = asyncio.create_task(
            websocket_reply(live.ws_url, text_pieces(LONG, 1), piece_interval_s=0.02, timeout_s=60)
        )
        async with asyncio.timeout(30):
            while live.state.pipeline is None or live.state.pipeline.active == 0:
                await asyncio.sleep(0.01)
        late = await websocket_reply(live.ws_url, ["Is there room?"], piece_interval_s=0, timeout_s=30)
        held = await holder
    finally:
        live.stop()
    assert not held.refused and held.error is None and held.arrivals
    assert late.refused and "1 concurrent streams" in late.refusal
    summary = summarize([Stream(0.0, 14, refused=True, refusal=late.refusal), Stream(1.0, 9, refused=True, refusal="")])
    assert summary["refused"] == 2
    assert summary["refused_by"] == {"N concurrent streams": 1, "close 1013": 1}
    assert refusal_rule("Server is at capacity (queued audio is already late for playback); retry shortly.") == (
        "queued audio is already late for playback"
    )
