"""Aligner accuracy: an aligner's word starts on Piper audio (PocketSphinx's by default) against Piper's exact ones.

    python -m bench.aligner_accuracy                                      # ~1 minute on 2 cores
    python -m bench.aligner_accuracy --out bench/results/aligner-accuracy-2core
    python -m bench.aligner_accuracy --aligner qwen3:/models/Qwen3-ForcedAligner-0.6B   # needs the weights

Why: engines without word timings (Qwen3-TTS) get them from an aligner (``speakwire.aligners``). Piper's
timings are exact (its duration predictor, ``engines/piper_alignment``), so Piper audio is a free ground
truth: every paragraph of ``src/speakwire/bench/data/texts.json`` plus a few with numbers, money, dates,
times, made-up names and punctuation is cut into segments as the pipeline cuts it (``split_text``),
each segment is normalized and synthesized by Piper (seed 1, so the same audio every run) and aligned
by the aligner from the *original* text, as the pipeline would hand it over. Reported: the mean, p95 and
maximum absolute error of word starts, the words left untimed (a segment that got no timings counts all
its words), and the aligner's CPU seconds per second of audio (process CPU time, one thread). Targets
(issue 29): mean <= 50 ms, p95 <= 120 ms, none untimed.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from speakwire.aligners.base import AlignerOptions
from speakwire.aligners.registry import load_aligner
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.engines.piper import PiperEngine
from speakwire.text.alignment import SegmentWords, WordTiming, word_spans
from speakwire.text.normalize import normalize_english
from speakwire.text.segmenter import split_text

OWN_PARAGRAPHS = (
    "Doctor Okonkwo's flight, number 4417, lands at 9:05 pm on March 3, 2025. Please meet her at gate 12 — "
    "she'll have two bags and a cello! Call Siobhan at (555) 123-4567 if it's late.",
    "The invoice came to $1,284.50, about 15% more than the quote. Zorvexa and Quilliam Thistlewick signed "
    "it anyway; the first payment of $300 is due by June 1st. Was that wise? Probably not.",
    "In 1999, the village had 3,200 people; by 2020, it had almost doubled. The old mill on Kettleby Road, "
    "built around 1850, now sells coffee, bread and second-hand books. Open daily from 7 to 5.",
    "Turn left after 2.5 km, then take the second exit. If you reach the bridge (it's painted bright "
    "orange), you've gone too far! The Marwick farm is the third gate on your right.",
)
TARGETS = {"mean_ms": 50.0, "p95_ms": 120.0, "untimed": 0}


@dataclass(frozen=True, slots=True)
class WordResult:
    text: str
    exact_start_s: float
    aligned_start_s: float | None


def paragraphs() -> list[str]:
    data = resources.files("speakwire.bench.data").joinpath("texts.json").read_text()
    return [*json.loads(data)["paragraphs"], *OWN_PARAGRAPHS]


def exact_and_audio(engine: PiperEngine, text: str) -> tuple[np.ndarray, int, list[WordTiming]]:
    normalized = normalize_english(text)
    request = engine.validate(SynthesisRequest(seed=1))
    chunks = list(engine.synthesize(normalized, request, SynthesisRun(latency_critical=False)))
    rate = chunks[0].sample_rate
    words = SegmentWords(text, normalized, offset=0, rate=rate, start_s=0.0)
    exact = words.add([mark for chunk in chunks for mark in chunk.marks]) + words.finish()
    return np.concatenate([chunk.samples for chunk in chunks]), rate, exact


def main() -> None:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, help="folder for results.json (and its README is yours to write)")
    parser.add_argument(
        "--aligner",
        default="pocketsphinx",
        help="any --aligner name, e.g. qwen3:/models/Qwen3-ForcedAligner-0.6B (default pocketsphinx)",
    )
    parser.add_argument("--device", help="where a model aligner runs (default: CUDA when available)")
    args = parser.parse_args()
    machine = describe()
    print(one_line(machine))
    engine = PiperEngine.load()
    aligner = load_aligner(args.aligner, AlignerOptions(device=args.device))
    if aligner is None:
        parser.error("--aligner none times nothing")
    results: list[WordResult] = []
    audio_s = cpu_s = 0.0
    segments = 0
    for paragraph in paragraphs():
        for segment in split_text(paragraph):
            text = segment.spoken
            audio, rate, exact = exact_and_audio(engine, text)
            started = time.process_time()
            aligned = aligner.align(audio, rate, text)
            cpu_s += time.process_time() - started
            audio_s += len(audio) / rate
            segments += 1
            starts: list[float | None] = [timing.start_s for timing in aligned]
            if len(aligned) != len(exact):
                starts = [None] * len(exact)
            assert [(t.char_start, t.char_end) for t in exact] == word_spans(text)
            results.extend(WordResult(t.text, t.start_s, s) for t, s in zip(exact, starts, strict=True))
    aligner.close()
    errors = sorted(abs(r.aligned_start_s - r.exact_start_s) * 1000 for r in results if r.aligned_start_s is not None)
    signed = [(r.aligned_start_s - r.exact_start_s) * 1000 for r in results if r.aligned_start_s is not None]
    summary = {
        "words": len(results),
        "segments": segments,
        "untimed": sum(r.aligned_start_s is None for r in results),
        "mean_ms": round(statistics.fmean(errors), 1),
        "median_ms": round(statistics.median(errors), 1),
        "p95_ms": round(float(np.percentile(errors, 95)), 1),
        "max_ms": round(errors[-1], 1),
        "mean_signed_ms": round(statistics.fmean(signed), 1),
        "audio_s": round(audio_s, 1),
        "aligner_cpu_s": round(cpu_s, 2),
        "cpu_s_per_audio_s": round(cpu_s / audio_s, 4),
    }
    worst = sorted(results, key=lambda r: -abs((r.aligned_start_s or 1e9) - r.exact_start_s))[:10]
    print(json.dumps(summary, indent=2))
    print("worst words:", ", ".join(f"{r.text} ({_error_ms(r)})" for r in worst))
    met = summary["mean_ms"] <= TARGETS["mean_ms"] and summary["p95_ms"] <= TARGETS["p95_ms"]
    print("targets", "met" if met and summary["untimed"] == TARGETS["untimed"] else "NOT met", TARGETS)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {"machine": machine, "aligner": aligner.name, "targets": TARGETS, "summary": summary,
                  "worst": [asdict(r) for r in worst]}  # fmt: skip
        (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")


def _error_ms(result: WordResult) -> str:
    if result.aligned_start_s is None:
        return "untimed"
    return f"{(result.aligned_start_s - result.exact_start_s) * 1000:+.0f} ms"


if __name__ == "__main__":
    main()
