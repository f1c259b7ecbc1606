"""A Qwen3 server at 1, 8 and 24 concurrent streams (issue 28's figures): threads, idle CPU, throughput, first
audio, and the gap between the generation loop's step starts.

A tiny random CustomVoice checkpoint (``tests/qwen3/tiny_checkpoint.py``) served over HTTP on the CPU, one kept
client per listener. The levels' rounds are interleaved (1, 8, 24, 1, 8, 24, ...) so every level sees the same
machine. Reported per level: the server's threads (most seen while the round ran, sampled every 20 ms from
``/proc``), aggregate audio seconds per wall second (median over rounds), p50/p95 first byte and first audible
sample; and for the server: its threads idle (loaded, before the first request and after the last), its CPU
over ``--idle-s`` seconds idle after the load (share of one core). The step figures come from a second, fresh
server that only ever runs the largest level (``--gap-rounds`` rounds, so its ``/metrics`` hold steps at that
many rows and nothing else): the median step, the 99th percentile gap between consecutive step starts, and that
gap less the prompts run in it (the host's share: overhead and waits). A tree without those counters reports
none.

``--server-src DIR`` runs the server from another checkout's ``src`` (``git worktree add``), for an A/B::

    python -m bench.qwen3.levels --out /tmp/new
    python -m bench.qwen3.levels --server-src /tmp/base --out /tmp/base-run

Counts (threads, wake-ups) hold on a loaded machine; the timings need a quiet one.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.checkout import tests_on_path
from bench.qwen3.http_concurrency import Timings, one_stream
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.http_client import http_client
from speakwire.bench.machine import describe
from speakwire.bench.metrics import scrape
from speakwire.bench.process import cpu_seconds
from speakwire.bench.results import percentile, write_results
from speakwire.bench.servers import speakwire_server

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError(f"no thread count for {pid}")


@contextlib.contextmanager
def most_threads(pid: int, every_s: float = 0.02) -> Iterator[list[int]]:
    """The most threads ``pid`` had while inside (``[0]`` once the block is left)."""
    seen = [threads_of(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            seen[0] = max(seen[0], threads_of(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        sampler.join()


def round_of(clients: Sequence[httpx.Client], url: str, body: dict[str, Any]) -> tuple[list[Timings], float]:
    """Each request's timings and the wall seconds of one request per client, started together."""
    results: list[Timings] = [(0.0, 0.0, 0.0, None)] * len(clients)

    def run(i: int) -> None:
        results[i] = one_stream(clients[i], url, body)

    return results, together(len(clients), run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/qwen3-levels"))
    parser.add_argument("--levels", default="1,8,24", help="concurrent streams per level")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per level (interleaved)")
    parser.add_argument("--frames", type=int, default=64, help="max_new_tokens per request")
    parser.add_argument("--idle-s", type=float, default=30.0, help="seconds of idle CPU measured after the load")
    parser.add_argument("--gap-rounds", type=int, default=3, help="rounds of the largest level for the step gaps")
    parser.add_argument("--server-src", type=Path, help="run the server from this checkout's src/")
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.levels.split(",")]
    tests_on_path()  # the tiny checkpoint builder lives with the tests
    from tiny_checkpoint import build_tiny_checkpoints

    if args.server_src is not None:
        os.environ["PYTHONPATH"] = str(args.server_src.resolve() / "src")  # the server process only
    machine = describe()
    per_level: dict[int, dict[str, list[Any]]] = {n: {"timings": [], "rates": [], "threads": []} for n in levels}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_checkpoints(Path(tmp))["custom_voice"]
        body = {"input": TEXT, "response_format": "pcm", "stream_format": "audio", "seed": 1,
                "max_new_tokens": args.frames}  # fmt: skip
        serve = ("--engine", "qwen3", "--model", str(model), "--device", "cpu")
        server = speakwire_server(args.out, *serve, max_streams=max(64, *levels), name="speakwire-qwen3-tiny")
        with server, contextlib.ExitStack() as stack:
            assert server.pid is not None
            pid, url = server.pid, server.url
            time.sleep(1.0)
            threads_idle_before = threads_of(pid)
            clients = [stack.enter_context(http_client(timeout=300)) for _ in range(max(levels))]
            one_stream(clients[0], url, body)  # warm the path once
            for client in clients:
                client.get(f"{url}/health").raise_for_status()  # each listener's connection open before the clock
            for _ in range(args.rounds):
                for n in levels:
                    with most_threads(pid) as seen:
                        timings, wall = round_of(clients[:n], url, body)
                    level = per_level[n]
                    level["timings"].extend(timings)
                    level["rates"].append(sum(t[1] for t in timings) / wall)
                    level["threads"].append(seen[0])
            metrics = scrape(url)
            time.sleep(2.0)  # the last responses' tails
            cpu_before = cpu_seconds(pid)
            time.sleep(args.idle_s)
            idle_cpu = (cpu_seconds(pid) - cpu_before) / args.idle_s
            threads_idle_after = threads_of(pid)
        gap_server = speakwire_server(args.out, *serve, max_streams=max(64, *levels), name="speakwire-qwen3-gaps")
        with gap_server, contextlib.ExitStack() as stack:
            clients = [stack.enter_context(http_client(timeout=300)) for _ in range(max(levels))]
            for client in clients:
                client.get(f"{gap_server.url}/health").raise_for_status()
            for _ in range(args.gap_rounds):
                round_of(clients, gap_server.url, body)
            gaps = scrape(gap_server.url)

    result: dict[str, Any] = {
        "machine": machine,
        "server_src": str(args.server_src) if args.server_src else "this checkout",
        "model": "tiny random Qwen3-TTS CustomVoice (tests/qwen3/tiny_checkpoint.py), over HTTP, kept clients",
        "max_new_tokens": args.frames,
        "rounds_per_level": args.rounds,
        "threads_idle_before_load": threads_idle_before,
        "threads_idle_after_load": threads_idle_after,
        "idle_cpu_share_of_a_core": round(idle_cpu, 4),
        "loop_turns": metrics.get("speakwire_engine_loop_turns_total"),
        "step_rows": max(levels),
        "step_p50_ms": _ms(gaps.get("speakwire_engine_step_p50_seconds")),
        "step_gap_p99_ms": _ms(gaps.get("speakwire_engine_step_gap_p99_seconds")),
        "step_host_gap_p99_ms": _ms(gaps.get("speakwire_engine_step_host_gap_p99_seconds")),
        "levels": {},
    }
    for n in levels:
        level = per_level[n]
        first = [t[0] for t in level["timings"]]
        audible = [t[3] for t in level["timings"] if t[3] is not None]
        result["levels"][str(n)] = {
            "threads_max": max(level["threads"]),
            "audio_s_per_s": round(statistics.median(level["rates"]), 2),
            "first_byte_p50_ms": _ms(percentile(first, 50)),
            "first_byte_p95_ms": _ms(percentile(first, 95)),
            "first_audible_p95_ms": _ms(percentile(audible, 95)) if audible else None,
        }
    gap, host_gap, step = result["step_gap_p99_ms"], result["step_host_gap_p99_ms"], result["step_p50_ms"]
    result["step_gap_p99_over_median_step"] = round(gap / step, 2) if gap and step else None
    result["step_host_gap_p99_over_median_step"] = round(host_gap / step, 2) if host_gap and step else None
    write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 1)


def _markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# Qwen3 server at {', '.join(r['levels'])} streams ({r['server_src']})",
        "",
        f"Machine: {r['machine']}. {r['model']}; {r['rounds_per_level']} interleaved rounds per level.",
        "",
        "| streams | threads (max) | audio-s/s | first byte p50 / p95 ms | first audible p95 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, level in r["levels"].items():
        lines.append(
            f"| {n} | {level['threads_max']} | {level['audio_s_per_s']} | {level['first_byte_p50_ms']} / "
            f"{level['first_byte_p95_ms']} | {level['first_audible_p95_ms']} |"
        )
    lines += [
        "",
        f"Threads idle: {r['threads_idle_before_load']} before the load, {r['threads_idle_after_load']} after. "
        f"Idle CPU after the load: {r['idle_cpu_share_of_a_core']:.2%} of a core.",
        f"At {r['step_rows']} streams (a fresh server): median step {r['step_p50_ms']} ms; p99 gap between step "
        f"starts {r['step_gap_p99_ms']} ms ({r['step_gap_p99_over_median_step']}x the median step), less the "
        f"prompts run in the gap {r['step_host_gap_p99_ms']} ms ({r['step_host_gap_p99_over_median_step']}x).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
