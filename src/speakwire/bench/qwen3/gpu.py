"""Qwen3-TTS on a GPU: the real 0.6B- and 1.7B-Base architectures with random weights, as the server runs them.

For each model: build a random-weight checkpoint from the published configs (``qwen3.random_checkpoint``),
load it with ``load_qwen3_engine`` (bf16 on CUDA), then measure

* **equality**: the bf16 streamed decode (our chunk schedule) against one full decode of the same codes (the
  developer run ``python -m bench.qwen3.gpu_check``, which ``bench/gpu/run.sh`` runs, adds greedy codes of the
  generation loop against the ``qwen_tts`` package's ``generate`` and the streamed waveform against its audio);
* **concurrency**: N streams started at once (1, 4, 16, 32, 64) and 16 streams started over two seconds,
  each a voice-cloning (ICL) utterance of ``--frames`` frames with EOS steered off: time to first audio
  (the first chunk, and the first audible sample: ``speakwire.bench.audible``) p50/p95, real-time factor
  per stream, aggregate audio seconds per second, underruns against real-time
  playback from each stream's first chunk, the loop's mean batch and step time, and peak GPU memory.

Then the loop's whole static step (talker decode, code predictor, sampling: ``static_step``) is captured as
one CUDA graph per batch bucket and span bucket: the capture time, greedy codes of 4 rows stepped together
(texts of different lengths, 200 frames: past the 256-position span) against the eager step's at the same spans
(bit for bit) and at the rows' own spans (bf16 rounding may part them at a near-tie), and the levels again
("graphs" rows). The first levels load with ``cuda_graphs=False``: the same static step, run eagerly.

Results go to ``--out`` (JSON and markdown) after every measurement, so a run cut short still reports.

    bash bench/gpu/fetch_wheels.sh                   # on the dev machine: the wheels the GPU image lacks
    # then, on the GPU machine (device tool: carry [".whl"]):
    bash bench/gpu/run.sh                            # = python3 -m bench.qwen3.gpu_check --out $OUT
    speakwire bench qwen3-gpu --device cpu --models 0.6B-Base --levels 1,2 --frames 8   # a smoke run on CPU
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speakwire.bench.audible import AudibleOnset
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.concurrency import together
from speakwire.bench.machine import describe
from speakwire.bench.playback import simulate
from speakwire.bench.results import percentile, write_results
from speakwire.server import gc_heap

TEXT = (
    "Good morning, and thank you for calling. Your order left our warehouse this morning and should reach you "
    "on Thursday; I have sent the tracking link to your email. Is there anything else I can help you with today?"
)
FRAME_S = 0.08


Equality = Callable[[Any, Any, int], dict[str, Any]]
"""More equality checks, ``(torch, engine, frames) -> figures``, run beside the package's own (``gpu_check``)."""


