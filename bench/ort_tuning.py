"""onnxruntime settings for Piper throughput and latency on this machine: what should the defaults be?

    python -m bench.ort_tuning               # ~5 min on a quiet 2-core machine (9 on a busy one); writes
                                             # bench/results/ort_tuning.{md,json}
    python -m bench.ort_tuning --quick       # one round, smaller workload (harness check)
    python -m bench.ort_tuning --render bench/results/ort_tuning.json   # rewrite the markdown only

Why: the server runs ``workers`` engine threads, each calling ``InferenceSession.run`` on one shared
session whose ``intra_op_num_threads`` decides how many cores one call may use. Threads that exceed
the cores fight each other (and onnxruntime's intra-op threads spin while they wait), so the best
pair depends on the core count; this measures it instead of guessing. No server is involved.

Measured, for worker threads {1, 2} × intra-op threads {1, 2} × inter-op 1 (``PiperEngine`` with
``PiperOptions``):
  * throughput: the benchmark paragraphs synthesized back to back on ``workers`` threads, audio
    seconds per wall second (best of ``--repeats``, the usual way to read a noisy machine);
  * single-stream latency: one ~100-character sentence on an idle engine (median of several runs),
    i.e. the time to first audio of a lone stream whose first segment is a sentence.
Each pair is measured with whole-sentence calls (the pure onnxruntime question) and, where the engine
has it (``PiperOptions.stream_frames``), with frame streaming (first audio after the frontend and a
small decoder window, at the price of recomputed decoder context).
Then two things ``PiperOptions`` cannot set yet:
  * intra-op spinning off (``session.intra_op.allow_spinning = 0``) for the oversubscribed pairs;
  * batching: several streams' sentences of similar length in one ``session.run`` (the ONNX graph
    takes a batch dimension with ``input_lengths``), checked for exactness against unbatched runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.engine_loop import run_engine_level
from speakwire.bench.machine import describe, one_line
from speakwire.bench.process import CpuMeter
from speakwire.bench.results import write_results
from speakwire.bench.texts import paragraphs
from speakwire.engines.base import SynthesisRequest
from speakwire.engines.piper import PiperEngine, PiperOptions, embedded_voice_paths

SENTENCE = "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above the nets."
GRID = [(workers, intra) for workers in (1, 2) for intra in (1, 2)]


@dataclass(slots=True)
class ThreadResult:
    """One (workers, intra-op, spinning) configuration."""

    workers: int
    intra: int
    spinning: bool
    frames: bool
    """Frame streaming on (``PiperOptions.stream_frames``) or whole-sentence calls."""
    throughput: float
    """Audio seconds per wall second, best of the repeats."""
    throughput_runs: list[float]
    sentence_latency_s: float
    """Median wall time of one sentence on an otherwise idle engine."""
    sentence_first_audio_s: float
    """Median time to that sentence's first chunk (equal to the above without frame streaming)."""
    loaded_first_chunk_p50_s: float | None
    """Median time to the first sentence of a paragraph while ``workers`` paragraphs run at once."""
    cpu_pct: float | None
    """CPU of this process during the best throughput run, % of all cores."""


@dataclass(slots=True)
class BatchResult:
    workers: int
    batch: int
    intra: int
    throughput: float
    throughput_runs: list[float]
    batch_latency_p50_s: float
    """Median wall time of one ``session.run`` (every item in a batch waits for the whole batch)."""
    padding_pct: float
    """Share of phoneme positions that were padding."""
    max_abs_diff: float
    """Largest sample difference of a batched item (trimmed to its own length) vs the same item alone."""


FRAMES_SUPPORTED = "stream_frames" in {f.name for f in dataclasses.fields(PiperOptions)}


def make_engine(intra: int, *, spinning: bool = True, frames: bool = False) -> PiperEngine:
    model, config = embedded_voice_paths()
    extra: dict[str, Any] = {"stream_frames": frames} if FRAMES_SUPPORTED else {}
    engine = PiperEngine(model, config, PiperOptions(intra_op_threads=intra, inter_op_threads=1, **extra))
    if frames and not engine.info.extra.get("frame_streaming"):
        raise RuntimeError("frame streaming was asked for but the engine fell back to whole sentences")
    if not spinning:
        # PiperOptions has no spinning knob (deciding whether it needs one is what this measures), so
        # the bench swaps in a session built with it off. Private attribute: bench-only, on purpose.
        engine._voice.session = _session(model, intra, spinning=False)
    for _ in engine.synthesize("Hello.", engine.validate(SynthesisRequest())):
        pass
    return engine


