"""Qwen3-ForcedAligner's cost per second of audio on this machine, through ``speakwire.aligners.qwen3``.

    python -m bench.aligner_cost                                          # ~3 minutes on 2 cores
    python -m bench.aligner_cost --out bench/results/qwen3-aligner-cost-2core

Why: ``--aligner qwen3:<model>`` aligns each sentence once its audio is final, on one thread, and a sentence's
words wait at most max(1 s, 2 × its audio) (``synthesis.aligning``); what one sentence costs says whether the
aligner keeps up. The published weights cannot be downloaded here, but a forward pass costs the same whatever the
weights' values, so the network is built with random weights at the published 0.6B sizes (``arch 0.6B``:
24 encoder and 28 decoder layers of 1024) and at the tests' toy sizes (``arch tiny``: a structural figure only,
the cost of the code around the model). Each sentence is English at 2.5 words per second, or Chinese at 4
characters per second (one unit each), over noise at 24 kHz (Qwen3-TTS's rate; the aligner resamples to 16 kHz).
Reported per arch, language and length: wall and process-CPU seconds per audio second, the minimum of the
repeats, after one warm-up call. Its timings mean nothing (random weights); their cost is the point.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line

RATE = 24_000
ENGLISH = "the weather is fine today and my friend will call you back later with the numbers"
CHINESE = "今天天气很好我的朋友稍后会给你回电话告诉你这些数字"


def sentence(language: str, seconds: float) -> str:
    if language == "english":
        count = max(1, round(2.5 * seconds))
        words = ENGLISH.split()
        return " ".join(words[i % len(words)] for i in range(count)).capitalize() + "."
    count = max(1, round(4 * seconds))
    return "".join(CHINESE[i % len(CHINESE)] for i in range(count)) + "。"


def measure(aligner: Any, language: str, seconds: float, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    samples = (0.1 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)
    text = sentence(language, seconds)
    words = aligner.align(samples, RATE, text)  # warm-up (and a check that it aligned)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        aligner.align(samples, RATE, text)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "language": language,
        "audio_s": seconds,
        "units": len(words),
        "wall_s_per_audio_s": round(min(walls) / seconds, 4),
        "cpu_s_per_audio_s": round(min(cpus) / seconds, 4),
        "wall_s": [round(w, 4) for w in walls],
    }


def main() -> None:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--arch", nargs="+", default=["tiny", "0.6B"], choices=["tiny", "0.6B"])
    parser.add_argument("--seconds", nargs="+", type=float, default=[2.0, 5.0, 10.0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, one per core)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tests_on_path()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_asr import Qwen3ForcedAligner
    from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForceAlignProcessor

    from speakwire.aligners.qwen3 import Qwen3Aligner
    from support.forced_aligner import PUBLISHED, TINY, forced_aligner_parts

    machine = describe(torch_device=args.device)
    print(one_line(machine))
    rows: list[dict[str, Any]] = []
    for arch in args.arch:
        started = time.perf_counter()
        model, processor = forced_aligner_parts(TINY if arch == "tiny" else PUBLISHED)
        model.to(args.device)
        params = sum(p.numel() for p in model.parameters())
        built_s = time.perf_counter() - started
        wrapped = Qwen3ForcedAligner(model=model, processor=processor, aligner_processor=Qwen3ForceAlignProcessor())
        aligner = Qwen3Aligner(wrapped, source=f"random-{arch}", languages=frozenset({"english", "chinese"}))
        with torch.inference_mode():
            for language in ("english", "chinese"):
                for seconds in args.seconds:
                    row = {"arch": arch, "params_m": round(params / 1e6, 1), **measure(aligner, language, seconds,
                                                                                      args.repeats)}  # fmt: skip
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        print(f"{arch}: built in {built_s:.1f} s", flush=True)
        del aligner, wrapped, model
    report = {"machine": machine, "device": args.device, "repeats": args.repeats, "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
