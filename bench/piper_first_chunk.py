"""Piper time to first chunk and total time, frame-streamed vs whole sentences: what does streaming buy?

    python -m bench.piper_first_chunk                    # ~1-2 minutes on 2 cores
    python -m bench.piper_first_chunk --repeats 3 --threads 2

Why: ``PiperOptions.stream_frames`` yields each sentence in growing windows of frames after the
frontend (``speakwire.engines.piper_stream``), instead of one chunk when the whole sentence is decoded.
It should cut the time to the first chunk and cost some total time (the windows' context is decoded
twice). This measures both through ``PiperEngine.synthesize``, the call the pipeline makes, on a
94-character sentence, a 205-character sentence and a 569-character paragraph (six espeak
sentences: each is streamed on its own, so its first chunk comes from the first sentence), for
intra-op threads 1 and 2. Streamed and whole runs alternate so a change in machine load hits both;
each number is the median of ``--repeats`` runs. The machine and its load average are printed with
the table: on a shared machine the medians move from run to run, the ratios much less.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line
from speakwire.engines.base import SynthesisRequest
from speakwire.engines.piper import PiperEngine, PiperOptions

TEXTS = {
    "sentence": "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above them.",
    "long sentence": (
        "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above them, and the "
        "old keeper of the lighthouse watched the weather turn slowly from grey to gold as the evening came in."
    ),
    "paragraph": (
        "Scientists studying the deep ocean have found that many creatures there make their own light. "
        "Some use it to attract prey, flashing a small glowing lure in front of their jaws. Others use it "
        "to hide, matching the faint light from above so that no shadow gives them away. A few species "
        "even communicate with patterns of blinking, much like fireflies on a summer evening. Researchers "
        "still do not understand how most of these animals control the chemistry so precisely. Every new "
        "expedition brings back footage of behaviour nobody has seen before, and more questions too."
    ),
}


@dataclass(slots=True)
class Run:
    first_s: float
    total_s: float
    audio_s: float
    chunks: int


def synthesize_once(engine: PiperEngine, text: str) -> Run:
    request = engine.validate(SynthesisRequest())
    started = time.perf_counter()
    first = None
    samples = chunks = 0
    sample_rate = engine.info.sample_rate
    for chunk in engine.synthesize(text, request):
        if first is None:
            first = time.perf_counter() - started
        samples += len(chunk.samples)
        chunks += 1
    total = time.perf_counter() - started
    return Run(first or total, total, samples / sample_rate, chunks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="intra-op threads to measure")
    args = parser.parse_args(argv)

    print(one_line(describe()))
    print(f"median of {args.repeats} runs; unseeded (normal noisy synthesis)\n")
    print("| text | intra-op | mode | first chunk s | total s | audio s | chunks | first-chunk speedup |")
    print("|---|---|---|---|---|---|---|---|")
    for threads in args.threads:
        engines = {
            mode: PiperEngine.load(options=PiperOptions(intra_op_threads=threads, stream_frames=mode == "streamed"))
            for mode in ("streamed", "whole")
        }
        assert engines["streamed"].info.extra["frame_streaming"], "the voice did not split; see the log"
        for engine in engines.values():  # warm-up outside the measurement
            synthesize_once(engine, TEXTS["sentence"])
        for label, text in TEXTS.items():
            runs: dict[str, list[Run]] = {mode: [] for mode in engines}
            for _ in range(args.repeats):
                for mode, engine in engines.items():
                    runs[mode].append(synthesize_once(engine, text))
            medians = {mode: _median(mode_runs) for mode, mode_runs in runs.items()}
            speedup = medians["whole"].first_s / medians["streamed"].first_s
            for mode, run in medians.items():
                cells = [f"{label}, {len(text)} chars", threads, mode, f"{run.first_s:.3f}", f"{run.total_s:.3f}",
                         f"{run.audio_s:.1f}", run.chunks, f"{speedup:.1f}x" if mode == "streamed" else ""]  # fmt: skip
                print("| " + " | ".join(map(str, cells)) + " |")
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    return 0


def _median(runs: list[Run]) -> Run:
    return Run(
        statistics.median(run.first_s for run in runs),
        statistics.median(run.total_s for run in runs),
        statistics.median(run.audio_s for run in runs),
        round(statistics.median(run.chunks for run in runs)),
    )


if __name__ == "__main__":
    raise SystemExit(main())
