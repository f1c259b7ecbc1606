"""The one seam between an utterance and an engine: a driver, chosen once per pipeline by the engine's kind.

An ``Utterance`` is what a protocol sees (feed, finish, cancel, events) and owns delivery and flow control;
a driver turns its text into engine work on the scheduler's workers. Piper makes one generation per
sentence segment (``segment_driver``); Qwen3 takes text into one running generation (``stream_driver``).
A third kind of engine is a third driver, not a third set of branches in the utterance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from speakwire.audio.chunk import Float32Array
from speakwire.engines.base import Engine, SynthesisRequest, SynthesisRun
from speakwire.pacing import WorkCosts
from speakwire.scheduler import Scheduler
from speakwire.synthesis.events import AudioReady, Usage, UtteranceEvent
from speakwire.synthesis.numbering import UtteranceSegmenter
from speakwire.synthesis.progress import Progress


class PipelineState(Protocol):
    """What a driver shares with every utterance of its pipeline (``SynthesisPipeline``)."""

    engine: Engine
    scheduler: Scheduler
    costs: WorkCosts
    whole_s_per_char: float | None
    """Seconds a segment that is not latency-critical takes to its first audio, per character of its first
    sentence (a moving average, read and written by segment drivers)."""


class UtteranceHost(Protocol):
    """What a driver may use of its utterance (``Utterance``); the utterance is the only implementation."""

    request: SynthesisRequest
    """The utterance's options; a driver replaces it with ``engine.prepare``'s result before first use."""
    request_id: str | None
    """Who the utterance is for (the server's request id), for the driver's log lines; None outside a server."""

    @property
    def run(self) -> SynthesisRun:
        """The utterance's run state: the engine is given it; its ``result`` goes into ``usage``."""
        ...

    @property
    def output_rate(self) -> int: ...

    @property
    def usage(self) -> Usage: ...

    @property
    def progress(self) -> Progress: ...

    @property
    def segmenter(self) -> UtteranceSegmenter: ...

    @property
    def done(self) -> bool:
        """Ended (finished or cancelled): a driver starts nothing more."""
        ...

    def post(self, event: UtteranceEvent) -> None:
        """Hand a ``SegmentStarted`` or ``SegmentFinished`` to the reader (any thread)."""
        ...

    def post_audio(self, event: AudioReady) -> None:
        """Hand audio to the reader: it counts toward the lead and the playback clock (worker thread)."""
        ...

    def report_segment(self, wall_s: float, audio_s: float) -> None:
        """Tell the observer a segment took ``wall_s`` to make ``audio_s`` (worker thread)."""
        ...

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the event loop (from a worker thread)."""
        ...

    def s16le_of(self, samples: Float32Array) -> bytes | None:
        """``samples`` cast for ``AudioReady.s16le`` when the output sends 16-bit PCM as is, else None (worker
        thread: the cast is made where the samples were, not on the event loop)."""
        ...

    def at_lead(self) -> bool:
        """True when the reader is a whole lead behind: the driver's work must wait for it (any thread)."""
        ...

    def park(self, resume: Callable[[], None]) -> None:
        """Work stopped at the lead: ``resume`` runs on the loop once the reader is down to half of it (loop)."""
        ...

    def wait_for_reader(self) -> None:
        """Block this worker until the reader is down to half the lead, or the utterance is cancelled (worker)."""
        ...

    def work_done(self) -> None:
        """The driver has nothing running or queued: the utterance ends if its input is done too (loop)."""
        ...


class Driver(Protocol):
    """One way of driving an engine for one utterance.

    A driver must:
      * make the text ``feed`` gives it into engine work on ``PipelineState.scheduler``, keyed by the latest
        start of ``UtteranceHost.progress``, and label it with the segments of ``UtteranceHost.segmenter``;
      * post, per segment and in order, ``SegmentStarted``, its ``AudioReady`` (through ``post_audio``: only
        that counts toward the lead) and ``SegmentFinished`` (with the error, if the engine failed);
      * wait for the reader whenever ``at_lead()``: give its worker away and ``park`` the rest, or, when its
        work cannot move between threads, ``wait_for_reader`` on the worker;
      * check ``run.cancelled`` between engine chunks and post nothing once it is set;
      * call ``work_done`` on the loop whenever it has nothing running or queued.
    Everything but the worker side runs on the event loop.
    """

    def feed(self, text: str) -> None:
        """Text the utterance accepted (after hygiene, counted in its usage)."""
        ...

    def finish(self) -> None:
        """No more text will come."""
        ...

    def segment_finished(self) -> None:
        """A ``SegmentFinished`` this driver posted has reached the utterance's events."""
        ...

    def cancel(self) -> None:
        """The request is cancelled: drop queued work and cancel the running job."""
        ...

    @property
    def idle(self) -> bool:
        """Nothing running or queued."""
        ...


DriverFactory = Callable[[UtteranceHost, PipelineState], Driver]
"""A driver class: built once per utterance, from the utterance and its pipeline."""