def _session(model: Path, intra: int, *, spinning: bool) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra
    options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])


def sentence_latency(engine: PiperEngine, runs: int) -> list[tuple[float, float]]:
    """(whole sentence, first chunk) wall times of ``SENTENCE`` on an idle engine, one pair per run."""
    request = engine.validate(SynthesisRequest())
    whole, first = [], []
    for _ in range(runs):
        started = time.perf_counter()
        first_at = None
        for _ in engine.synthesize(SENTENCE, request):
            first_at = first_at or time.perf_counter()
        whole.append(time.perf_counter() - started)
        first.append((first_at or time.perf_counter()) - started)
    return list(zip(whole, first, strict=True))


@dataclass(frozen=True, slots=True)
class ThreadConfig:
    workers: int
    intra: int
    spinning: bool = True
    frames: bool = False

    def label(self) -> str:
        return (f"workers={self.workers} intra={self.intra} spinning={'on' if self.spinning else 'off'} "
                f"frames={'on' if self.frames else 'off'}")  # fmt: skip


def measure_threads(texts: Sequence[str], configs: Sequence[ThreadConfig], *, repeats: int, paragraphs: int,
                    latency_runs: int, log: Callable[[str], None]) -> list[ThreadResult]:  # fmt: skip
    """Round-robin over configurations: on a shared machine load drifts, and interleaving makes every
    configuration see the same drift instead of one getting the quiet minute and another the busy one."""
    engines = {c: make_engine(c.intra, spinning=c.spinning, frames=c.frames) for c in configs}
    runs: dict[ThreadConfig, list[tuple[float, float | None, float | None]]] = {c: [] for c in configs}
    latencies: dict[ThreadConfig, list[tuple[float, float]]] = {c: [] for c in configs}
    for round_index in range(repeats):
        order = list(configs[round_index % len(configs) :]) + list(configs[: round_index % len(configs)])
        for config in order:
            engine = engines[config]
            meter = CpuMeter(os.getpid())
            meter.start()
            summary = run_engine_level(engine, texts, concurrency=config.workers, streams=paragraphs).summary()
            runs[config].append((summary["throughput"], summary["ttfa_p50_s"], meter.stop()))
            latencies[config].extend(sentence_latency(engine, latency_runs))
            log(f"round {round_index + 1}/{repeats} {config.label()}: {summary['throughput']:.1f}×RT")
    results = []
    for config in configs:
        best = max(runs[config], key=lambda r: r[0])
        results.append(
            ThreadResult(
                config.workers, config.intra, config.spinning, config.frames, best[0],
                [round(r[0], 2) for r in runs[config]],
                statistics.median(x[0] for x in latencies[config]),
                statistics.median(x[1] for x in latencies[config]),
                best[1], best[2],
            )
        )  # fmt: skip
    return results


# ----- batching ------------------------------------------------------------------------------------


def phoneme_sentences(engine: PiperEngine, texts: Sequence[str]) -> list[list[int]]:
    """Every espeak sentence of every paragraph as Piper phoneme ids (what one ``session.run`` takes)."""
    voice = engine._voice  # bench-only: the batching experiment needs the raw voice
    return [voice.phonemes_to_ids(p) for text in texts for p in voice.phonemize(text) if p]


def _run_batch(session: onnxruntime.InferenceSession, items: Sequence[list[int]], scales: np.ndarray) -> np.ndarray:
    longest = max(len(x) for x in items)
    ids = np.zeros((len(items), longest), dtype=np.int64)  # id 0 is Piper's pad symbol
    for row, item in enumerate(items):
        ids[row, : len(item)] = item
    lengths = np.array([len(x) for x in items], dtype=np.int64)
    out: np.ndarray = session.run(None, {"input": ids, "input_lengths": lengths, "scales": scales})[0]
    return out.reshape(len(items), -1)


