"""The load generator end to end against a real in-process server with the real Piper voice.

Behaviour only: the report has the right shape and physically sane values. How fast anything is
belongs to the benchmark (``speakwire bench load``), never to a test assertion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speakwire.bench.engine_loop import run_engine_level
from speakwire.bench.loadgen import SpeakwireHttpTarget, SpeakwireWebSocketTarget, StreamTarget, run_level
from speakwire.bench.metrics import metric
from speakwire.bench.process import CpuMeter
from speakwire.bench.report import markdown, write_all
from speakwire.bench.results import LevelResult
from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer

PARAGRAPH = "Good morning, and welcome to the show. Today we talk about streaming speech."


def assert_sane(level: LevelResult, *, target: str, concurrency: int, streams: int) -> None:
    assert level.target == target and level.concurrency == concurrency
    assert [s.index for s in level.streams] == list(range(streams))
    for stream in level.streams:
        assert stream.error is None, stream.error
        assert stream.audio_s > 0 and stream.bytes > 0
        assert stream.ttfa_s is not None and 0 < stream.ttfa_s <= stream.total_s
        # Piper speaks: a sample above -40 dBFS comes, never before the first byte.
        assert stream.audible_s is not None and stream.ttfa_s <= stream.audible_s
        assert isinstance(stream.underruns, int) and stream.underruns >= 0
        assert stream.stall_s >= 0
        assert stream.text_chars == len(PARAGRAPH)
    summary = level.summary()
    assert summary["streams"] == streams and summary["errors"] == 0
    assert summary["ttfa_p50_s"] is not None and summary["ttfa_p95_s"] is not None
    assert summary["ttfa_p50_s"] <= summary["ttfa_p95_s"] <= summary["ttfa_max_s"]
    assert summary["ttfa_p50_s"] <= summary["audible_p50_s"] <= summary["audible_p95_s"]
    assert summary["throughput"] > 0 and summary["audio_s"] > 0
    assert isinstance(summary["streams_with_underrun"], int)


@pytest.mark.parametrize("kind", ["http", "websocket"])
async def test_load_generator_reports_every_stream_at_concurrency_two(server: LiveServer, kind: str) -> None:
    target: StreamTarget
    if kind == "http":
        target = SpeakwireHttpTarget(server.url, timeout_s=60)
    else:
        target = SpeakwireWebSocketTarget(server.ws_url, timeout_s=60, words_per_piece=3, piece_interval_s=0.01)
    level = await run_level(target, [PARAGRAPH], concurrency=2, streams=2)
    assert_sane(level, target=target.name, concurrency=2, streams=2)
    # s16le mono at the 24 kHz the server announced: every byte pair is one sample.
    assert all(s.bytes % 2 == 0 and s.audio_s == pytest.approx(s.bytes / 48000) for s in level.streams)


async def test_both_protocols_deliver_the_same_amount_of_audio_for_the_same_text(server: LiveServer) -> None:
    http = await run_level(SpeakwireHttpTarget(server.url), [PARAGRAPH], concurrency=1, streams=1)
    ws = await run_level(
        SpeakwireWebSocketTarget(server.ws_url, piece_interval_s=0.0), [PARAGRAPH], concurrency=1, streams=1
    )
    # Piper samples noise, so lengths differ a little between runs; the same words give similar audio.
    assert http.streams[0].audio_s == pytest.approx(ws.streams[0].audio_s, rel=0.25)


def test_server_metrics_and_cpu_are_read_around_a_level(server: LiveServer) -> None:
    underruns = metric(server.url, "speakwire_underruns_total")
    assert underruns is None or underruns >= 0
    assert metric(server.url, "speakwire_no_such_metric_total") is None
    assert metric(server.url, "speakwire_no_such_metric_total", missing=0.0) == 0.0
    assert metric("http://127.0.0.1:1", "speakwire_underruns_total", missing=0.0) is None  # nobody answers
    meter = CpuMeter(None)
    meter.start()
    assert meter.stop() is None


def test_raw_engine_loop_and_report_files(piper_engine: PiperEngine, tmp_path: Path) -> None:
    level = run_engine_level(piper_engine, [PARAGRAPH], concurrency=2, streams=2)
    assert_sane(level, target="engine", concurrency=2, streams=2)
    machine = {"cpu_model": "test", "cpu_count": 2, "memory_gib": 1.0, "python": "3", "onnxruntime": "x",
               "piper_tts": "y", "load_average_at_start": [0.0, 0.0, 0.0]}  # fmt: skip
    paths = write_all(tmp_path, [level], machine, {"concurrency": [2], "min_streams": 2})
    document = json.loads(paths["json"].read_text())
    assert document["levels"][0]["summary"]["streams"] == 2
    assert len(document["levels"][0]["streams"]) == 2
    assert "| engine | 2 | 2 | 0 |" in markdown([level], machine, {})
