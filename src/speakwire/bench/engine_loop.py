"""The limit: the engine itself on N threads, no server, no network, no scheduler.

Every server number reads best as a ratio to this one. Each thread synthesizes whole paragraphs
back to back straight from ``Engine.synthesize``; an engine chunk (one sentence for Piper) counts as
"arrived" when the generator yields it, so time to first audio here is the first sentence's compute
and the underrun count shows what sentence-at-a-time synthesis alone would do to a listener.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence

from speakwire.bench.audible import AudibleOnset
from speakwire.bench.concurrency import together
from speakwire.bench.results import LevelResult, StreamRecord, record_from_arrivals
from speakwire.engines.base import Engine, SynthesisRequest

TARGET = "engine"


def run_engine_level(engine: Engine, texts: Sequence[str], *, concurrency: int, streams: int) -> LevelResult:
    """Synthesize ``streams`` paragraphs on ``concurrency`` threads sharing ``engine`` (blocking)."""
    if concurrency < 1 or streams < 1 or not texts:
        raise ValueError("need concurrency >= 1, streams >= 1 and at least one text")
    counter = itertools.count()
    lock = threading.Lock()
    records: list[StreamRecord] = []
    bytes_per_second = engine.info.sample_rate * 2  # as s16le, the way the servers send it
    level_start = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                index = next(counter)
            if index >= streams:
                return
            text = texts[index % len(texts)]
            arrivals: list[tuple[float, int]] = []
            onset = AudibleOnset()
            error: str | None = None
            sent_at = time.perf_counter()
            try:
                request = engine.validate(SynthesisRequest())
                for chunk in engine.synthesize(text, request):
                    now = time.perf_counter()
                    arrivals.append((now, len(chunk.samples) * 2))
                    onset.feed_samples(now, chunk.samples)
            except Exception as exc:  # recorded, so one failure does not hide the rest of the level
                error = f"{type(exc).__name__}: {exc}"
            record = record_from_arrivals(
                target=TARGET, concurrency=concurrency, index=index, text=text, level_start=level_start,
                sent_at=sent_at, ended_at=time.perf_counter(), arrivals=arrivals,
                bytes_per_second=bytes_per_second, error=error, audible_at=onset.heard_at(engine.info.sample_rate),
            )  # fmt: skip
            with lock:
                records.append(record)

    wall = together(min(concurrency, streams), lambda _: worker(), name="bench-engine")
    records.sort(key=lambda r: r.index)
    return LevelResult(target=TARGET, concurrency=concurrency, wall_s=wall, streams=records)