def measure_batching(engine: PiperEngine, texts: Sequence[str], configs: Sequence[tuple[int, int, int]],
                     repeats: int) -> list[BatchResult]:  # fmt: skip
    """Similar-length sentences grouped ``batch`` at a time, on ``workers`` threads sharing one session."""
    model, _ = embedded_voice_paths()
    sentences = sorted(phoneme_sentences(engine, texts), key=len)
    # Noise off: durations (so lengths) are deterministic, which the exactness check needs; the compute
    # is the same with noise on.
    scales = np.array([0.0, engine._voice.config.length_scale, 0.0], dtype=np.float32)
    rate = engine.info.sample_rate
    sessions = {intra: _session(model, intra, spinning=True) for intra in sorted({c[2] for c in configs})}
    alone = {i: _run_batch(sessions[min(sessions)], [s], scales)[0] for i, s in enumerate(sentences)}
    audio_s = sum(len(a) for a in alone.values()) / rate
    plans = []
    for workers, batch, intra in configs:
        groups = [list(range(i, min(i + batch, len(sentences)))) for i in range(0, len(sentences), batch)]
        padded = sum(len(g) * max(len(sentences[i]) for i in g) for g in groups)
        plans.append((workers, batch, intra, groups, 100.0 * (1 - sum(len(s) for s in sentences) / padded)))
    runs: list[list[float]] = [[] for _ in plans]
    batch_times: list[list[float]] = [[] for _ in plans]
    max_diff = [0.0 for _ in plans]
    for round_index in range(repeats):  # round-robin, as in measure_threads
        for k in [*range(round_index % len(plans), len(plans)), *range(round_index % len(plans))]:
            workers, _, intra, groups, _ = plans[k]
            outputs: dict[int, np.ndarray] = {}
            times: list[float] = []
            wall = _on_threads(workers, groups, _BatchJob(sessions[intra], sentences, scales, outputs, times))
            runs[k].append(audio_s / wall)
            batch_times[k].extend(times)
            for i, samples in outputs.items():
                reference = alone[i]
                max_diff[k] = max(max_diff[k], float(np.abs(samples[: len(reference)] - reference).max()))
    return [
        BatchResult(workers, batch, intra, max(runs[k]), [round(r, 2) for r in runs[k]],
                    statistics.median(batch_times[k]), round(padding, 1), max_diff[k])
        for k, (workers, batch, intra, _, padding) in enumerate(plans)
    ]  # fmt: skip


@dataclass(slots=True)
class _BatchJob:
    """Runs one group of sentence indices as a batch; keeps each item's audio and the run's wall time."""

    session: onnxruntime.InferenceSession
    sentences: Sequence[list[int]]
    scales: np.ndarray
    outputs: dict[int, np.ndarray]
    times: list[float]

    def __call__(self, group: list[int]) -> None:
        started = time.perf_counter()
        audio = _run_batch(self.session, [self.sentences[i] for i in group], self.scales)
        self.times.append(time.perf_counter() - started)
        for row, i in enumerate(group):
            self.outputs[i] = audio[row]


def _on_threads(workers: int, jobs: Sequence[Any], run: Callable[[Any], None]) -> float:
    """Run every job on ``workers`` threads pulling from one list; returns the wall time."""
    lock, pending = threading.Lock(), list(jobs)

    def worker(_: int) -> None:
        while True:
            with lock:
                if not pending:
                    return
                job = pending.pop(0)
            run(job)

    return together(workers, worker)


# ----- report --------------------------------------------------------------------------------------


