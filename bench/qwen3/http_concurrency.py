"""Qwen3 over HTTP: does the batched loop serve 8 concurrent streams as well as one (issue 19, item 9)?

A real ``speakwire serve --engine qwen3`` on a tiny random CustomVoice checkpoint (the tests' builder),
streamed ``POST /v1/audio/speech`` requests of raw PCM, all with the same text and seed (so every stream
makes the same frames), each stream from its own client kept open like a voice application's
(``bench.http_client``: a client built per request cost ~22 ms of the benchmark's own Python per
stream, and eight built at once were ~180 ms of every p95). One stream at a time (``--repeats``
requests) and ``--streams`` at once (``--rounds`` rounds), interleaved so that both levels see the same
machine (one stream's rate on the 2-core VM moved from 6.0 to 9.9 audio-s/s between runs minutes apart).
Reported: each level's audio-seconds per wall-second (solo: per stream; concurrent: the round's total
audio over its wall time), first-byte p50/p95 and first-audible-sample p50/p95 (``speakwire.bench.audible``),
the loop's mean host time per step from ``/metrics``, and
the two targets as ratios: concurrent/solo throughput (≥ 4×) and concurrent/solo p95 first audio (≤ 3×).

Wall-clock ratios move with whatever else runs on the machine, so each level also reports the server
process's CPU time (``/proc/<pid>/stat``, all its threads) per second of audio, and the load average
around it: CPU per audio-second solo over CPU per audio-second at 8 streams is how much the batching
saves, whatever the machine's load.

    python -m bench.qwen3.http_concurrency --out bench/results/qwen3-http-concurrency-2core/<name>
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.checkout import tests_on_path
from speakwire.bench.audible import AudibleOnset
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.http_client import http_client
from speakwire.bench.machine import describe, one_line
from speakwire.bench.metrics import scrape
from speakwire.bench.process import cpu_seconds
from speakwire.bench.results import percentile, write_results
from speakwire.bench.servers import speakwire_server

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."
RATE = 24000


Timings = tuple[float, float, float, float | None]
"""Of one streamed request: seconds to the first audio byte, seconds of audio, wall seconds, and seconds to
the first audible sample (None: all silence)."""


def one_stream(client: httpx.Client, url: str, body: dict[str, Any]) -> Timings:
    """The ``Timings`` of one streamed request."""
    onset = AudibleOnset()
    started = time.perf_counter()
    first: float | None = None
    size = 0
    with client.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            now = time.perf_counter()
            onset.feed(now, chunk)
            if chunk and first is None:
                first = now - started
            size += len(chunk)
    assert first is not None, "no audio"
    audible = onset.heard_at(RATE)
    return first, size / 2 / RATE, time.perf_counter() - started, None if audible is None else audible - started


def concurrent_round(
    clients: Sequence[httpx.Client], url: str, body: dict[str, Any]
) -> tuple[list[Timings], float, float]:
    """Each request's timings, total audio seconds and wall seconds of one request per client, started together."""
    results: list[Timings] = [(0.0, 0.0, 0.0, None)] * len(clients)

    def run(i: int) -> None:
        results[i] = one_stream(clients[i], url, body)

    wall = together(len(clients), run)
    return results, sum(audio for _, audio, _, _ in results), wall


def step_metrics(url: str) -> tuple[float, float]:
    """(engine step seconds, steps) so far, from ``/metrics``."""
    metrics = scrape(url)
    return metrics.get("speakwire_engine_step_seconds_total", 0.0), metrics.get("speakwire_engine_steps_total", 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/qwen3-http-concurrency"))
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=8, help="solo requests")
    parser.add_argument("--rounds", type=int, default=6, help="concurrent rounds (interleaved with the solo requests)")
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
        with server, contextlib.ExitStack() as stack:
            # One client per listener, kept (see http_client); closed however the run ends.
            clients = [stack.enter_context(http_client(timeout=300)) for _ in range(args.streams)]
            url = server.url
            one_stream(clients[0], url, body)  # warm the path once more
            for client in clients:
                client.get(f"{url}/health").raise_for_status()  # each listener's connection is open before the clock
            solo_phase, many_phase = Phase(), Phase()
            solo: list[Timings] = []
            rounds: list[tuple[list[Timings], float, float]] = []
            for i in range(max(args.repeats, args.rounds)):  # interleaved: both levels see the same machine
                if i < args.repeats:
                    with solo_phase.measure(url, server.pid):
                        solo.append(one_stream(clients[0], url, body))
                if i < args.rounds:
                    with many_phase.measure(url, server.pid):
                        rounds.append(concurrent_round(clients, url, body))

    solo_first = [t[0] for t in solo]
    solo_rate = statistics.median(audio / wall for _, audio, wall, _ in solo)
    all_first = [t[0] for timings, _, _ in rounds for t in timings]
    concurrent_rate = statistics.median(audio / wall for _, audio, wall in rounds)
    solo_p95, concurrent_p95 = percentile(solo_first, 95), percentile(all_first, 95)
    assert solo_p95 is not None and concurrent_p95 is not None
    solo_audible = audible_ms([t[3] for t in solo])
    concurrent_audible = audible_ms([t[3] for timings, _, _ in rounds for t in timings])
    solo_cpu = solo_phase.cpu_s / sum(t[1] for t in solo)
    concurrent_cpu = many_phase.cpu_s / sum(audio for _, audio, _ in rounds)
    result: dict[str, Any] = {
        "machine": machine,
        "model": "tiny random Qwen3-TTS CustomVoice (tests/qwen3/tiny_checkpoint.py), over HTTP",
        "streams": args.streams,
        "max_new_tokens": args.frames,
        "solo": {"audio_s_per_s": round(solo_rate, 2), "first_audio_p50_ms": round(statistics.median(solo_first) * 1e3),
                 "first_audio_p95_ms": round(solo_p95 * 1e3), **solo_audible, "audio_s": round(solo[0][1], 2),
                 "host_ms_per_step": solo_phase.ms_per_step, "server_cpu_ms_per_audio_s": round(solo_cpu * 1e3, 1),
                 "load_average": solo_phase.load_range},
        "concurrent": {"audio_s_per_s": round(concurrent_rate, 2),
                       "first_audio_p50_ms": round(statistics.median(all_first) * 1e3),
                       "first_audio_p95_ms": round(concurrent_p95 * 1e3), **concurrent_audible,
                       "host_ms_per_step": many_phase.ms_per_step,
                       "server_cpu_ms_per_audio_s": round(concurrent_cpu * 1e3, 1),
                       "load_average": many_phase.load_range,
                       "rounds": [{"audio_s": round(a, 2), "wall_s": round(w, 2)} for _, a, w in rounds]},
        "throughput_ratio": round(concurrent_rate / solo_rate, 2),
        "first_audio_p95_ratio": round(concurrent_p95 / solo_p95, 2),
        "cpu_per_audio_ratio": round(solo_cpu / concurrent_cpu, 2) if concurrent_cpu else None,
    }  # fmt: skip
    write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 0


