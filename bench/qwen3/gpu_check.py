"""The GPU check: ``speakwire bench qwen3-gpu`` with the codes held to the ``qwen_tts`` package's own.

``bench/gpu/run.sh`` runs this on the GPU machine (and it runs on a CPU the same way, ``--device cpu``): the
packaged benchmark's levels and CUDA graphs, plus two comparisons against the reference the tests use
(``tests/qwen3/oracle/package.py``, through ``bench.checkout``), which an installed wheel does not carry:

* greedy codes of the generation loop against the package's ``generate`` for the same request (frames equal
  before the first difference);
* the streamed waveform against the package's one-shot audio of the same greedy request.

    python -m bench.qwen3.gpu_check --device cpu --models 0.6B-Base --levels 1,2 --frames 8 \\
        --graph-levels 1 --equality-frames 8 --profile-level 0 --graph-equality-rows 2 --graph-equality-frames 8 \\
        --out /tmp/qwen3-gpu   # the CPU smoke run

Options are ``speakwire bench qwen3-gpu``'s (``--help``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.qwen3 import gpu


def reference_equality(torch: Any, engine: Any, frames: int) -> dict[str, Any]:
    """Greedy codes and audio of the generation loop against the package's ``generate`` (the oracle)."""
    import numpy as np

    tests_on_path()
    from oracle.package import generate, synthesize_full

    from speakwire.bench.qwen3.steering import steer_eos
    from speakwire.engines.qwen3.generation_loop import RowEnd

    out: dict[str, Any] = {}
    request = gpu.request(engine, 3, frames, greedy=True)
    with steer_eos(engine, after=None):
        row = engine.open_row(request)
        row.feed(gpu.TEXT)
        row.finish()
        ours = []
        while not isinstance(event := row.events.get(timeout=120), RowEnd):
            ours.append(event.codes)
        recorded: list[Any] = []
        tokenizer = engine.tts_model.model.speech_tokenizer
        inner = tokenizer.decode

        def decode(items: Any) -> Any:  # records the codes the package decodes
            recorded.append(items[0]["audio_codes"])
            return inner(items)

        tokenizer.decode = decode
        try:
            generate(engine, gpu.TEXT, request, max_new_tokens=frames + 1)
        finally:
            tokenizer.decode = inner
    theirs = recorded[0][int(engine._history(request).shape[0]) :]
    n = min(len(ours), len(theirs))
    a, b = torch.stack(ours).cpu()[:n], theirs.cpu()[:n]
    same = int((a == b).all(dim=1).long().cumprod(0).sum())
    out["greedy_codes_equal_frames"] = f"{same} of {min(len(a), len(b))}"

    short = max(2, frames * 2 // 3)
    with steer_eos(engine, after=short):
        chunks = engine.synthesize(gpu.TEXT, gpu.request(engine, 3, short, greedy=True))
        streamed = np.concatenate([c.samples for c in chunks])
        full = synthesize_full(engine, gpu.TEXT, gpu.request(engine, 3, short, greedy=True)).samples
    n = min(len(streamed), len(full))
    out["greedy_audio_max_abs_diff"] = float(np.abs(streamed[:n] - full[:n]).max()) if n else None
    out["greedy_audio_lengths"] = [len(streamed), len(full)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    return gpu.main(argv, equality=reference_equality)


if __name__ == "__main__":
    raise SystemExit(main())
