"""How many streams this server can keep playing in real time, measured at startup: where admission starts.

A stream that plays without gaps needs the engine to make one second of audio per second. So the
capacity of a CPU engine is its throughput with every worker busy, in audio seconds per wall second,
and that depends on the machine (cores, their speed, what else runs there), not on a constant. The
warm-up therefore measures it: every worker synthesizes the same short reply at once, the first
sentence frame-streamed as a stream's first segment is and the rest whole, and the audio they made
over the wall time they took is the capacity in real-time streams.

Admission then allows ``ADMISSION_SHARE`` of it, so that the streams admitted keep some headroom for
the first segments of new streams (which cost more) and for bursts. An operator's ``--max-streams``
wins over the measurement; a batched engine (Qwen3) states its own limit (its KV slots) instead.

One short measurement on a shared machine is noisy, so it is only the starting point: from the first
real work on, ``server.live_capacity`` re-estimates the figure from what the workers actually do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speakwire.concurrency import together
from speakwire.engines.base import Engine, SynthesisRequest, SynthesisRun

ADMISSION_SHARE = 0.9
"""Streams admitted per stream of measured capacity."""
DEFAULT_STREAMS = 64
"""Admission limit when nothing was measured (warm-up off) and nobody set one."""
MAX_STREAMS = 512
"""Upper bound on a derived limit (a fast machine measuring hundreds of streams still has sockets to serve)."""
MEASURE_SEGMENTS = (
    "Thanks for calling, your order shipped this morning.",
    "It should arrive on Thursday, and the driver will leave it at the front door if nobody is home.",
)
"""One short reply as the pipeline would cut it: a latency-critical first segment, then a whole one."""


@dataclass(frozen=True, slots=True)
class Capacity:
    streams: int
    """Concurrent streams admitted before new ones get 429 / 1013."""
    source: str
    """``warm-up`` (measured), ``operator`` (--max-streams), ``engine`` (its own limit) or ``default``."""
    workers: int
    audio_s_per_s: float | None = None
    """Measured throughput with every worker busy: audio seconds per wall second (None: not measured)."""
    measure_wall_s: float | None = None


def can_measure(engine: Engine) -> bool:
    """CPU engines that synthesize per segment on the workers (not a batched engine with its own limit)."""
    info = engine.info
    return not info.max_concurrent and not info.streams_text


def measure_throughput(engine: Engine, workers: int) -> tuple[float, float]:
    """All ``workers`` synthesize ``MEASURE_SEGMENTS`` at once; returns (audio s per wall s, wall s). Blocking."""
    rate = engine.info.sample_rate
    totals = [0] * workers

    def work(slot: int) -> None:  # a failure reaches the caller, which then falls back to the default limit
        for index, text in enumerate(MEASURE_SEGMENTS):
            request = engine.prepare(engine.validate(SynthesisRequest()))
            run = SynthesisRun(latency_critical=index == 0)
            totals[slot] += sum(len(chunk.samples) for chunk in engine.synthesize(text, request, run))

    wall = together(workers, work, name="speakwire-capacity")
    return sum(totals) / rate / max(wall, 1e-6), wall


def derive(
    *, operator_limit: int | None, engine_limit: int | None, workers: int, measured: tuple[float, float] | None
) -> Capacity:
    """The admission limit from what is known, in order: the operator, the engine's own limit, the measurement."""
    audio_s_per_s, wall = measured if measured is not None else (None, None)
    if operator_limit is not None and operator_limit > 0:
        streams = min(operator_limit, engine_limit) if engine_limit else operator_limit
        source = "engine" if engine_limit and engine_limit < operator_limit else "operator"
        return Capacity(streams, source, workers, audio_s_per_s, wall)
    if engine_limit:
        return Capacity(engine_limit, "engine", workers, audio_s_per_s, wall)
    if audio_s_per_s is not None:
        streams = min(MAX_STREAMS, max(1, math.floor(audio_s_per_s * ADMISSION_SHARE)))
        return Capacity(streams, "warm-up", workers, audio_s_per_s, wall)
    return Capacity(DEFAULT_STREAMS, "default", workers)