def main(argv: Sequence[str] | None = None, *, equality: Equality | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--models", default="0.6B-Base,1.7B-Base")
    parser.add_argument("--levels", default="1,4,16,32,64")
    parser.add_argument("--frames", type=int, default=125, help="frames per utterance (10 s of audio)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget-s", type=float, default=480, help="start no new measurement after this")
    parser.add_argument("--out", type=Path, default=Path("bench/results/qwen3-gpu"))
    parser.add_argument(
        "--graphs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the eager levels, capture the code predictor as CUDA graphs and measure again",
    )
    parser.add_argument("--graph-levels", default="1,16,64")
    parser.add_argument("--equality-frames", type=int, default=60, help="frames compared with the package")
    parser.add_argument("--graph-equality-rows", type=int, default=4,
                        help="rows stepped together (texts of different lengths) for graphs vs eager")  # fmt: skip
    parser.add_argument("--graph-equality-frames", type=int, default=200,
                        help="frames per row for graphs vs eager (200 cross the 256-position span bucket)")  # fmt: skip
    parser.add_argument("--profile-level", type=int, default=16, help="profile 40 frames at this many streams; 0: off")
    args = parser.parse_args(argv)

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("speakwire.engines.qwen3.engine").setLevel(logging.ERROR)  # capped on purpose
    started = time.monotonic()
    result: dict[str, Any] = {"machine": describe(torch_device=args.device), "frames": args.frames, "models": {}}
    for name in args.models.split(","):
        if time.monotonic() - started > args.budget_s:
            break
        report: dict[str, Any] = {}
        result["models"][name] = report
        try:
            save = lambda: write_results(args.out, result, _markdown(result))  # noqa: E731
            _run_model(torch, name, args, report, save, started, equality)
        except Exception as exc:  # report what broke and go on to the next model
            logging.exception("model %s failed", name)
            report["error"] = f"{type(exc).__name__}: {exc}"
        write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 1 if any("error" in report for report in result["models"].values()) else 0  # a check fails loudly


def _run_model(
    torch: Any, name: str, args: Any, report: dict[str, Any], save: Any, started: float, equality: Equality | None
) -> None:
    from speakwire.bench.qwen3.random_checkpoint import build_random_checkpoint
    from speakwire.engines.qwen3 import load_qwen3_engine

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = build_random_checkpoint(Path(tmp), name, device=args.device, dtype=dtype)
        report["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine = load_qwen3_engine(str(path), device=args.device, cuda_graphs=False)
        report["load_s"] = time.perf_counter() - t0
    report["memory_plan"] = engine.memory.describe()
    report["slots"] = engine.memory.slots
    report["weights_gib"] = engine.memory.weights / 2**30
    try:
        t0 = time.perf_counter()
        list(engine.synthesize("Hello.", request(engine, 0, 10)))
        report["warm_up_s"] = time.perf_counter() - t0
        report["equality"] = {
            **(equality(torch, engine, args.equality_frames) if equality else {}),
            **_stream_decode_equality(torch, engine),
        }
        report["gc_frozen_objects"] = gc_heap.freeze_startup_heap()  # as the server does before /ready
        save()
        levels = [int(n) for n in args.levels.split(",")]
        report["levels"] = []
        labels: list[int | str] = [*levels, "16-staggered"]
        for n in labels:
            if time.monotonic() - started > args.budget_s:
                report["stopped"] = "time budget"
                break
            streams = 16 if n == "16-staggered" else int(n)
            if streams > engine.memory.slots:
                continue
            stagger = 2.0 if n == "16-staggered" else 0.0
            if n == args.profile_level:
                _profile(torch, engine, streams, args.out / f"profile-{name}-{n}.txt")
            level = _level(torch, engine, streams, args.frames, stagger_s=stagger)
            level["label"] = str(n)
            report["levels"].append(level)
            logging.info("%s %s: %s", name, n, json.dumps(level))
            save()
        if args.graphs and time.monotonic() - started < args.budget_s:
            _with_graphs(torch, engine, args, report, save, started)
    finally:
        gc_heap.thaw()
        engine.close()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


def _with_graphs(torch: Any, engine: Any, args: Any, report: dict[str, Any], save: Any, started: float) -> None:
    """The code predictor as CUDA graphs: capture time, greedy codes against eager, then the levels again."""
    from speakwire.engines.qwen3.generation_loop import RowEnd

    def greedy_codes() -> list[Any]:
        """Greedy codes of ``--graph-equality-rows`` rows opened at once (so they step together), each text a
        different tail of ``TEXT`` (prompts of different lengths: ragged spans in one batch)."""
        rows = []
        for i in range(min(args.graph_equality_rows, engine.memory.slots)):
            row = engine.open_row(request(engine, 5 + i, args.graph_equality_frames, greedy=True))
            row.feed(TEXT[i * 17 :])
            row.finish()
            rows.append(row)
        codes = []
        for row in rows:
            frames = []
            while not isinstance(event := row.events.get(timeout=300), RowEnd):
                frames.append(event.codes)
            codes.append(torch.stack(frames).cpu())
        return codes

    graphs: dict[str, Any] = {}
    report["cuda_graphs"] = graphs
    capture = args.device.startswith("cuda")  # on a CPU: the same static step, run eagerly
    label = "graphs" if capture else "static, eager"
    state = engine.loop.state
    try:
        exact = greedy_codes()
        state.pad_spans = True
        try:
            padded = greedy_codes()  # eager at the spans the graphs read
        finally:
            state.pad_spans = False
        if not engine.loop.wait_idle(timeout=60):
            raise RuntimeError("the loop did not go idle in 60 s: no capture while rows run")
        graphs["capture_s"] = engine.loop.capture_graphs() if capture else 0.0
        graphs["graphs"] = state.graph_count
        captured = greedy_codes()
        graphs["rows"] = len(captured)
        graphs["greedy_codes_equal_frames"] = _equal_rows(padded, captured)  # same shapes: bit for bit
        graphs["greedy_codes_equal_frames_vs_exact_span"] = _equal_rows(exact, captured)
        graphs["padded_vs_exact_span_equal_frames"] = _equal_rows(exact, padded)
    except Exception as exc:
        logging.exception("CUDA graph capture failed")
        graphs["error"] = f"{type(exc).__name__}: {exc}"
        state.drop_graphs()
        return
    save()
    for n in [int(x) for x in args.graph_levels.split(",")]:
        if time.monotonic() - started > args.budget_s or n > engine.memory.slots:
            break
        level = _level(torch, engine, n, args.frames, stagger_s=0.0)
        level["label"] = f"{n} ({label})"
        report["levels"].append(level)
        logging.info("graphs %s: %s", n, json.dumps(level))
        save()


def _equal_rows(a: list[Any], b: list[Any]) -> str:
    """``_equal_frames`` per row, joined (one row: just its figure)."""
    return ", ".join(_equal_frames(x, y) for x, y in zip(a, b, strict=True))


def _equal_frames(a: Any, b: Any) -> str:
    """Frames equal before the first difference, of those both have."""
    n = min(len(a), len(b))
    return f"{int((a[:n] == b[:n]).all(dim=1).long().cumprod(0).sum())} of {n}"


def request(engine: Any, seed: int, frames: int, *, greedy: bool = False) -> Any:
    """A prepared voice-cloning request of ``frames`` frames (greedy: no sampling, for code comparisons)."""
    from speakwire.bench.qwen3.steering import noise_clip
    from speakwire.engines.base import SynthesisRequest

    request = SynthesisRequest(
        ref_audio=noise_clip(3.0, seed=1), ref_text="This is how I sound when I talk.", seed=seed,
        max_new_tokens=frames, language="English", extra={"greedy": True} if greedy else {},
    )  # fmt: skip
    return engine.prepare(engine.validate(request))


def _stream_decode_equality(torch: Any, engine: Any) -> dict[str, Any]:
    """The streamed decode (our chunk schedule) of random codes against one full decode of them."""
    import numpy as np

    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    decoder = engine.tts_model.model.speech_tokenizer.model.decoder
    generator = torch.Generator(device="cpu").manual_seed(0)
    codes = torch.randint(0, int(decoder.config.codebook_size), (100, 16), generator=generator).to(decoder.device)
    stream = StreamDecoder(decoder)
    pieces, at = [], 0
    for size in (2, 4, 8, 16, 25, 25, 20):
        pieces.append(stream.decode(codes[at : at + size]))
        at += size
    with torch.inference_mode():
        whole = decoder(codes.T.unsqueeze(0))[0, 0].float().cpu().numpy()
    chunked = np.concatenate(pieces)
    return {
        "bf16_stream_decode_max_abs_diff": float(np.abs(chunked - whole[: len(chunked)]).max()),
        "decode_dtype": str(next(decoder.parameters()).dtype),
    }


def _level(torch: Any, engine: Any, streams: int, frames: int, *, stagger_s: float) -> dict[str, Any]:
    from speakwire.bench.qwen3.steering import steer_eos
    from speakwire.engines.qwen3.generation_loop import LoopStats

    requests = [request(engine, seed, frames) for seed in range(streams)]
    results: list[dict[str, Any]] = [{} for _ in range(streams)]

    def one(i: int) -> None:
        time.sleep(stagger_s * i / max(streams - 1, 1))
        begin = time.perf_counter()
        arrivals: list[tuple[float, int]] = []
        onset = AudibleOnset()
        rate = 24_000
        for chunk in engine.synthesize(TEXT, requests[i]):
            at = time.perf_counter() - begin
            arrivals.append((at, len(chunk.samples)))
            onset.feed_samples(at, chunk.samples)
            rate = chunk.sample_rate
        wall = time.perf_counter() - begin
        player = simulate(arrivals, rate)  # real-time playback from the first chunk; bytes here are samples
        results[i] = {"ttfa": arrivals[0][0], "audible": onset.heard_at(rate), "audio": player.audio_s,
                      "wall": wall, "underruns": player.underruns}  # fmt: skip

    if engine.info.extra.get("device", "").startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    engine.loop.stats = LoopStats()
    with steer_eos(engine, after=None):
        wall = together(streams, one)
    ttfa = [r["ttfa"] for r in results if r["ttfa"] is not None]
    audible = [r["audible"] for r in results if r["audible"] is not None]
    stats = engine.loop.stats.snapshot()
    level = {
        "streams": streams,
        "stagger_s": stagger_s,
        "ttfa_p50_ms": 1000 * (percentile(ttfa, 50) or 0.0),
        "ttfa_p95_ms": 1000 * (percentile(ttfa, 95) or 0.0),
        "audible_p50_ms": None if not audible else 1000 * (percentile(audible, 50) or 0.0),
        "audible_p95_ms": None if not audible else 1000 * (percentile(audible, 95) or 0.0),
        "rtf_mean": statistics.mean(r["wall"] / r["audio"] for r in results),
        "aggregate_x_real_time": sum(r["audio"] for r in results) / wall,
        "underruns_total": sum(r["underruns"] for r in results),
        "streams_with_underruns": sum(1 for r in results if r["underruns"]),
        "loop_mean_batch": stats["mean_batch"],
        "loop_step_ms": stats["mean_step_ms"],
        "loop_prefill_ms": stats["mean_prefill_ms"],
    }
    if engine.info.extra.get("device", "").startswith("cuda"):
        level["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return level


def _profile(torch: Any, engine: Any, streams: int, path: Path) -> None:
    """Where a step's time goes: torch.profiler over ``streams`` rows of 40 frames, top operators by device time."""
    from torch.profiler import ProfilerActivity, profile

    from speakwire.bench.qwen3.steering import steer_eos
    from speakwire.engines.qwen3.generation_loop import RowEnd

    activities = [ProfilerActivity.CPU]
    if engine.info.extra.get("device", "").startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with steer_eos(engine, after=None), profile(activities=activities) as prof:
        rows = [engine.open_row(request(engine, seed, 40)) for seed in range(streams)]
        for row in rows:
            row.feed(TEXT)
            row.finish()
        for row in rows:
            while not isinstance(row.events.get(timeout=120), RowEnd):
                pass
    key = "self_cuda_time_total" if len(activities) > 1 else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=40)
    note = "CUDA kernels of every thread (the loop's, code2wav's); CPU operators of this thread only"
    path.write_text(f"{streams} rows × 40 frames; {note}; loop {engine.loop.stats.snapshot()}\n\n{table}\n")


def _markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# Qwen3-TTS on a GPU (random weights, published architectures)",
        "",
        f"{m.get('gpu', m['device'])}, torch {m['torch']}, Python {m['python']}; {result['frames']} frames "
        f"({result['frames'] * FRAME_S:g} s) per utterance, ICL voice cloning, EOS steered off; "
        "rows marked (graphs) run the code predictor as CUDA graphs, the others eager.",
    ]
    for name, report in result["models"].items():
        lines += ["", f"## {name}", ""]
        for key in ("error", "memory_plan", "build_s", "load_s", "warm_up_s", "equality", "cuda_graphs", "stopped"):
            if key in report:
                lines.append(f"- {key}: {report[key]}")
        if report.get("levels"):
            lines += [
                "",
                "| streams | first audio p50 / p95 ms | first audible p50 / p95 ms | RTF | aggregate ×RT "
                "| underruns (streams) | mean batch | step ms | GPU peak GiB |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for level in report["levels"]:
                lines.append(
                    f"| {level['label']} | {level['ttfa_p50_ms']:.0f} / {level['ttfa_p95_ms']:.0f} "
                    f"| {_ms(level.get('audible_p50_ms'))} / {_ms(level.get('audible_p95_ms'))} "
                    f"| {level['rtf_mean']:.3f} | {level['aggregate_x_real_time']:.1f} "
                    f"| {level['underruns_total']} ({level['streams_with_underruns']}) "
                    f"| {level['loop_mean_batch']:.1f} | {level['loop_step_ms']:.1f} "
                    f"| {level.get('gpu_peak_gib', 0):.1f} |"
                )
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    raise SystemExit(main())
