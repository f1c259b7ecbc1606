"""The pipeline every protocol shares: admission (how many utterances may run) and the engine's driver.

It chooses how its engine is driven once, from the engine's kind, and every utterance it hands out is
driven that way: engines that take text while they generate (``EngineInfo.streams_text``, Qwen3) get one
generation per utterance (``StreamDriver``), the others one per sentence segment (``SegmentDriver``).
"""

from __future__ import annotations

import time

from speakwire.engines.base import Engine, SynthesisRequest
from speakwire.errors import TooBusyError
from speakwire.pacing import WorkCosts
from speakwire.scheduler import Scheduler
from speakwire.synthesis.aligning import AlignerThread
from speakwire.synthesis.driver import DriverFactory
from speakwire.synthesis.observer import PipelineObserver
from speakwire.synthesis.segment_driver import SegmentDriver
from speakwire.synthesis.stream_driver import StreamDriver
from speakwire.synthesis.utterance import Utterance
from speakwire.text.segmenter import ChunkSchedule, Granularity

OVERLOAD_LATENESS_S = 0.5
"""New streams are refused while the most urgent waiting work is this late for its latest start (``pacing``)."""
DEFAULT_MAX_LEAD_S = 10.0
"""Audio an utterance makes ahead of what its reader has taken before its work waits for the reader."""


class SynthesisPipeline:
    """Shared by all protocols: owns admission (how many utterances may run) and hands out Utterances."""

    def __init__(
        self,
        engine: Engine,
        scheduler: Scheduler,
        *,
        max_streams: int = 64,
        max_queue: int = 64,
        max_lead_s: float | None = DEFAULT_MAX_LEAD_S,
        trim_leading_silence: bool = True,
        aligner: AlignerThread | None = None,
        engine_words: bool = True,
    ) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.max_streams = max_streams
        self.max_queue = max_queue
        self.max_lead_s = max_lead_s
        """Flow control: audio an utterance may make ahead of what its reader has taken (None or 0: unbounded)."""
        self.trim_leading_silence = trim_leading_silence
        """Cut the silence each utterance starts with, keeping a few ms of onset (``audio.leading_silence``)."""
        self.aligner = aligner
        self.engine_words = engine_words
        """Deliver the words an engine times itself (Piper's); False when ``--aligner`` names a choice (``none``
        included), which then replaces them."""
        """Word timings for engines without their own, or instead of them (``synthesis.aligning``); None: none."""
        self.driver: DriverFactory = StreamDriver if engine.info.streams_text else SegmentDriver
        """How this engine is driven, for every utterance (the one place that asks the engine's kind)."""
        self.active = 0
        self.costs = WorkCosts()
        """What engine work costs on this machine now: orders the queue by latest start (``pacing``)."""
        self.whole_s_per_char: float | None = None
        """Moving average of the seconds a segment that is not latency-critical takes to its first audio, per
        character of its first sentence (contention included): tells when a refill would arrive too late."""

    def utterance(
        self,
        request: SynthesisRequest,
        *,
        output_rate: int,
        granularity: Granularity = "sentence",
        schedule: ChunkSchedule | None = None,
        max_buffer_chars: int = 100_000,
        observer: PipelineObserver | None = None,
    ) -> Utterance:
        """Start an utterance; raises ``TooBusyError`` past ``max_streams`` (call on the event loop)."""
        if self.active >= self.max_streams:
            raise TooBusyError(
                f"Server is at capacity ({self.max_streams} concurrent streams); retry shortly.", retry_after_s=1.0
            )
        earliest = self.scheduler.earliest_deadline()
        if earliest is not None and time.monotonic() - earliest > OVERLOAD_LATENESS_S:
            # Work already waiting is late: the engine is past real-time capacity, and one more stream
            # would make every accepted stream stall.
            raise TooBusyError(
                "Server is at capacity (queued audio is already late for playback); retry shortly.", retry_after_s=1.0
            )
        if self.scheduler.queued >= self.max_queue:
            # Accepting more would break the real-time promise made to the streams already running.
            raise TooBusyError(
                f"Server is at capacity ({self.scheduler.queued} segments waiting for the engine); retry shortly.",
                retry_after_s=1.0,
            )
        self.active += 1
        return Utterance(
            self, request, output_rate=output_rate, granularity=granularity, schedule=schedule,
            max_buffer_chars=max_buffer_chars, observer=observer or PipelineObserver(),
        )  # fmt: skip

    def _release(self) -> None:
        self.active -= 1

    def close(self) -> None:
        """Release what the pipeline owns besides the engine and scheduler: the aligner and its thread (blocking)."""
        if self.aligner is not None:
            self.aligner.close()
