"""The latency a shared voice library (S3, ``--voices-url``) adds to requests, against the local library, in one run.

    python -m bench.shared_voices                          # ~1-2 minutes on 2 cores
    python -m bench.shared_voices --repeats 40 --out bench/results/shared-voices-2core/results.json

Two Piper servers on loopback ports in this process, one on a local library and one on a
library in S3 (moto's standalone server on loopback, as in ``tests/voices/test_shared_library.py``),
are sent the same requests, alternating between them so a change in machine load hits both:

- ``saved voice, cache hit``: ``POST /v1/audio/speech`` naming a voice the server has used
  within the last second (the shared library trusts its cache that long);
- ``saved voice, revalidated``: the same a second later: the shared library asks S3 again
  (one GET of the voice's record) before answering;
- ``saved voice, cache miss``: a voice another instance just saved (another store on the
  same library: the same data dir for the local one, another cache on the same S3 prefix
  for the shared one), named for the first time here: the shared library reads its record,
  lists and downloads its objects and copies them into its cache;
- ``add``: ``POST /v1/audio/voices`` of a new 2 s clip.

Piper cannot clone, so a request naming a saved voice is answered 400 "cannot clone" right
after the lookup: its time is the HTTP round trip plus the library's work, with no synthesis
in it. ``builtin voice, first byte`` (a short sentence in Piper's own voice, time to the first
body byte) puts the differences in proportion. Each case reports the median and p90 of
``--repeats`` samples, the shared/local ratio of the medians, and the S3 requests the shared
server made per sample. moto answers in a few milliseconds on loopback; S3 itself takes
10-30 ms per request in-region, so the S3 request counts are what carries over.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line

BUCKET = "speakwire-voices-bench"
CASES = ("builtin voice, first byte", "saved voice, cache hit", "saved voice, revalidated",
         "saved voice, cache miss", "add")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    tests_on_path()
    import httpx

    from speakwire.engines.piper import PiperEngine
    from speakwire.settings import Settings
    from speakwire.voices.audio import normalise_reference
    from speakwire.voices.backend import open_backend
    from speakwire.voices.fields import voice_fields
    from speakwire.voices.shared import FRESH_S
    from support.live_server import start_server
    from support.s3_server import LoopbackS3

    machine = describe()
    s3 = LoopbackS3().start()
    s3.create_bucket(BUCKET)
    os.environ.update(s3.env())
    url = f"s3://{BUCKET}/bench"
    engine = PiperEngine.load()
    clip = _wav_clip(2.0)
    reference = normalise_reference(clip)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        servers = {
            "local": start_server(Settings(data_dir=str(work / "local")), engine=engine),
            "shared": start_server(Settings(data_dir=str(work / "shared"), voices_url=url), engine=engine),
        }
        elsewhere = {  # "another instance": another store on the same library
            "local": open_backend(work / "local").open(),
            "shared": open_backend(work / "elsewhere", voices_url=url).open(),
        }
        calls = servers["shared"].state.voices.store.objects.calls
        client = httpx.Client(timeout=60)
        samples: dict[str, dict[str, list[float]]] = {case: {"local": [], "shared": []} for case in CASES}
        s3_requests: dict[str, list[int]] = {case: [] for case in CASES}
        counter = iter(range(10**9))

        def speak(kind: str, voice: str | None) -> float:
            body: dict[str, Any] = {"input": "Hi there.", "response_format": "pcm"}
            if voice:
                body["voice"] = voice
            started = time.perf_counter()
            with client.stream("POST", f"{servers[kind].url}/v1/audio/speech", json=body) as response:
                next(response.iter_raw(), b"")
                elapsed = time.perf_counter() - started
                expected = 400 if voice else 200
                assert response.status_code == expected, (response.status_code, response.read()[:200])
            return elapsed

        def add(kind: str) -> float:
            name = f"v{next(counter)}"
            form = {"name": name, "consent": "Benchmark clip, generated."}
            started = time.perf_counter()
            response = client.post(f"{servers[kind].url}/v1/audio/voices", data=form,
                                   files={"audio_sample": ("ref.wav", clip, "audio/wav")})  # fmt: skip
            elapsed = time.perf_counter() - started
            assert response.status_code == 200, response.text
            return elapsed

        def saved_elsewhere(kind: str) -> str:
            name = f"e{next(counter)}"
            elsewhere[kind].add(voice_fields(name=name, consent="Benchmark clip, generated."), reference)
            return name

        def sample(case: str, measure: Callable[[str], float]) -> None:
            for kind in ("local", "shared") if len(samples[case]["local"]) % 2 else ("shared", "local"):
                before = sum(calls.values())
                samples[case][kind].append(measure(kind))
                if kind == "shared":
                    s3_requests[case].append(sum(calls.values()) - before)

        for kind in servers:  # warm both: first requests, the used voice saved and looked up once
            speak(kind, None)
        used = {kind: saved_elsewhere(kind) for kind in servers}
        for kind in servers:
            speak(kind, used[kind])
        for _ in range(args.repeats):
            sample("builtin voice, first byte", lambda kind: speak(kind, None))
            sample("saved voice, cache hit", lambda kind: speak(kind, used[kind]))
            time.sleep(FRESH_S * 1.05)
            sample("saved voice, revalidated", lambda kind: speak(kind, used[kind]))
            fresh = {kind: saved_elsewhere(kind) for kind in servers}
            sample("saved voice, cache miss", lambda kind, fresh=fresh: speak(kind, fresh[kind]))  # type: ignore[misc]
            sample("add", add)
        client.close()
        for store in elsewhere.values():
            store.close()
        for server in servers.values():
            server.stop()
    s3.stop()
    report(samples, s3_requests, machine, args)
    return 0


def report(
    samples: dict[str, dict[str, list[float]]], s3_requests: dict[str, list[int]], machine: Any, args: Any
) -> None:
    rows: dict[str, dict[str, float]] = {}
    print(f"machine: {one_line(machine)}; {args.repeats} samples per case, local and shared alternating")
    print(f"{'case':28} {'local ms':>17} {'shared ms':>17} {'ratio':>6} {'extra ms':>9} {'S3 requests':>12}")
    for case, by_kind in samples.items():
        local, shared = (_stats(by_kind[kind]) for kind in ("local", "shared"))
        requests = statistics.median(s3_requests[case])
        rows[case] = {
            "local_median_ms": local[0], "local_p90_ms": local[1], "shared_median_ms": shared[0],
            "shared_p90_ms": shared[1], "ratio": shared[0] / local[0], "extra_ms": shared[0] - local[0],
            "s3_requests_median": requests,
        }  # fmt: skip
        print(
            f"{case:28} {local[0]:7.2f} (p90 {local[1]:5.1f}) {shared[0]:7.2f} (p90 {shared[1]:5.1f}) "
            f"{shared[0] / local[0]:6.2f} {shared[0] - local[0]:9.2f} {requests:12g}"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"machine": machine, "repeats": args.repeats, "cases": rows}, indent=2))


def _wav_clip(seconds: float, rate: int = 24_000) -> bytes:
    """A 220 Hz tone with a little noise (the tests' reference clip)."""
    import io

    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.random.default_rng(3).standard_normal(len(t))
    buffer = io.BytesIO()
    sf.write(buffer, wave.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(v * 1000 for v in values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


if __name__ == "__main__":
    raise SystemExit(main())
