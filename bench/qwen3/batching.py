"""Qwen3 batching on CPU: the generation loop against the package's generate, at 1, 4, 16 and 32 streams.

Three ways to serve N concurrent utterances of the same checkpoint, each exactly ``--frames`` frames
(EOS is steered off, so every run does the same work):

* **loop (codes)**: N rows of our generation loop, frames only — the talker's throughput;
* **loop (audio)**: N ``Qwen3Engine.synthesize`` streams on N threads — rows plus each stream's
  incremental code2wav decode, the way the server runs them; time to first audio per stream;
* **package**: N threads calling the package's ``generate_*`` (``synthesize_full`` of the tests' oracle,
  ``tests/qwen3/oracle/package.py``, through ``bench.checkout``) — the previous engine's model path, one
  utterance at a time under its lock; its first audio is its whole result.

Reported per level: aggregate frames/s and audio-seconds per second (real-time multiple), first-audio
p50/p95, the loop's mean batch and host time per step, and the ratios loop/package. Results go to
``--out`` as JSON and markdown.

    python -m bench.qwen3.batching --threads 1 --out bench/results/qwen3-cpu-batching
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.machine import describe, one_line
from speakwire.bench.results import percentile, write_results

TEXT = "hello world, this is a tiny test of streaming speech for many listeners at once."
FRAME_S = 0.08


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--levels", default="1,4,16,32")
    parser.add_argument("--frames", type=int, default=60, help="frames per utterance (EOS steered off)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--package-levels", default="1,4,16", help="levels to run the (slow, serial) package at")
    parser.add_argument("--out", type=Path, default=Path("bench/results/qwen3-cpu-batching"))
    args = parser.parse_args(argv)

    import logging

    import torch

    logging.getLogger("speakwire").setLevel(logging.ERROR)  # every utterance here is capped on purpose
    torch.set_num_threads(args.threads)
    machine = describe(torch_device="cpu")
    tests_on_path()  # the tiny checkpoint builder and EOS steering live with the tests
    from qwen3_testing import steer_eos
    from tiny_checkpoint import build_tiny_checkpoints

    from speakwire.engines.qwen3 import load_qwen3_engine

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_checkpoints(Path(tmp))["custom_voice"]
        engine = load_qwen3_engine(str(path), max_batch=max(int(n) for n in args.levels.split(",")))
    levels = [int(n) for n in args.levels.split(",")]
    package_levels = {int(n) for n in args.package_levels.split(",") if n}
    rows = []
    with steer_eos(engine, after=None):
        _codes(engine, 1, 5)  # warm-up
        for n in levels:
            row: dict[str, Any] = {"streams": n, "loop_codes": _codes(engine, n, args.frames)}
            row["loop_audio"] = _audio(engine, n, args.frames, full=False)
            if n in package_levels:
                row["package"] = _audio(engine, n, args.frames, full=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
    engine.close()

    result = {
        "machine": machine,
        "model": "tiny random Qwen3-TTS CustomVoice (tests/qwen3/tiny_checkpoint.py)",
        "frames_per_utterance": args.frames,
        "levels": rows,
    }  # fmt: skip
    write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 0


def _request(engine: Any, seed: int, frames: int) -> Any:
    from speakwire.engines.base import SynthesisRequest

    request = SynthesisRequest(voice="ryan", language="english", seed=seed, max_new_tokens=frames)
    return engine.prepare(engine.validate(request))


def _codes(engine: Any, streams: int, frames: int) -> dict[str, float]:
    """N rows at once through the loop, frames only."""
    from speakwire.engines.qwen3.generation_loop import LoopStats, RowEnd

    loop = engine.loop
    loop.stats = LoopStats()
    started = time.perf_counter()
    rows = [engine.open_row(_request(engine, seed, frames)) for seed in range(streams)]
    for row in rows:
        row.feed(TEXT)
        row.finish()
    made = 0
    for row in rows:
        while not isinstance(row.events.get(), RowEnd):
            made += 1
    wall = time.perf_counter() - started
    stats = loop.stats.snapshot()
    return {
        "frames_per_s": made / wall,
        "x_real_time": made * FRAME_S / wall,
        "mean_batch": stats["mean_batch"],
        "host_ms_per_step": stats["mean_step_ms"],
        "host_ms_per_row_frame": stats["mean_step_ms"] / max(stats["mean_batch"], 1e-9),
        "wall_s": wall,
    }


def _audio(engine: Any, streams: int, frames: int, *, full: bool) -> dict[str, float]:
    """N concurrent utterances to audio: our streams (full=False) or the package's generate (full=True)."""
    tests_on_path()
    from oracle.package import synthesize_full

    first: list[float] = [0.0] * streams
    audio_s: list[float] = [0.0] * streams
    requests = [_request(engine, seed, frames) for seed in range(streams)]

    def one(seed: int) -> None:
        request = requests[seed]
        started = time.perf_counter()
        if full:
            samples = len(synthesize_full(engine, TEXT, request).samples)
            ttfa = time.perf_counter() - started
        else:
            samples, ttfa = 0, None
            for chunk in engine.synthesize(TEXT, request):
                if ttfa is None:
                    ttfa = time.perf_counter() - started
                samples += len(chunk.samples)
        first[seed], audio_s[seed] = float(ttfa or 0.0), samples / 24_000

    wall = together(streams, one)
    return {
        "x_real_time": sum(audio_s) / wall,
        "first_audio_p50_ms": 1000 * (percentile(first, 50) or 0.0),
        "first_audio_p95_ms": 1000 * (percentile(first, 95) or 0.0),
        "wall_s": wall,
    }


def _markdown(result: dict[str, Any]) -> str:
    machine = result["machine"]
    lines = [
        "# Qwen3 batching on CPU: generation loop vs the package's generate",
        "",
        f"{result['model']}; {result['frames_per_utterance']} frames per utterance (EOS steered off); "
        f"{one_line(machine)}.",
        "",
        "| streams | loop codes: frames/s | ×RT | mean batch | host ms/step | ms per row-frame | loop audio: ×RT "
        "| first audio p50/p95 ms | package: ×RT | package first audio p50/p95 ms | loop/package ×RT |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["levels"]:
        codes, audio, package = row["loop_codes"], row["loop_audio"], row.get("package")
        cells = [
            str(row["streams"]),
            f"{codes['frames_per_s']:.0f}",
            f"{codes['x_real_time']:.2f}",
            f"{codes['mean_batch']:.1f}",
            f"{codes['host_ms_per_step']:.1f}",
            f"{codes['host_ms_per_row_frame']:.2f}",
            f"{audio['x_real_time']:.2f}",
            f"{audio['first_audio_p50_ms']:.0f} / {audio['first_audio_p95_ms']:.0f}",
        ]
        if package:
            cells += [
                f"{package['x_real_time']:.2f}",
                f"{package['first_audio_p50_ms']:.0f} / {package['first_audio_p95_ms']:.0f}",
                f"{audio['x_real_time'] / package['x_real_time']:.1f}",
            ]
        else:
            cells += ["—", "—", "—"]
        lines.append("| " + " | ".join(cells) + " |")
    one = result["levels"][0]["loop_codes"]
    lines.append("")
    for row in result["levels"][1:]:
        cost = row["loop_codes"]["host_ms_per_step"] / one["host_ms_per_step"]
        n = row["streams"]
        lines.append(f"- {n} streams: one loop step costs {cost:.1f}× a one-stream step, for {n}× the frames.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