def audible_ms(seconds: Sequence[float | None]) -> dict[str, int | None]:
    """p50 and p95 of the first audible sample, in ms (None where every stream was silent)."""
    known = [s for s in seconds if s is not None]
    p50, p95 = percentile(known, 50), percentile(known, 95)
    return {"first_audible_p50_ms": None if p50 is None else round(p50 * 1e3),
            "first_audible_p95_ms": None if p95 is None else round(p95 * 1e3)}  # fmt: skip


class Phase:
    """One level's share of an interleaved run: the server's CPU seconds, the loop's step time and steps (from
    ``/metrics``), and the load averages seen, summed over the requests or rounds measured under it."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.step_s = 0.0
        self.steps = 0.0
        self.loads: list[float] = []

    @contextlib.contextmanager
    def measure(self, url: str, pid: int | None) -> Iterator[None]:
        (step_s, steps), cpu = step_metrics(url), cpu_seconds(pid)
        self.loads.append(os.getloadavg()[0])
        yield
        cpu_after = cpu_seconds(pid)  # before the scrape, whose own CPU is not this level's
        step_s_after, steps_after = step_metrics(url)
        self.cpu_s += cpu_after - cpu
        self.step_s += step_s_after - step_s
        self.steps += steps_after - steps

    @property
    def ms_per_step(self) -> float | None:
        return round(self.step_s / self.steps * 1e3, 2) if self.steps else None

    @property
    def load_range(self) -> list[float]:
        """Lowest and highest 1-minute load average at the start of a measurement."""
        return [round(min(self.loads), 2), round(max(self.loads), 2)] if self.loads else []


def _markdown(r: dict[str, Any]) -> str:
    solo, many = r["solo"], r["concurrent"]
    return "\n".join(
        [
            f"# Qwen3 over HTTP: {r['streams']} concurrent streams against one",
            "",
            f"{r['model']}; max_new_tokens {r['max_new_tokens']}, seed 1 (every stream the same frames); "
            f"{one_line(r['machine'])}",
            "",
            "| level | audio-s per s | first audio p50 / p95 ms | first audible p50 / p95 ms | host ms per loop "
            "step | server CPU ms per audio-s | load average (lowest, highest) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| 1 stream | {solo['audio_s_per_s']} | {solo['first_audio_p50_ms']} / {solo['first_audio_p95_ms']} | "
            f"{solo.get('first_audible_p50_ms')} / {solo.get('first_audible_p95_ms')} | "
            f"{solo['host_ms_per_step']} | {solo['server_cpu_ms_per_audio_s']} | {solo['load_average']} |",
            f"| {r['streams']} at once | {many['audio_s_per_s']} | {many['first_audio_p50_ms']} / "
            f"{many['first_audio_p95_ms']} | {many.get('first_audible_p50_ms')} / "
            f"{many.get('first_audible_p95_ms')} | {many['host_ms_per_step']} | "
            f"{many['server_cpu_ms_per_audio_s']} | {many['load_average']} |",
            "",
            f"- throughput {r['throughput_ratio']}x one stream's (target >= 4x); p95 first audio "
            f"{r['first_audio_p95_ratio']}x solo (target <= 3x); CPU per audio-second "
            f"{r['cpu_per_audio_ratio']}x lower at {r['streams']} streams.",
            "",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