def markdown(machine: dict[str, Any], threads: list[ThreadResult], batches: list[BatchResult],
             settings: dict[str, Any]) -> str:  # fmt: skip
    lines = [
        "# onnxruntime tuning for Piper (raw engine, no server)",
        "",
        f"Machine: {one_line(machine)}.",
        f"Workload: {settings['paragraphs']} paragraphs of the benchmark texts per throughput run (best of "
        f"{settings['repeats']}); sentence latency = median of {settings['latency_runs']} × {settings['repeats']} "
        "runs of a "
        f"{len(SENTENCE)}-character sentence on an idle engine. Configurations are interleaved round by round, "
        "so load drift on a shared machine hits all of them alike. Generated by `python -m bench.ort_tuning`.",
        "",
        "## Worker threads × intra-op threads (inter-op 1)",
        "",
        "| workers | intra-op | spinning | frames | throughput ×RT (best) | runs | sentence ms (idle) "
        "| sentence first audio ms (idle) | paragraph first audio p50 ms (loaded) | CPU % |",
        "|---:|---:|:---:|:---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in threads:
        loaded = "–" if r.loaded_first_chunk_p50_s is None else f"{r.loaded_first_chunk_p50_s * 1000:.0f}"
        cpu = "–" if r.cpu_pct is None else f"{r.cpu_pct:.0f}"
        lines.append(
            f"| {r.workers} | {r.intra} | {'on' if r.spinning else 'off'} | {'on' if r.frames else 'off'} "
            f"| {r.throughput:.1f} | {', '.join(f'{x:.1f}' for x in r.throughput_runs)} "
            f"| {r.sentence_latency_s * 1000:.0f} | {r.sentence_first_audio_s * 1000:.0f} | {loaded} | {cpu} |"
        )
    if batches:
        lines += [
            "",
            "## Batching sentences of several streams in one session.run",
            "",
            "Sentences sorted by length and grouped, so a batch holds similar lengths (the best case for "
            "batching). Batched items are trimmed to their own length (in a server: from the alignment "
            "output) and compared with the same sentence run alone.",
            "",
            "| workers | batch | intra-op | throughput ×RT (best) | runs | one run p50 ms | padding % "
            "| max abs diff vs alone |",
            "|---:|---:|---:|---:|---|---:|---:|---:|",
        ]
        for b in batches:
            lines.append(
                f"| {b.workers} | {b.batch} | {b.intra} | {b.throughput:.1f} "
                f"| {', '.join(f'{x:.1f}' for x in b.throughput_runs)} | {b.batch_latency_p50_s * 1000:.0f} "
                f"| {b.padding_pct:.1f} | {b.max_abs_diff:.1e} |"
            )
    lines += ["", "## Recommendation (computed from the tables above)", "", *recommend(threads, batches)]
    return "\n".join(lines) + "\n"


def recommend(threads: list[ThreadResult], batches: list[BatchResult]) -> list[str]:
    """Pick defaults: the fewest threads within 5% of the best throughput, and say what latency costs."""
    spinning = [r for r in threads if r.spinning and not r.frames]
    best = max(spinning, key=lambda r: r.throughput)
    near = [r for r in spinning if r.throughput >= 0.95 * best.throughput]
    pick = min(near, key=lambda r: (r.workers * r.intra, r.intra, r.sentence_latency_s))
    fastest = min(spinning, key=lambda r: r.sentence_latency_s)
    lines = [
        f"- Throughput: workers={pick.workers}, intra_op_threads={pick.intra} gives {pick.throughput:.1f}× real "
        f"time (best measured {best.throughput:.1f}× at workers={best.workers}, intra={best.intra}); "
        "fewest threads within 5% of the best wins, since extra threads only add contention.",
        f"- Idle single-stream latency: lowest with intra_op_threads={fastest.intra} "
        f"({fastest.sentence_latency_s * 1000:.0f} ms per sentence vs {pick.sentence_latency_s * 1000:.0f} ms "
        f"for the throughput pick).",
    ]
    for r in (r for r in threads if r.frames):
        whole = next((x for x in spinning if (x.workers, x.intra) == (r.workers, r.intra)), None)
        if whole is not None:
            lines.append(
                f"- Frame streaming at workers={r.workers}, intra={r.intra}: {r.throughput:.1f}× vs "
                f"{whole.throughput:.1f}× whole sentences ({r.throughput / whole.throughput - 1:+.0%}); idle "
                f"sentence first audio {r.sentence_first_audio_s * 1000:.0f} ms vs "
                f"{whole.sentence_first_audio_s * 1000:.0f} ms."
            )
    off = [r for r in threads if not r.spinning]
    for r in off:
        on = next((x for x in spinning if (x.workers, x.intra) == (r.workers, r.intra)), None)
        if on is not None:
            lines.append(
                f"- Spinning off at workers={r.workers}, intra={r.intra}: {r.throughput:.1f}× vs {on.throughput:.1f}× "
                f"with spinning on; idle sentence {r.sentence_latency_s * 1000:.0f} ms vs "
                f"{on.sentence_latency_s * 1000:.0f} ms."
            )
    if batches:
        single = [b for b in batches if b.batch == 1]
        batched = [b for b in batches if b.batch > 1]
        if single and batched:
            best_single = max(single, key=lambda b: b.throughput)
            best_batch = max(batched, key=lambda b: b.throughput)
            gain = best_batch.throughput / best_single.throughput - 1
            verdict = "pays" if gain > 0.05 else "does not pay"
            lines.append(
                f"- Batching {verdict}: best batched {best_batch.throughput:.1f}× (workers={best_batch.workers}, "
                f"batch={best_batch.batch}, intra={best_batch.intra}) vs best unbatched {best_single.throughput:.1f}× "
                f"(workers={best_single.workers}) ({gain:+.0%}); batched output matches unbatched within "
                f"{max(b.max_abs_diff for b in batches):.1e}. Batching also makes every item wait for the whole batch."
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="Folder for ort_tuning.md/json.")
    parser.add_argument("--repeats", type=int, default=3, help="Rounds over all configurations (best is kept).")
    parser.add_argument("--paragraphs", type=int, default=6, help="Paragraphs per throughput run.")
    parser.add_argument("--latency-runs", type=int, default=3, help="Idle sentence runs per configuration per round.")
    parser.add_argument("--no-batching", action="store_true", help="Skip the batching experiment.")
    parser.add_argument("--no-frames", action="store_true", help="Skip the frame-streaming rows.")
    parser.add_argument("--quick", action="store_true", help="One round, 4 paragraphs, 2 latency runs.")
    parser.add_argument("--texts", type=Path)
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="Rewrite ort_tuning.md in --out from an earlier JSON; no measuring.")  # fmt: skip
    args = parser.parse_args(argv)
    if args.render:
        document = json.loads(args.render.read_text(encoding="utf-8"))
        threads_done = [ThreadResult(**t) for t in document["threads"]]
        batches_done = [BatchResult(**b) for b in document["batching"]]
        text = markdown(document["machine"], threads_done, batches_done, document["settings"])
        (args.out / "ort_tuning.md").write_text(text, encoding="utf-8")
        return 0
    if args.quick:
        args.repeats, args.paragraphs, args.latency_runs = 1, 4, 2
    texts = paragraphs(args.texts)
    machine = describe()
    settings = {"repeats": args.repeats, "paragraphs": args.paragraphs, "latency_runs": args.latency_runs}
    started = time.time()

    def log(message: str) -> None:
        print(f"[ort {time.time() - started:5.0f} s] {message}", flush=True)

    configs = [ThreadConfig(w, i) for w, i in GRID] + [ThreadConfig(2, 2, spinning=False), ThreadConfig(1, 2, False)]
    if FRAMES_SUPPORTED and not args.no_frames:
        configs += [ThreadConfig(w, i, frames=True) for w, i in GRID]
    threads = measure_threads(texts, configs, repeats=args.repeats, paragraphs=args.paragraphs,
                              latency_runs=args.latency_runs, log=log)  # fmt: skip
    batches: list[BatchResult] = []
    if not args.no_batching:
        engine = make_engine(1)
        batch_configs = [(1, 1, 1), (1, 2, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1), (2, 4, 1), (1, 4, 2)]
        batches = measure_batching(engine, texts, batch_configs, args.repeats)
        for b in batches:
            log(f"batching workers={b.workers} batch={b.batch} intra={b.intra}: {b.throughput:.1f}×RT")
    settings["elapsed_s"] = round(time.time() - started, 1)
    document = {"machine": machine, "settings": settings, "threads": [asdict(t) for t in threads],
                "batching": [asdict(b) for b in batches]}  # fmt: skip
    write_results(args.out, document, markdown(machine, threads, batches, settings), json_name="ort_tuning.json",
                  markdown_name="ort_tuning.md")  # fmt: skip
    log(f"wrote {args.out / 'ort_tuning.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
