"""Qwen3 over HTTP: does the batched loop serve 8 concurrent streams as well as one (issue 19, item 9)?

A real ``speakwire serve --engine qwen3`` on a tiny random CustomVoice checkpoint (the tests' builder),
streamed ``POST /v1/audio/speech`` requests of raw PCM, all with the same text and seed (so every stream
makes the same frames), each stream from its own client kept open like a voice application's
(``bench.http_client``: a client built per request cost ~22 ms of the benchmark's own Python per
stream, and eight built at once were ~180 ms of every p95). First one stream at a time (``--repeats``
runs), then ``--streams`` at once (``--rounds`` rounds). Reported: each level's audio-seconds per
wall-second (solo: per stream; concurrent: the round's total audio over its wall time), first-byte
p50/p95, the loop's mean host time per step from ``/metrics``, and the two targets as ratios:
concurrent/solo throughput (≥ 4×) and concurrent/solo p95 first audio (≤ 3×).

Wall-clock ratios move with whatever else runs on the machine, so each level also reports the server
process's CPU time (``/proc/<pid>/stat``, all its threads) per second of audio, and the load average
around it: CPU per audio-second solo over CPU per audio-second at 8 streams is how much the batching
saves, whatever the machine's load.

    speakwire bench qwen3-http-concurrency --out bench/results/qwen3-http-concurrency-2core/<name>
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.checkout import tests_on_path
from speakwire.bench.concurrency import together
from speakwire.bench.http_client import http_client
from speakwire.bench.machine import describe, one_line
from speakwire.bench.metrics import scrape
from speakwire.bench.process import cpu_seconds
from speakwire.bench.results import percentile, write_results
from speakwire.bench.servers import speakwire_server

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."
RATE = 24000


def one_stream(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, float, float]:
    """(seconds to the first audio byte, seconds of audio, wall seconds) of one streamed request."""
    started = time.perf_counter()
    first: float | None = None
    size = 0
    with client.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - started
            size += len(chunk)
    assert first is not None, "no audio"
    return first, size / 2 / RATE, time.perf_counter() - started


def concurrent_round(
    clients: Sequence[httpx.Client], url: str, body: dict[str, Any]
) -> tuple[list[float], float, float]:
    """First-byte times, total audio seconds and wall seconds of one request per client, started together."""
    results: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)] * len(clients)

    def run(i: int) -> None:
        results[i] = one_stream(clients[i], url, body)

    wall = together(len(clients), run)
    return [first for first, _, _ in results], sum(audio for _, audio, _ in results), wall


def step_metrics(url: str) -> tuple[float, float]:
    """(engine step seconds, steps) so far, from ``/metrics``."""
    metrics = scrape(url)
    return metrics.get("speakwire_engine_step_seconds_total", 0.0), metrics.get("speakwire_engine_steps_total", 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/qwen3-http-concurrency"))
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="solo requests")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent rounds")
    parser.add_argument("--frames", type=int, default=64, help="max_new_tokens per request")
    args = parser.parse_args(argv)
    tests_on_path()  # the tiny checkpoint builder lives with the tests
    from tiny_checkpoint import build_tiny_checkpoints

    machine = describe()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_checkpoints(Path(tmp))["custom_voice"]
        body = {"input": TEXT, "response_format": "pcm", "stream_format": "audio", "seed": 1,
                "max_new_tokens": args.frames}  # fmt: skip
        server = speakwire_server(args.out, "--engine", "qwen3", "--model", str(model), "--device", "cpu",
                                  max_streams=64, name="speakwire-qwen3-tiny")  # fmt: skip
        clients = [http_client(timeout=300) for _ in range(args.streams)]  # one per listener, kept (see http_client)
        with server, contextlib.ExitStack() as stack:
            for client in clients:
                stack.enter_context(client)
            url = server.url
            one_stream(clients[0], url, body)  # warm the path once more
            for client in clients:
                client.get(f"{url}/health").raise_for_status()  # each listener's connection is open before the clock
            s0, c0, l0 = step_metrics(url), cpu_seconds(server.pid), os.getloadavg()[0]
            solo = [one_stream(clients[0], url, body) for _ in range(args.repeats)]
            s1, c1, l1 = step_metrics(url), cpu_seconds(server.pid), os.getloadavg()[0]
            rounds = [concurrent_round(clients, url, body) for _ in range(args.rounds)]
            s2, c2, l2 = step_metrics(url), cpu_seconds(server.pid), os.getloadavg()[0]

    solo_first = [first for first, _, _ in solo]
    solo_rate = statistics.median(audio / wall for _, audio, wall in solo)
    all_first = [first for firsts, _, _ in rounds for first in firsts]
    concurrent_rate = statistics.median(audio / wall for _, audio, wall in rounds)
    solo_p95, concurrent_p95 = percentile(solo_first, 95), percentile(all_first, 95)
    assert solo_p95 is not None and concurrent_p95 is not None
    solo_cpu = (c1 - c0) / sum(audio for _, audio, _ in solo)
    concurrent_cpu = (c2 - c1) / sum(audio for _, audio, _ in rounds)
    result: dict[str, Any] = {
        "machine": machine,
        "model": "tiny random Qwen3-TTS CustomVoice (tests/qwen3/tiny_checkpoint.py), over HTTP",
        "streams": args.streams,
        "max_new_tokens": args.frames,
        "solo": {"audio_s_per_s": round(solo_rate, 2), "first_audio_p50_ms": round(statistics.median(solo_first) * 1e3),
                 "first_audio_p95_ms": round(solo_p95 * 1e3), "audio_s": round(solo[0][1], 2),
                 "host_ms_per_step": _per_step(s0, s1), "server_cpu_ms_per_audio_s": round(solo_cpu * 1e3, 1),
                 "load_average": [round(l0, 2), round(l1, 2)]},
        "concurrent": {"audio_s_per_s": round(concurrent_rate, 2),
                       "first_audio_p50_ms": round(statistics.median(all_first) * 1e3),
                       "first_audio_p95_ms": round(concurrent_p95 * 1e3), "host_ms_per_step": _per_step(s1, s2),
                       "server_cpu_ms_per_audio_s": round(concurrent_cpu * 1e3, 1),
                       "load_average": [round(l1, 2), round(l2, 2)],
                       "rounds": [{"audio_s": round(a, 2), "wall_s": round(w, 2)} for _, a, w in rounds]},
        "throughput_ratio": round(concurrent_rate / solo_rate, 2),
        "first_audio_p95_ratio": round(concurrent_p95 / solo_p95, 2),
        "cpu_per_audio_ratio": round(solo_cpu / concurrent_cpu, 2) if concurrent_cpu else None,
    }  # fmt: skip
    write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 0


def _per_step(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    steps = after[1] - before[1]
    return round((after[0] - before[0]) / steps * 1e3, 2) if steps else None


def _markdown(r: dict[str, Any]) -> str:
    solo, many = r["solo"], r["concurrent"]
    return "\n".join(
        [
            f"# Qwen3 over HTTP: {r['streams']} concurrent streams against one",
            "",
            f"{r['model']}; max_new_tokens {r['max_new_tokens']}, seed 1 (every stream the same frames); "
            f"{one_line(r['machine'])}",
            "",
            "| level | audio-s per s | first audio p50 / p95 ms | host ms per loop step | server CPU ms per "
            "audio-s | load average (before, after) |",
            "|---|---:|---:|---:|---:|---:|",
            f"| 1 stream | {solo['audio_s_per_s']} | {solo['first_audio_p50_ms']} / {solo['first_audio_p95_ms']} | "
            f"{solo['host_ms_per_step']} | {solo['server_cpu_ms_per_audio_s']} | {solo['load_average']} |",
            f"| {r['streams']} at once | {many['audio_s_per_s']} | {many['first_audio_p50_ms']} / "
            f"{many['first_audio_p95_ms']} | {many['host_ms_per_step']} | {many['server_cpu_ms_per_audio_s']} | "
            f"{many['load_average']} |",
            "",
            f"- throughput {r['throughput_ratio']}x one stream's (target >= 4x); p95 first audio "
            f"{r['first_audio_p95_ratio']}x solo (target <= 3x); CPU per audio-second "
            f"{r['cpu_per_audio_ratio']}x lower at {r['streams']} streams.",
            "",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
