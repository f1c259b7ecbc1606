"""Time to first audio with a saved voice vs the same reference sent inline, over a real HTTP server.

A saved voice carries its clone prompt, computed once (at upload, or on first use)
and stored beside the voice; an inline reference (``ref_audio`` as a data URI) is
decoded on every request and encoded into a prompt on the engine's first sight of
it — after that the engine's own LRU prompt cache makes repeats cheap too. So
five cases are measured, each from sending ``POST /v1/audio/speech`` (raw PCM
stream) to the first body byte:

- ``inline, first use``: a fresh server and engine per sample (empty prompt cache):
  decode + prompt encoding + first chunk — what a client pays each time the server
  restarts or the reference falls out of the LRU;
- ``inline, repeated``: the same data URI again on one server (LRU hit; decoding,
  base64 and hashing of the clip remain); the first request is excluded;
- ``saved, first use``: a voice saved without a prompt (as ``speakwire voices add
  --data-dir`` or a Piper server saves one), first request on a fresh server: the
  prompt is encoded and written down;
- ``saved, after restart``: a fresh server and engine per sample on a library whose
  voice already has its prompt: the first request loads it from disk;
- ``saved, repeated``: the same saved voice again on one server (prompt in memory);
  the first request is excluded.

Each case is sampled ``--repeats`` times (fresh servers for the first-use cases) and
reported as median and minimum. Without ``--model`` the tiny random Base checkpoint
of the tests is built (CPU, seconds); its encoders are tiny, so absolute numbers are
small — the ordering and the per-request work removed are what carry over.

    python -m bench.qwen3.voice_library --threads 1
    python -m bench.qwen3.voice_library --model /models/Qwen3-TTS-12Hz-0.6B-Base --ref-seconds 8
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line

TEXT = "Hello there, this is a short sentence."
REF_TEXT = "A few words of reference speech."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--model", help="Base checkpoint directory or hub id (default: the tiny test checkpoint)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ref-seconds", type=float, default=5.0, help="length of the reference clip")
    parser.add_argument("--frames", type=int, default=10, help="max_new_tokens per request (keeps requests short)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    tests_on_path()  # the live server and tiny checkpoint helpers

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        model = args.model or str(_tiny_base(work / "model"))
        clip = _wav(args.ref_seconds)
        bench = Bench(model, work, clip, args.frames)
        results = {
            "inline, first use": bench.samples(args.repeats, bench.inline_first_use),
            "inline, repeated": bench.repeated(args.repeats, inline=True),
            "saved, first use": bench.samples(args.repeats, bench.saved_first_use),
            "saved, after restart": bench.samples(args.repeats, bench.saved_after_restart),
            "saved, repeated": bench.repeated(args.repeats, inline=False),
        }
        parts = components(model, bench.data_uri, args.repeats)
    report(results, parts, args, model)
    return 0


class Bench:
    """Servers on loopback ports with freshly loaded engines, and the requests timed against them."""

    def __init__(self, model: str, work: Path, clip: bytes, frames: int) -> None:
        self.model, self.work, self.clip, self.frames = model, work, clip, frames
        self.data_uri = "data:audio/wav;base64," + base64.b64encode(clip).decode()
        self._libraries = 0
        self._saved_library: Path | None = None

    def server(self, data_dir: Path) -> Any:
        from speakwire.engines.qwen3 import load_qwen3_engine
        from speakwire.settings import Settings
        from support.live_server import start_server

        settings = Settings(engine="qwen3", model=self.model, data_dir=str(data_dir))
        return start_server(settings, engine=load_qwen3_engine(self.model), ready_timeout=600)

    def first_audio(self, server: Any, **fields: Any) -> float:
        """Seconds from sending the request to the first byte of streamed PCM."""
        import httpx

        body = {
            "input": TEXT,
            "response_format": "pcm",
            "stream_format": "audio",
            "max_new_tokens": self.frames,
            "seed": 7,
            **fields,
        }
        started = time.perf_counter()
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=600) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
            chunks = response.iter_bytes()
            elapsed = next(time.perf_counter() - started for chunk in chunks if chunk)
            for _ in chunks:  # the rest of the utterance, so the next request finds the engine idle
                pass
        return elapsed

    def library(self, *, with_prompt: bool) -> Path:
        """A fresh data dir holding voice ``bench``: saved through a server (prompt computed) or offline."""
        self._libraries += 1
        data_dir = self.work / f"library-{self._libraries}"
        if with_prompt:
            server = self.server(data_dir)
            try:
                self.save(server)
            finally:
                server.stop()
        else:
            from speakwire.voices.audio import normalise_reference
            from speakwire.voices.fields import voice_fields
            from speakwire.voices.store import VoiceStore

            with VoiceStore(data_dir) as store:
                fields = voice_fields(name="bench", consent="Synthetic benchmark clip.", ref_text=REF_TEXT)
                store.add(fields, normalise_reference(self.clip))
        return data_dir

    def save(self, server: Any) -> None:
        import httpx

        form = {"name": "bench", "consent": "Synthetic benchmark clip.", "ref_text": REF_TEXT}
        files = {"audio_sample": ("ref.wav", self.clip, "audio/wav")}
        response = httpx.post(f"{server.url}/v1/audio/voices", data=form, files=files, timeout=600)
        response.raise_for_status()

    def on_fresh_server(self, data_dir: Path, **fields: Any) -> float:
        server = self.server(data_dir)
        try:
            return self.first_audio(server, **fields)
        finally:
            server.stop()

    def inline_first_use(self) -> float:
        return self.on_fresh_server(self.work / "empty", ref_audio=self.data_uri, ref_text=REF_TEXT)

    def saved_first_use(self) -> float:
        return self.on_fresh_server(self.library(with_prompt=False), voice="bench")

    def saved_after_restart(self) -> float:
        return self.on_fresh_server(self.saved_library, voice="bench")

    @property
    def saved_library(self) -> Path:
        """One library whose voice got its prompt at upload (made on first need, then shared)."""
        if self._saved_library is None:
            self._saved_library = self.library(with_prompt=True)
        return self._saved_library

    def samples(self, repeats: int, sample: Callable[[], float]) -> list[float]:
        return [sample() for _ in range(repeats)]

    def repeated(self, repeats: int, *, inline: bool) -> list[float]:
        """``repeats`` requests on one server after a first, excluded one (which fills the caches)."""
        fields = {"ref_audio": self.data_uri, "ref_text": REF_TEXT} if inline else {"voice": "bench"}
        server = self.server(self.work / "empty" if inline else self.saved_library)
        try:
            self.first_audio(server, **fields)
            return [self.first_audio(server, **fields) for _ in range(repeats)]
        finally:
            server.stop()


def components(model: str, data_uri: str, repeats: int) -> dict[str, list[float]]:
    """The per-request work behind the cases, timed in-process: what a saved voice saves."""
    from speakwire.audio.decode import decode_reference_audio, parse_audio_reference
    from speakwire.engines.base import SynthesisRequest
    from speakwire.engines.qwen3 import load_qwen3_engine
    from speakwire.voices.prompts import dump_prompt, load_prompt

    engine = load_qwen3_engine(model)
    times: dict[str, list[float]] = {"decode the data URI": [], "encode the prompt": [], "load the stored prompt": []}
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            audio = decode_reference_audio(parse_audio_reference(data_uri))
            times["decode the data URI"].append(time.perf_counter() - started)
            engine.prompt_cache.clear()
            started = time.perf_counter()
            request = engine.prepare(engine.validate(SynthesisRequest(ref_audio=audio, ref_text=REF_TEXT)))
            times["encode the prompt"].append(time.perf_counter() - started)
            data = dump_prompt(request.extra["voice_clone_prompt"], engine="qwen3", model=engine.info.model)
            started = time.perf_counter()
            load_prompt(data, info=engine.info, ref_text=REF_TEXT)
            times["load the stored prompt"].append(time.perf_counter() - started)
    finally:
        engine.close()
    return times


def report(
    results: dict[str, list[float]], parts: dict[str, list[float]], args: argparse.Namespace, model: str
) -> None:
    machine = one_line(describe(torch_device="cpu"))
    print(f"model: {args.model or 'tiny random Base checkpoint (tests/qwen3/tiny_checkpoint.py)'}")
    print(f"machine: {machine}")
    print(f"reference: {args.ref_seconds:g} s WAV; {args.frames} frames per request; {args.repeats} samples each\n")
    print("| case | median ms | min ms | samples ms |")
    print("|---|---:|---:|---|")
    for case, values in results.items():
        samples = ", ".join(f"{v * 1000:.0f}" for v in values)
        median, low = statistics.median(values) * 1000, min(values) * 1000
        print(f"| {case} | {median:.1f} | {low:.1f} | {samples} |")
    print("\n| work per request (in-process) | median ms | min ms |")
    print("|---|---:|---:|")
    for part, values in parts.items():
        print(f"| {part} | {statistics.median(values) * 1000:.1f} | {min(values) * 1000:.1f} |")
    if args.out:
        payload = {
            "model": model,
            "machine": machine,
            "ref_seconds": args.ref_seconds,
            "frames": args.frames,
            "seconds": results,
            "components_seconds": parts,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2))


def _tiny_base(directory: Path) -> Path:
    from tiny_checkpoint import build_tiny_checkpoints

    paths: dict[str, Path] = build_tiny_checkpoints(directory)
    return paths["base"]


def _wav(seconds: float) -> bytes:
    import numpy as np
    import soundfile as sf

    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * 24_000)) / 24_000
    wave = (0.2 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, wave, 24_000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


if __name__ == "__main__":
    raise SystemExit(main())
