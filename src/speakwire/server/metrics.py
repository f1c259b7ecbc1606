"""Prometheus metrics for speech serving, labelled by engine and protocol.

Each app owns its registry (tests start many apps in one process). ``observer()``
returns the pipeline hooks that feed these metrics for one protocol.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from speakwire.engines.base import MonitoredEngine
from speakwire.server.live_capacity import LiveCapacity
from speakwire.synthesis import PipelineObserver, SynthesisPipeline, Usage
from speakwire.synthesis.aligning import AlignerThread

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


class SpeechMetrics:
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.registry = CollectorRegistry()
        labels = ("engine", "protocol")
        r = self.registry
        self.ttfa = Histogram(
            "speakwire_time_to_first_audio_seconds",
            "Time from first text to first audio.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rtf = Histogram(
            "speakwire_real_time_factor",
            "Synthesis wall time / audio duration per segment.",
            labels,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0),
            registry=r,
        )
        self.queue_wait = Histogram(
            "speakwire_queue_wait_seconds",
            "Time a segment waited for an engine worker.",
            ("engine",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.active = Gauge("speakwire_active_streams", "Utterances in progress.", labels, registry=r)
        self.segments = Counter("speakwire_segments_total", "Segments synthesized.", labels, registry=r)
        self.audio_seconds = Counter("speakwire_audio_seconds_total", "Audio produced.", labels, registry=r)
        self.characters = Counter(
            "speakwire_input_characters_total", "Text characters synthesized.", labels, registry=r
        )
        self.cancellations = Counter(
            "speakwire_cancellations_total", "Utterances cancelled or abandoned.", labels, registry=r
        )
        self.rejections = Counter(
            "speakwire_rejections_total", "Streams refused by admission control.", labels, registry=r
        )
        self.stalled_closes = Counter(
            "speakwire_stalled_closes_total",
            "Streams closed because the client took no audio for the write-stall timeout.",
            labels,
            registry=r,
        )
        self.underruns = Counter(
            "speakwire_underruns_total", "Audio that arrived after its playback deadline.", labels, registry=r
        )
        self.requests = Counter("speakwire_requests_total", "Speech requests by outcome.",
                                (*labels, "status"), registry=r)  # fmt: skip
        self.underruns_heard = 0
        """Underruns over every protocol, for the live capacity estimate (``ServerState.refresh_capacity``
        reads them on the loop, where the observers write them; the audio made it reads from the scheduler,
        counted per engine chunk)."""

        # what leaks would show first: the process's descriptors and memory (prometheus_client's process_*),
        # the event loop's tasks and the threads, each back to its idle count once the streams are done
        ProcessCollector(registry=r)
        r.register(_RuntimeCollector())

    def watch_engine(self, engine: object) -> None:
        """Export a batched engine's own counters (``engine_metrics()``: slots, steps, batch, code2wav)."""
        if isinstance(engine, MonitoredEngine):
            self.registry.register(_EngineCollector(self.engine, engine.engine_metrics))

    def watch_capacity(self, capacity: LiveCapacity, pipeline: SynthesisPipeline) -> None:
        """Gauges read at scrape time: the admission limit, the capacity estimate and its source, the load."""
        r, labels = self.registry, ("engine",)

        def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
            Gauge(name, doc, labels, registry=r).labels(engine=self.engine).set_function(read)

        gauge("speakwire_capacity_streams", "Concurrent streams admitted before new ones are refused.",
              lambda: float(pipeline.max_streams))  # fmt: skip
        if capacity.real_time_streams is not None or capacity.follows_measurement:
            doc = ("Audio seconds per wall second with every worker busy: measured at warm-up, then re-estimated "
                   "from the work the server runs (speakwire_capacity_source says which).")  # fmt: skip
            gauge("speakwire_capacity_real_time_streams", doc, lambda: capacity.real_time_streams or 0.0)
        if capacity.start.audio_s_per_s is not None:
            warm_up = capacity.start.audio_s_per_s
            gauge("speakwire_capacity_warm_up_real_time_streams", "The warm-up's measurement (the starting point).",
                  lambda: warm_up)  # fmt: skip
        gauge("speakwire_capacity_correction", "Share of the measured limit admitted: below 1 after listeners were "
              "hurt (underruns, late starts), back up while they are not.", lambda: capacity.correction)  # fmt: skip
        gauge("speakwire_capacity_samples", "Samples of real work in the live capacity estimate.",
              lambda: float(capacity.samples))  # fmt: skip
        r.register(_CapacitySourceCollector(self.engine, capacity))
        gauge("speakwire_load_ratio", "Streams in progress / streams admitted (1 = new ones are refused).",
              lambda: pipeline.active / max(pipeline.max_streams, 1))  # fmt: skip
        gauge("speakwire_queued_segments", "Segments waiting for an engine worker.",
              lambda: float(pipeline.scheduler.queued))  # fmt: skip
        gauge("speakwire_busy_workers", "Engine workers synthesizing now.", lambda: float(pipeline.scheduler.busy))
        if pipeline.aligner is not None:
            r.register(_AlignerCollector(self.engine, pipeline.aligner))

    def observer(self, protocol: str) -> PipelineObserver:
        labels = {"engine": self.engine, "protocol": protocol}

        underruns = self.underruns.labels(**labels)

        def on_segment(wall_s: float, audio_s: float) -> None:
            self.segments.labels(**labels).inc()
            self.audio_seconds.labels(**labels).inc(audio_s)
            if audio_s > 0:
                self.rtf.labels(**labels).observe(wall_s / audio_s)

        def on_underrun() -> None:
            self.underruns_heard += 1
            underruns.inc()

        def on_finish(usage: Usage) -> None:
            self.characters.labels(**labels).inc(usage.characters)

        return PipelineObserver(
            on_first_audio=self.ttfa.labels(**labels).observe,
            on_segment=on_segment,
            on_underrun=on_underrun,
            on_cancel=self.cancellations.labels(**labels).inc,
            on_finish=on_finish,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    """Reads the engine's counters at scrape time: ``speakwire_engine_<name>``; ``*_total`` are counters."""

    def __init__(self, engine: str, read: Callable[[], Mapping[str, float]]) -> None:
        self._engine = engine
        self._read = read

    def collect(self) -> Iterator[Metric]:
        for name, value in self._read().items():
            family: GaugeMetricFamily | CounterMetricFamily
            if name.endswith("_total"):
                family = CounterMetricFamily(f"speakwire_engine_{name.removesuffix('_total')}", name, labels=["engine"])
            else:
                family = GaugeMetricFamily(f"speakwire_engine_{name}", name, labels=["engine"])
            family.add_metric([self._engine], float(value))
            yield family


class _CapacitySourceCollector(Collector):
    """``speakwire_capacity_source{source=...} 1``: where the admission limit comes from now (``measured-live``,
    ``warm-up``, ``operator``, ``engine`` or ``default``), and whether admission is ``live`` or ``fixed``."""

    def __init__(self, engine: str, capacity: LiveCapacity) -> None:
        self._engine = engine
        self._capacity = capacity

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("speakwire_capacity_source", "Where the admission limit comes from now (1).",
                                   labels=["engine", "source", "admission"])  # fmt: skip
        family.add_metric([self._engine, self._capacity.source, self._capacity.admission], 1.0)
        yield family


class _AlignerCollector(Collector):
    """``speakwire_aligner_timeouts_total``: sentences that went without words because they waited their bound
    (``synthesis.aligning``; the log says why only once)."""

    def __init__(self, engine: str, aligner: AlignerThread) -> None:
        self._engine = engine
        self._aligner = aligner

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("speakwire_aligner_timeouts", "Sentences without word timings: the aligner took "
                                     "longer than their bound.", labels=["engine", "aligner"])  # fmt: skip
        family.add_metric([self._engine, self._aligner.aligner.name], float(self._aligner.timed_out))
        yield family


class _RuntimeCollector(Collector):
    """``speakwire_event_loop_tasks`` (the asyncio tasks of the loop serving the scrape; left out when rendered off
    the loop) and ``speakwire_threads`` (Python threads): each session holds a task or two and no thread, so a count
    that keeps rising with the streams done is a leak (the default executor's threads, started by the first
    whole-file encodes, stay by design; native threads are not counted)."""

    def collect(self) -> Iterator[Metric]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # no running loop: rendered from another thread
            pass
        else:
            yield GaugeMetricFamily("speakwire_event_loop_tasks", "asyncio tasks on the event loop.", value=tasks)
        yield GaugeMetricFamily("speakwire_threads", "Python threads in the process.", value=threading.active_count())
