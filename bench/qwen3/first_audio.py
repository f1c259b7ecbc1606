"""Time to first audio: our streaming Qwen3 engine vs the qwen-tts package's own generate.

The package returns audio only when the whole utterance is done, so its "first
audio" is its complete result; ours is the first streamed chunk (2 frames). Both
run the same checkpoint, text, seed and frame count, so they produce the same
codes and the same waveform; only *when* the audio exists differs.

How it measures: each path runs once as warm-up, then ``--repeats`` times;
reported are the median and the minimum wall-clock times (``time.perf_counter``)
from the call to (a) the first ``AudioChunk`` out of ``Qwen3Engine.synthesize`` —
prefill, two talker steps and one incremental decode — and (b) the return of
``Qwen3TTSModel.generate_custom_voice`` (or the variant's generate method).

Without ``--model`` it builds the tiny random checkpoints the tests use (CPU,
seconds), whose talker emits EOS at random: ``--frames`` then steers EOS so every
run makes exactly that many frames. With a real checkpoint, leave ``--frames`` 0
to let the model stop by itself.

    python -m bench.qwen3.first_audio --threads 1          # tiny model, 50 frames (4 s of audio)
    python -m bench.qwen3.first_audio --model /models/Qwen3-TTS-12Hz-0.6B-CustomVoice --frames 0
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line

TEXT = "hello world, this is a tiny test of streaming speech."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--model", help="checkpoint directory or hub id (default: build tiny random checkpoints)")
    parser.add_argument("--variant", default="custom_voice", choices=["custom_voice", "voice_design", "base"])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--frames", type=int, default=50, help="force this many frames via EOS steering; 0 = off")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from speakwire.engines.base import SynthesisRequest
    from speakwire.engines.qwen3 import load_qwen3_engine

    tests_on_path()  # the tiny checkpoint builder and EOS steering live with the tests
    from qwen3_testing import noise_clip, steer_eos

    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or str(_tiny(Path(scratch))[args.variant])
        engine = load_qwen3_engine(model)
        variant = engine.variant
        fields: dict[str, Any] = {
            "custom_voice": {},
            "voice_design": {"instructions": "a calm, clear voice"},
            "base": {"ref_audio": noise_clip(3.0), "ref_text": "Hi there!"},
        }[variant]

        def request() -> SynthesisRequest:
            return SynthesisRequest(seed=1234, **fields)

        steering: Callable[[], contextlib.AbstractContextManager[Any]] = (
            (lambda: steer_eos(engine, after=args.frames)) if args.frames else contextlib.nullcontext
        )
        engine.prepare(engine.validate(request()))  # encode a clone prompt once, outside the timings

        def streaming() -> tuple[float, float, int]:
            with steering():
                started = time.perf_counter()
                stream = engine.synthesize(args.text, request())
                first = next(stream)
                to_first = time.perf_counter() - started
                frames = len(first.samples) // 1920 + sum(len(c.samples) // 1920 for c in stream)
                to_last = time.perf_counter() - started
            return to_first, to_last, frames

        def package_generate() -> tuple[float, float, int]:
            prepared = engine.prepare(engine.validate(request()))
            with steering():
                torch.manual_seed(int(prepared.seed or 0))
                started = time.perf_counter()
                wavs, _ = _package_call(engine, args.text, prepared)
                elapsed = time.perf_counter() - started
            return elapsed, elapsed, len(wavs[0]) // 1920

        ours, ours_total, frames_ours = _repeat(streaming, args.repeats)
        theirs, _, frames_theirs = _repeat(package_generate, args.repeats)

    name = args.model or f"tiny random {variant} checkpoint"
    print(f"model: {name} ({engine.model_size}); {frames_ours} frames = {frames_ours / 12.5:.1f} s of audio")
    machine = describe(torch_device=str(engine.info.extra["device"]))
    print(f"hardware: {one_line(machine)}; device {machine['device']} {engine.info.extra['dtype']}")
    print(f"text: {args.text!r}; repeats: {args.repeats} after 1 warm-up")
    print(f"{'path':<46} {'median':>9} {'min':>9}")
    print(f"{'speakwire streaming: first chunk (2 frames)':<46} {_ms(ours)}")
    print(f"{'speakwire streaming: last chunk':<46} {_ms(ours_total)}")
    print(f"{'qwen-tts generate: complete result':<46} {_ms(theirs)}")
    print(f"speed-up of first audio (median): {statistics.median(theirs) / statistics.median(ours):.1f}x")
    if frames_ours != frames_theirs:
        print(f"warning: frame counts differ ({frames_ours} vs {frames_theirs})")
    return 0


def _tiny(out: Path) -> dict[str, Path]:
    tests_on_path()
    from tiny_checkpoint import build_tiny_checkpoints

    paths: dict[str, Path] = build_tiny_checkpoints(out)
    return paths


def _package_call(engine: Any, text: str, request: Any) -> Any:
    tts = engine.tts_model
    if request.task_type == "CustomVoice":
        return tts.generate_custom_voice(text=text, speaker=request.voice, language=request.language)
    if request.task_type == "VoiceDesign":
        return tts.generate_voice_design(text=text, instruct=request.instructions, language=request.language)
    return tts.generate_voice_clone(
        text=text, language=request.language, voice_clone_prompt=[request.extra["voice_clone_prompt"]]
    )


def _repeat(run: Callable[[], tuple[float, float, int]], repeats: int) -> tuple[list[float], list[float], int]:
    """Run once to warm up, then ``repeats`` times: (first times, last times, frames of the last run)."""
    run()
    results = [run() for _ in range(repeats)]
    return [r[0] for r in results], [r[1] for r in results], results[-1][2]


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1000:7.0f}ms {min(times) * 1000:7.0f}ms"


if __name__ == "__main__":
    raise SystemExit(main())
