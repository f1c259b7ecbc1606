"""Memory growth of the Piper engine under varied input lengths: what grows, and is it bounded now?

Each configuration runs in a fresh process: the embedded voice on ``--threads`` threads (as the server's
workers), every call a random length (20-340 characters, cut at 300 as the segmenter does), half of
them latency-critical (frame-streamed first sentence), half whole sentences. It prints the resident
memory after a warm-up, right after every round (freed pages not yet returned count too), and after
6 s idle, and the throughput (audio seconds per wall second).

    python -m bench.memory_growth                      # every configuration, one after the other
    python -m bench.memory_growth --configs arena,bounded --rounds 12
    python -m bench.memory_growth --speed 4            # speed on one worker thread, interleaved by process

Configurations:

* ``arena``: what the engine did before (onnxruntime's CPU arena and memory patterns on, glibc defaults);
* ``ort-only``: arena and patterns off, glibc untouched (its dynamic mmap threshold and per-thread arenas);
* ``bounded``: the engine's default now (arena and patterns off, glibc tuned, free pages returned every 5 s;
  see ``speakwire.engines.allocator``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.process import rss_mib
from speakwire.bench.texts import WORDS, paragraphs

CONFIGS = ("arena", "ort-only", "bounded")


def load(config: str):  # type: ignore[no-untyped-def]
    from speakwire.engines import allocator
    from speakwire.engines.piper import PiperEngine, PiperOptions

    if config == "ort-only":
        allocator.tune_allocator = lambda: False  # type: ignore[assignment]
        allocator.MemoryReleaser.maybe_release = lambda self: False  # type: ignore[method-assign]
        import speakwire.engines.piper as piper

        piper.tune_allocator = allocator.tune_allocator  # type: ignore[attr-defined]
    return PiperEngine.load(options=PiperOptions(memory_arena=config == "arena"))


def child(config: str, rounds: int, per_round: int, threads: int) -> dict[str, object]:
    from speakwire.engines.base import SynthesisRequest, SynthesisRun

    engine = load(config)
    base_request = engine.validate(SynthesisRequest())
    audio = [0.0]
    lock = threading.Lock()

    def work(seed: int, calls: int) -> None:
        rng = random.Random(seed)
        for _ in range(calls):
            target = rng.choice((20, 60, 120, 200, 300)) + rng.randint(0, 40)
            words: list[str] = []
            while len(" ".join(words)) < target:
                words.append(rng.choice(WORDS))
            run = SynthesisRun(latency_critical=rng.random() < 0.5)
            text = " ".join(words)[:300] + "."
            seconds = sum(len(c.samples) for c in engine.synthesize(text, base_request, run)) / 22050
            with lock:
                audio[0] += seconds

    def run(calls: int, seed: int) -> None:
        together(threads, lambda k: work(seed + k, calls))

    run(5, 10_000)  # warm-up: every size class seen at least once per thread
    baseline, started, audio_before = rss_mib(), time.perf_counter(), audio[0]
    series = []
    for index in range(rounds):
        run(per_round, index * 97)
        series.append(round(rss_mib()))
    wall = time.perf_counter() - started
    from speakwire.engines.allocator import RELEASE_INTERVAL_S

    time.sleep(RELEASE_INTERVAL_S + 1)  # idle, as at the end of a soak: freed pages should be back by now
    idle = rss_mib()
    return {
        "idle_mib": round(idle),
        "idle_over_baseline": round(idle / baseline, 2),
        "config": config,
        "baseline_mib": round(baseline),
        "series_mib": series,
        "peak_mib": max(series),
        "final_over_baseline": round(series[-1] / baseline, 2),
        "peak_over_baseline": round(max(series) / baseline, 2),
        "throughput_x_rt": round((audio[0] - audio_before) / wall, 2),
    }


def speed_child(config: str, passes: int) -> dict[str, list[float]]:
    """One configuration's speed on a worker thread: ×RT of six sentences whole, then frame-streamed."""
    from speakwire.engines.base import SynthesisRequest, SynthesisRun

    engine = load(config)
    sentences = [s for p in paragraphs() for s in re.split(r"(?<=\.) ", p)][:6]
    results: dict[str, list[float]] = {"whole": [], "streamed": []}

    def bench() -> None:  # on a thread, as the server's workers (glibc gives threads their own arenas)
        for _ in range(passes):
            for mode in results:
                started, audio = time.perf_counter(), 0.0
                for sentence in sentences:
                    request = engine.validate(SynthesisRequest())
                    run = SynthesisRun(latency_critical=mode == "streamed")
                    audio += sum(len(c.samples) for c in engine.synthesize(sentence, request, run)) / 22050
                results[mode].append(audio / (time.perf_counter() - started))

    thread = threading.Thread(target=bench)
    thread.start()
    thread.join()
    return results


def speed(configs: list[str], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each configuration in its own process (glibc settings are per process), interleaved round by round."""
    results: dict[str, dict[str, list[float]]] = {c: {"whole": [], "streamed": []} for c in configs}
    for _ in range(rounds):
        for config in configs:
            out = _run_child(["--speed-child", config])
            for mode, values in out.items():
                results[config][mode].extend(values)
    for config, by_mode in results.items():
        line = []
        for mode, values in by_mode.items():
            ordered = sorted(values)
            line.append(f"{mode} ×RT best {ordered[-1]:.1f} median {ordered[len(ordered) // 2]:.1f}")
        print(f"{config:>8}: " + "; ".join(line), flush=True)
    return results


def _run_child(extra: list[str]) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    argv = [sys.executable, "-m", "bench.memory_growth", *extra]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=10, help="calls per thread per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--speed", type=int, metavar="ROUNDS", help="interleaved speed comparison instead")
    parser.add_argument("--speed-child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.per_round, args.threads)), flush=True)
        return 0
    if args.speed_child:
        print(json.dumps(speed_child(args.speed_child, 2)), flush=True)
        return 0
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    report: dict[str, Any] = {}
    if args.speed:
        report["speed_x_rt"] = speed(configs, args.speed)
    else:
        report["growth"] = growth(configs, args)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"load_average": os.getloadavg(), **report}, indent=2) + "\n")
    return 0


def growth(configs: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for config in configs:
        result = _run_child(["--child", config, "--rounds", str(args.rounds), "--per-round", str(args.per_round),
                             "--threads", str(args.threads)])  # fmt: skip
        results.append(result)
        print(
            f"{config:>8}: RSS after warm-up {result['baseline_mib']} MiB, then {result['series_mib']} "
            f"(final {result['final_over_baseline']:.2f}×, peak {result['peak_over_baseline']:.2f}×), "
            f"idle {result['idle_mib']} MiB ({result['idle_over_baseline']:.2f}×); "
            f"{result['throughput_x_rt']:.1f}× real time",
            flush=True,
        )
    return results


if __name__ == "__main__":
    raise SystemExit(main())
