"""The one synthesis pipeline: text (whole or incremental) → segment → normalize → engine → resample.

Every protocol (HTTP, WebSocket, SageMaker) drives an ``Utterance``: it feeds text,
says when input is done, and iterates events. Segments are synthesized on the
scheduler's workers one at a time per utterance, in order; the next segment is
submitted the moment the previous one finishes, so it is synthesized while the
protocol is still sending the previous audio. ``cancel()`` stops the running
segment between engine chunks, drops queued work and ends the event stream at once.

Engines that take text while they generate (``EngineInfo.streams_text``, Qwen3) get one
generation per utterance instead: the text goes to the engine as it arrives, and the
segmenter only labels the continuous audio with sentences (``_run_text_stream``).

Flow control: an utterance makes at most ``SynthesisPipeline.max_lead_s`` of audio ahead of what its reader
has taken. Every protocol writes each event to its transport before it asks ``events()`` for the next, and a
full transport makes that write wait, so the samples of the ``AudioReady`` events the reader has come back
from are what the socket or HTTP body accepted. At the lead a segment gives its worker away between engine
chunks (or the next segment is not submitted; a text stream's worker waits), and the loop puts it back,
where it stopped, once the reader is down to half the lead. A reader that takes nothing at all is let go
by the transport (``server.flow``).

Encoding is the protocol's business (one file per utterance over HTTP, one per
sentence on the WebSocket when not streaming), so events carry float32 PCM at the
requested output rate.

Word timings: an engine that can align puts ``WordMark`` s on its chunks (words of the
normalized segment text, in the segment's samples); ``text.alignment.SegmentWords`` maps
them back to the segment's original words and onto the utterance's clock, and each
``AudioReady`` carries the words whose first sample it holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from speakwire.audio.chunk import AudioChunk, Float32Array
from speakwire.audio.resample import StreamResampler
from speakwire.engines.base import Engine, SynthesisRequest, TextStream, TextStreamingEngine
from speakwire.errors import PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.pacing import WorkCosts, first_segment_key, next_chunk_s, refill_key, should_yield
from speakwire.scheduler import URGENT_WITHIN_S, Job, Scheduler
from speakwire.text.alignment import SegmentWords, WordTiming
from speakwire.text.hygiene import clean_text
from speakwire.text.normalize import normalize_english
from speakwire.text.segmenter import ChunkSchedule, Granularity, Segment, Segmenter
from speakwire.text.widths import is_wide

logger = logging.getLogger(__name__)

LATENCY_CRITICAL_BUFFER_S = 1.0
"""Below this much buffered audio the next segment is urgent: engines may trade compute for earlier samples."""
OVERLOAD_LATENESS_S = 0.5
"""New streams are refused while the most urgent waiting work is this late for its latest start (``pacing``)."""
STREAM_MARGIN_S = 0.3
"""A later segment is made latency-critical (frame-streamed on Piper) when its first whole sentence, after the
work queued before it, would arrive less than this before the listener's buffered audio runs out."""
DEFAULT_MAX_LEAD_S = 10.0
"""Audio an utterance makes ahead of what its reader has taken before its work waits for the reader."""
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"')\]]*\s")


def _first_sentence_chars(text: str) -> int:
    """Characters up to the first sentence end (what a whole-sentence engine makes before its first audio)."""
    match = _SENTENCE_END.search(text)
    return match.end() if match else len(text)


@dataclass(slots=True)
class _SegmentRun:
    """A segment in progress; it can be paused between engine chunks and resumed on another worker."""

    started: float
    resampler: StreamResampler
    chunks: Iterator[AudioChunk] = field(default_factory=lambda: iter(()))
    audio_samples: int = 0
    """Samples at the output rate handed over so far."""
    start_s: float = 0.0
    """Utterance time of the segment's first sample."""
    spoken: str = ""
    engine_text: str = ""
    """The segment's original (``spoken``) text and the text the engine was given (normalized)."""
    last_chunk_s: float = 0.0
    """Worker seconds the last chunk took (what the next one will cost is estimated from it)."""
    timed: bool = False
    """Not latency-critical, first audio still to come: its time feeds ``SynthesisPipeline.whole_s_per_char``."""
    offset: int = 0
    """Where ``spoken`` starts in the utterance's text."""
    words: SegmentWords | None = None
    """Built when the engine's first marks arrive."""
    pending: list[WordTiming] = field(default_factory=list)
    """Timed words whose first sample is not handed over yet."""

    def take_words(self, output_rate: int) -> tuple[WordTiming, ...]:
        """The pending words that start before the end of the audio handed over so far."""
        end_s = self.start_s + self.audio_samples / output_rate
        count = 0
        while count < len(self.pending) and self.pending[count].start_s < end_s:
            count += 1
        taken, self.pending = self.pending[:count], self.pending[count:]
        return tuple(taken)


@dataclass(frozen=True, slots=True)
class SegmentStarted:
    index: int
    text: str
    """The segment's original text (not normalized), so clients can caption it."""


@dataclass(frozen=True, slots=True)
class AudioReady:
    index: int
    samples: Float32Array
    """Mono float32 at the utterance's output rate."""
    words: tuple[WordTiming, ...] = ()
    """Words whose audio starts in these samples, when the engine can align (see ``text.alignment``). On the
    segment's last audio also any word starting at its very end; should an engine time a word only after its
    start was handed over, the word rides on the next audio (and, in the unlikely case that nothing follows,
    on an ``AudioReady`` with no samples)."""


@dataclass(frozen=True, slots=True)
class SegmentFinished:
    index: int
    audio_s: float
    error: SpeakwireError | None = None


@dataclass(slots=True)
class Usage:
    characters: int = 0
    segments: int = 0
    audio_s: float = 0.0
    time_to_first_audio_s: float | None = None
    capped: bool = False

    def to_dict(self) -> dict[str, object]:
        ttfa = self.time_to_first_audio_s
        return {
            "characters": self.characters,
            "segments": self.segments,
            "audio_seconds": round(self.audio_s, 3),
            "time_to_first_audio_ms": None if ttfa is None else round(ttfa * 1000, 1),
            "capped": self.capped,
        }


@dataclass(frozen=True, slots=True)
class UtteranceFinished:
    usage: Usage
    cancelled: bool = False


UtteranceEvent = SegmentStarted | AudioReady | SegmentFinished | UtteranceFinished


@dataclass(slots=True)
class PipelineObserver:
    """Hooks for metrics; each is optional and called on the event loop."""

    on_first_audio: Callable[[float], None] | None = None
    on_segment: Callable[[float, float], None] | None = None
    """(synthesis wall seconds, audio seconds)."""
    on_underrun: Callable[[], None] | None = None
    on_cancel: Callable[[], None] | None = None
    on_finish: Callable[[Usage], None] | None = None


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
    ) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.max_streams = max_streams
        self.max_queue = max_queue
        self.max_lead_s = max_lead_s
        """Flow control: audio an utterance may make ahead of what its reader has taken (None or 0: unbounded)."""
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


@dataclass(slots=True)
class _Progress:
    """Playback bookkeeping, used to order this utterance's work against others'."""

    created_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    """When the first text arrived."""
    first_audio_at: float | None = None
    playback_end: float | None = None
    """When the client will have played all audio sent so far (real-time playback from the first chunk)."""
    segment_submitted_at: float = 0.0
    produced_end: float | None = None
    """The worker's own view of ``playback_end``, updated the moment it hands audio over (the loop's view
    lags by a callback), so it can decide to yield its worker without waiting for the loop."""


class Utterance:
    """One utterance: text in (all at once or piece by piece), events out, cancellable at any point."""

    def __init__(
        self,
        pipeline: SynthesisPipeline,
        request: SynthesisRequest,
        *,
        output_rate: int,
        granularity: Granularity,
        schedule: ChunkSchedule | None,
        max_buffer_chars: int,
        observer: PipelineObserver,
    ) -> None:
        self._pipeline = pipeline
        self._engine = pipeline.engine
        self.request = request
        self.output_rate = output_rate
        self._segmenter = Segmenter(granularity, schedule)
        self._max_buffer_chars = max_buffer_chars
        self._observer = observer
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[UtteranceEvent] = asyncio.Queue()
        self._pending: deque[Segment] = deque()
        self._segments_seen = 0
        self._job: Job | None = None
        self._input_done = False
        self._done = False
        self._released = False
        self._prepared = False
        self._progress = _Progress()
        self.usage = Usage()
        self._streams_text = self._engine.info.streams_text
        self._segments: list[Segment] = []
        """Stream mode: the segments decided so far, used to label the continuous audio."""
        self._stream_lock = threading.Lock()
        self._text_stream: TextStream | None = None
        self._unsent: list[str] = []
        """Stream mode: text that arrived before the engine's text stream was open."""
        self._received = ""
        """Stream mode: all text fed (sentence labels need the part no segment holds yet)."""
        self._text_parts: list[str] = []
        self._offsets: dict[int, int] = {}
        """Segment index → where its text starts in the text the segmenter was fed."""
        self._segmented_chars = 0
        self._audio_out = 0
        """Samples at the output rate of the segments finished so far (the next segment's start time)."""
        lead_s = pipeline.max_lead_s
        self._lead = int(lead_s * output_rate) if lead_s else 0
        """Flow control (0: off): samples made but not yet taken by the reader at which this utterance's work
        waits for the reader. It resumes at half of it, so a reader that drains slowly is not served one
        chunk per worker turn."""
        self._made = 0
        """Samples the workers have handed to the event queue (written on worker threads)."""
        self._taken = 0
        """Samples of the ``AudioReady`` events the reader has come back from (written on the loop)."""
        self.peak_lead_samples = 0
        """The most samples made and not yet taken at any moment: at most the lead plus one engine chunk."""
        self.largest_chunk_samples = 0
        """The longest ``AudioReady`` so far (how far past the lead one engine chunk can carry it)."""
        self._parked: Callable[[], None] | None = None
        """What continues this utterance's work once the reader has taken enough (run on the loop)."""
        self._drained = threading.Event()
        """Stream mode: set unless the worker waits for the reader (a text stream cannot change threads)."""
        self._drained.set()

    # ----- input side -----------------------------------------------------------------

    def feed(self, text: str) -> None:
        """Add text; complete segments are queued for synthesis at once."""
        if self._done or self._input_done:
            raise RuntimeError("utterance input is closed")
        text = clean_text(text)  # no engine sees a NUL, a lone surrogate or an invisible control
        if not text:
            return
        if self.usage.characters + len(text) > self._max_buffer_chars:
            raise PayloadTooLargeError(
                f"Utterance text exceeds {self._max_buffer_chars} characters; send input.done and start another.",
                param="text",
            )
        if self._progress.started_at is None:
            self._progress.started_at = time.monotonic()
        self.usage.characters += len(text)
        self._text_parts.append(text)
        if self._streams_text:
            self._feed_stream(text)
            return
        self._queue_segments(self._segmenter.feed(text))
        self._submit_next()

    def finish(self) -> None:
        """No more text: the rest of the buffer becomes the last segment(s)."""
        if self._done or self._input_done:
            return
        self._input_done = True
        if self._progress.started_at is None:
            self._progress.started_at = time.monotonic()
        if self._streams_text:
            self._segments.extend(self._numbered(self._segmenter.flush()))
            with self._stream_lock:
                if self._text_stream is not None:
                    self._text_stream.finish()
            if self._job is None:
                self._end(cancelled=False)  # nothing speakable arrived, or the engine already ended
            return
        self._queue_segments(self._segmenter.flush())
        self._submit_next()
        self._maybe_finish()

    def _queue_segments(self, segments: list[Segment]) -> None:
        self._pending.extend(self._numbered(segments))

    def _numbered(self, segments: list[Segment]) -> list[Segment]:
        # Number segments per utterance (the segmenter restarts its count after a flush).
        numbered = [Segment(segment.text, self._segments_seen + i) for i, segment in enumerate(segments)]
        self._segments_seen += len(numbered)
        for segment in numbered:  # segments tile the text fed, so each starts where the last one ended
            self._offsets[segment.index] = self._segmented_chars
            self._segmented_chars += len(segment.text)
        return numbered

    def cancel(self) -> None:
        """Stop now: the running segment stops between engine chunks, nothing else is synthesized."""
        if self._done:
            return
        self.request.cancelled.set()
        if self._job is not None:
            self._job.cancel()
        self._pending.clear()
        self._parked = None
        self._drained.set()
        if self._observer.on_cancel:
            self._observer.on_cancel()
        self._end(cancelled=True)

    def close(self) -> None:
        """Release the stream slot; cancels if still running. Idempotent."""
        if not self._done:
            self.cancel()
        if not self._released:
            self._released = True
            self._pipeline._release()

    @property
    def text(self) -> str:
        """The text fed so far, after hygiene: what ``WordTiming`` offsets index."""
        if len(self._text_parts) > 1:
            self._text_parts = ["".join(self._text_parts)]
        return self._text_parts[0] if self._text_parts else ""

    @property
    def released(self) -> bool:
        """True once ``close`` has given the stream slot back."""
        return self._released

    @property
    def done(self) -> bool:
        return self._done

    @property
    def lead_samples(self) -> int:
        """Samples made but not yet taken by the reader (in the event queue, or with a reader that is writing)."""
        return self._made - self._taken

    @property
    def made_samples(self) -> int:
        return self._made

    @property
    def taken_samples(self) -> int:
        return self._taken

    @property
    def waiting_for_reader(self) -> bool:
        """True while flow control holds this utterance's work until the reader takes more audio."""
        return self._parked is not None or not self._drained.is_set()

    @property
    def idle(self) -> bool:
        """True when all text fed so far has been synthesized and sent (only input may still come)."""
        return self._job is None and not self._pending

    # ----- output side ----------------------------------------------------------------

    async def events(self) -> AsyncIterator[UtteranceEvent]:
        """Events in order; ends after ``UtteranceFinished`` (also after a cancel)."""
        while True:
            event = await self._events.get()
            yield event
            # The reader is back for more, so its transport accepted what it wrote of this event: a socket
            # or HTTP body that takes nothing keeps its writer waiting here, and this count still.
            if isinstance(event, AudioReady):
                self._taken += len(event.samples)
                if self._parked is not None and self._made - self._taken <= self._lead // 2:
                    self._resume()
            elif isinstance(event, UtteranceFinished):
                return

    # ----- scheduling -------------------------------------------------------------------

    def _key(self, next_chunk_cost_s: float | None = None) -> float:
        """Latest start (``pacing``) of this utterance's next work: the scheduler's ordering key."""
        progress = self._progress
        costs = self._pipeline.costs
        end = progress.produced_end if progress.produced_end is not None else progress.playback_end
        complete = progress.segment_submitted_at or progress.started_at or progress.created_at
        if end is None or end < complete:
            # No audio yet, or the listener already heard it all while the client paused its text: this is
            # first audio again, not a refill already seconds late (which would overtake every real refill).
            return first_segment_key(complete, costs)
        return refill_key(end, costs.first_chunk_s if next_chunk_cost_s is None else next_chunk_cost_s)

    def _submit_next(self) -> None:
        if self._done or self._job is not None or not self._pending:
            return
        if self._lead and self._made - self._taken >= self._lead:
            self._parked = self._submit_next  # the reader is a lead behind: the next segment waits for it
            return
        segment = self._pending.popleft()
        now = time.monotonic()
        self._progress.segment_submitted_at = now
        # Urgent: the first segment, or a refill running low while the engine has spare capacity. Under
        # saturation every stream runs low, and spending extra compute on each would deepen the overload.
        first = self._progress.playback_end is None
        buffered_s = 0.0 if first else self._progress.playback_end - now  # type: ignore[operator]
        scheduler = self._pipeline.scheduler
        critical = first or (buffered_s < LATENCY_CRITICAL_BUFFER_S and scheduler.queued == 0)
        per_char = self._pipeline.whole_s_per_char
        whole_first_s = None if per_char is None else per_char * _first_sentence_chars(segment.spoken)
        if not critical and whole_first_s is not None:
            # ...unless its first whole sentence would come too late: then the listener would hear a gap, and
            # the extra compute of frame streaming is the cheaper price. (Past admission, in an overload, it
            # costs throughput: 16 and 32 streams at once on 2 cores made 21x real time with this applied only
            # to an empty queue and 16x as it is, but in the open loop at 90% of capacity that variant had
            # 0.11 stalls per stream against 0.01, one run each.)
            due = self._progress.playback_end
            arrives_s = scheduler.work_due_before(refill_key(due, whole_first_s)) + whole_first_s  # type: ignore[arg-type]
            critical = buffered_s < arrives_s + STREAM_MARGIN_S
        self.request.latency_critical = critical
        key = self._key(None if critical or first else whole_first_s)
        self._job = scheduler.submit(lambda: self._run_segment(segment), deadline=key)

    # ----- flow control (on the loop) ----------------------------------------------------

    def _park(self, resume: Callable[[], None]) -> None:
        """A worker stopped at the lead: continue with ``resume`` once the reader is down to half of it."""
        if self._done:
            return
        if self._made - self._taken > self._lead // 2:
            self._parked = resume
        else:
            resume()  # the reader caught up while the worker's note was on its way

    def _resume(self) -> None:
        resume, self._parked = self._parked, None
        if resume is not None and not self._done:
            resume()

    def _continue_segment(self, segment: Segment, run: _SegmentRun) -> None:
        """Put a segment that stopped at the lead back in the queue, where it left off."""
        own_key = self._key(next_chunk_s(run.last_chunk_s))
        self._job = self._pipeline.scheduler.submit(functools.partial(self._run_segment, segment, run),
                                                    deadline=own_key)  # fmt: skip

    def _maybe_finish(self) -> None:
        if self._input_done and self._job is None and not self._pending and not self._done:
            self._end(cancelled=False)

    def _end(self, *, cancelled: bool) -> None:
        self._done = True
        self._job = None
        if not cancelled and self._observer.on_finish:
            self._observer.on_finish(self.usage)
        self._events.put_nowait(UtteranceFinished(self.usage, cancelled=cancelled))

    # ----- worker thread ----------------------------------------------------------------

    def _post(self, event: UtteranceEvent) -> None:
        self._loop.call_soon_threadsafe(self._deliver, event)

    def _post_audio(self, event: AudioReady) -> None:
        samples = len(event.samples)
        self._made += samples
        lead = self._made - self._taken
        if lead > self.peak_lead_samples:
            self.peak_lead_samples = lead
        if samples > self.largest_chunk_samples:
            self.largest_chunk_samples = samples
        self._loop.call_soon_threadsafe(self._deliver, event)

    def _at_lead(self) -> bool:
        return bool(self._lead) and self._made - self._taken >= self._lead

    def _run_segment(self, segment: Segment, run: _SegmentRun | None = None) -> None:
        """Runs on a scheduler worker thread: start a segment, or continue one that yielded its worker."""
        request = self.request
        if request.cancelled.is_set():
            return
        error: SpeakwireError | None = None
        try:
            if run is None:
                run = self._start_segment(segment)
                run.timed = not request.latency_critical
            mark = time.monotonic()
            for chunk in run.chunks:
                if request.cancelled.is_set():
                    return
                now = time.monotonic()
                if not run.last_chunk_s and request.latency_critical:  # the frontend and a first window
                    self._pipeline.costs.observe_first_chunk(now - run.started)
                run.last_chunk_s = now - mark
                if run.timed:
                    run.timed = False
                    self._time_whole_sentence(run)
                if chunk.marks:
                    run.pending.extend(self._segment_words(run, chunk.sample_rate).add(chunk.marks))
                out = run.resampler.process(chunk.samples)
                if len(out):
                    run.audio_samples += len(out)
                    self._post_audio(AudioReady(segment.index, out, run.take_words(self.output_rate)))
                    self._note_produced(len(out) / self.output_rate)
                    if self._at_lead() and self._engine.info.resumable:
                        # The reader is a lead behind: give the worker away; the loop puts this segment back
                        # in the queue, where it stopped, once the reader has taken half of it.
                        self._loop.call_soon_threadsafe(
                            self._park, functools.partial(self._continue_segment, segment, run)
                        )
                        return
                own_key = self._yield_key(run)
                if own_key is not None:
                    # Others must start sooner: continue this segment by the latest start of its next chunk.
                    job = self._pipeline.scheduler.submit(
                        functools.partial(self._run_segment, segment, run), deadline=own_key
                    )
                    self._job = job
                    if request.cancelled.is_set():
                        job.cancel()  # cancel() ran between the check above and the submit
                    return
                mark = time.monotonic()
            tail = run.resampler.flush()
            if run.words is not None:
                run.pending.extend(run.words.finish())
            words, run.pending = tuple(run.pending), []
            if (len(tail) or words) and not request.cancelled.is_set():
                run.audio_samples += len(tail)
                self._post_audio(AudioReady(segment.index, np.asarray(tail, dtype=np.float32), words))
                self._note_produced(len(tail) / self.output_rate)
        except SpeakwireError as exc:
            error = exc
        except Exception as exc:
            logger.exception("segment %d failed", segment.index)
            error = SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}")
        request = self.request
        if request.extra.get("capped"):
            self.usage.capped = True
        audio_samples = run.audio_samples if run is not None else 0
        self._audio_out += audio_samples
        if self._observer.on_segment is not None and run is not None:
            wall = time.monotonic() - run.started
            self._loop.call_soon_threadsafe(self._observer.on_segment, wall, audio_samples / self.output_rate)
        self._post(SegmentFinished(segment.index, audio_samples / self.output_rate, error))

    def _start_segment(self, segment: Segment) -> _SegmentRun:
        self._post(SegmentStarted(segment.index, segment.text))
        run = _SegmentRun(
            started=time.monotonic(), resampler=StreamResampler(self._engine.info.sample_rate, self.output_rate)
        )
        if not self._prepared:
            self.request = self._engine.prepare(self.request)
            self._prepared = True
        text = segment.spoken
        if self._engine.info.needs_text_normalization:
            text = normalize_english(text)
        run.start_s = self._audio_out / self.output_rate
        run.spoken, run.engine_text = segment.spoken, text
        run.offset = self._offsets.get(segment.index, 0) + len(segment.text) - len(segment.text.lstrip())
        if any(ch.isalnum() for ch in text):
            run.chunks = iter(self._engine.synthesize(text, self.request))
        return run

    @staticmethod
    def _segment_words(run: _SegmentRun, engine_rate: int) -> SegmentWords:
        if run.words is None:
            run.words = SegmentWords(
                run.spoken, run.engine_text, offset=run.offset, rate=engine_rate, start_s=run.start_s
            )
        return run.words

    def _time_whole_sentence(self, run: _SegmentRun) -> None:
        """Fold this segment's time to first audio per first-sentence character into the pipeline's average."""
        chars = _first_sentence_chars(run.engine_text or run.spoken)
        if chars <= 0:
            return
        sample = (time.monotonic() - run.started) / chars
        average = self._pipeline.whole_s_per_char
        self._pipeline.whole_s_per_char = sample if average is None else 0.8 * average + 0.2 * sample

    def _note_produced(self, duration_s: float) -> None:
        now = time.monotonic()
        end = self._progress.produced_end
        self._progress.produced_end = (now if end is None else max(now, end)) + duration_s

    def _yield_key(self, run: _SegmentRun) -> float | None:
        """Between engine chunks: this segment's next latest start if waiting work must start before it, else None."""
        if not self._engine.info.resumable or self._progress.produced_end is None:
            return None
        own_key = self._key(next_chunk_s(run.last_chunk_s))
        scheduler, now = self._pipeline.scheduler, time.monotonic()
        if scheduler.on_reserve() and own_key > now + URGENT_WITHIN_S:
            return own_key  # bulk now: the reserve is for urgent work, a worker continues this segment
        return own_key if should_yield(own_key, scheduler.earliest_deadline(), now) else None

    def _deliver(self, event: UtteranceEvent) -> None:
        """Runs on the event loop: forward a worker event, and keep the segment chain moving."""
        if self._done:
            return
        progress = self._progress
        if isinstance(event, AudioReady):
            now = time.monotonic()
            duration = len(event.samples) / self.output_rate
            if progress.first_audio_at is None:
                progress.first_audio_at = now
                self.usage.time_to_first_audio_s = now - (progress.started_at or progress.created_at)
                if self._observer.on_first_audio:
                    self._observer.on_first_audio(self.usage.time_to_first_audio_s)
            elif (
                progress.playback_end is not None
                and now > progress.playback_end
                and progress.segment_submitted_at < progress.playback_end
                and self._observer.on_underrun
            ):
                # Playback ran dry. It is our fault (an underrun) only if the segment was already
                # queued when the buffered audio ran out; otherwise the client was slow to send text.
                self._observer.on_underrun()
            start = now if progress.playback_end is None else max(now, progress.playback_end)
            progress.playback_end = start + duration
            self.usage.audio_s += duration
        self._events.put_nowait(event)
        if isinstance(event, SegmentFinished):
            self.usage.segments += 1
            if not self._streams_text:
                self._job = None
                self._submit_next()
                self._maybe_finish()

    # ----- one generation per utterance (engines that stream text) -------------------------

    def _feed_stream(self, text: str) -> None:
        """Stream mode: text to the engine now; the segmenter only decides sentence labels."""
        if not self._received:
            text = text.lstrip()  # the engine's text track starts at the first word too
            if not text:
                return
        self._received += text
        self._segments.extend(self._numbered(self._segmenter.feed(text)))
        self._progress.segment_submitted_at = time.monotonic()
        with self._stream_lock:
            if self._text_stream is not None:
                self._text_stream.feed(text)
            else:
                self._unsent.append(text)
        if self._job is None and not self._done and any(ch.isalnum() for ch in "".join(self._unsent)):
            self._job = self._pipeline.scheduler.submit(self._run_text_stream, deadline=self._key())

    def _run_text_stream(self) -> None:
        """Runs on a worker for the whole utterance: open the engine's text stream and label its audio."""
        request = self.request
        labels = _SentenceLabels(self._segments, lambda: self._received, self.output_rate)
        resampler = StreamResampler(self._engine.info.sample_rate, self.output_rate)
        started = time.monotonic()
        error: SpeakwireError | None = None
        try:
            if request.cancelled.is_set():
                return
            self.request = request = self._engine.prepare(request)
            assert isinstance(self._engine, TextStreamingEngine)
            stream = self._engine.open_text_stream(request)
            with self._stream_lock:
                stream.feed("".join(self._unsent))
                self._unsent.clear()
                if self._input_done:
                    stream.finish()
                self._text_stream = stream
            for chunk, text_read in stream.chunks():
                if request.cancelled.is_set():
                    return
                out = resampler.process(chunk.samples)
                if len(out):
                    self._post_labelled(labels, labels.spoken_chars(text_read), out)
            tail = resampler.flush()
            if len(tail) and not request.cancelled.is_set():
                self._post_labelled(labels, labels.spoken_chars(len(stream.text)), np.asarray(tail, np.float32))
        except SpeakwireError as exc:
            error = exc
        except Exception as exc:
            logger.exception("utterance stream failed")
            error = SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}")
        finally:
            if not request.cancelled.is_set():
                if request.extra.get("capped"):
                    self.usage.capped = True
                for event in labels.finish(error):
                    self._post(event)
                if self._observer.on_segment is not None:
                    wall, audio_s = time.monotonic() - started, labels.audio_s
                    self._loop.call_soon_threadsafe(self._observer.on_segment, wall, audio_s)
            self._loop.call_soon_threadsafe(self._stream_ended)

    def _post_labelled(self, labels: _SentenceLabels, spoken: int, samples: Float32Array) -> None:
        for event in labels.audio(spoken, samples):
            if isinstance(event, AudioReady):
                self._post_audio(event)
            else:
                self._post(event)
        self._note_produced(len(samples) / self.output_rate)
        if self._at_lead():
            # The reader is a lead behind. A text stream cannot move to another worker, so this one stops
            # taking the engine's chunks until the reader has taken half of it (an engine that batches rows
            # lets this row's turn go while nobody takes its chunks).
            self._drained.clear()
            self._loop.call_soon_threadsafe(self._park, self._drained.set)
            while not self._drained.wait(1.0):
                if self.request.cancelled.is_set():
                    return

    def _stream_ended(self) -> None:
        if self._done:
            return
        self._job = None
        if self._input_done:
            self._end(cancelled=False)


class _SentenceLabels:
    """Places the segmenter's sentences on one continuous stream of audio (stream mode).

    The talker reads text ahead of the speech it makes, so a chunk's sentence is chosen by an estimate
    of the characters already *spoken*: those read, but no more than a brisk reader (``CHAR_S`` per
    character, ``WIDE_CHAR_S`` per CJK character) gets through in the audio so far. A sentence starts
    with the first chunk past its first character; a sentence still arriving starts with the text known
    so far. Sentences the estimate never reached are announced with no audio at the end, so every
    sentence gets its start and its done.
    """

    CHAR_S = 0.07
    WIDE_CHAR_S = 0.25

    def __init__(self, segments: list[Segment], received: Callable[[], str], rate: int) -> None:
        self._segments = segments  # shared with the event loop, which appends as sentences are decided
        self._received = received
        self._rate = rate
        self._current = -1
        self._samples = 0
        self._segment_samples = 0

    @property
    def audio_s(self) -> float:
        return self._samples / self._rate

    def spoken_chars(self, text_read: int) -> int:
        budget = self.audio_s
        spoken = 0
        for char in self._received()[:text_read]:
            budget -= self.WIDE_CHAR_S if is_wide(char) else self.CHAR_S
            if budget < 0:
                break
            spoken += 1
        return spoken

    def audio(self, spoken: int, samples: Float32Array) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        target = max(self._segment_at(spoken), 0)
        while self._current < target:
            events.extend(self._advance())
        self._samples += len(samples)
        self._segment_samples += len(samples)
        events.append(AudioReady(self._current, samples))
        return events

    def finish(self, error: SpeakwireError | None) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        if error is not None and self._current < 0:
            events.extend(self._advance())  # failed before any audio: the error still needs a segment to land on
        while self._current < len(self._segments) - 1:
            events.extend(self._advance())
        if self._current >= 0:
            events.append(SegmentFinished(self._current, self._segment_samples / self._rate, error))
        return events

    def _segment_at(self, spoken: int) -> int:
        """The sentence holding character ``spoken`` (the one still arriving, past the decided ones)."""
        offset = 0
        segments = list(self._segments)
        for segment in segments:
            offset += len(segment.text)
            if spoken < offset:
                return segment.index
        return len(segments) if len(self._received()) > offset else max(len(segments) - 1, 0)

    def _advance(self) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        if self._current >= 0:
            events.append(SegmentFinished(self._current, self._segment_samples / self._rate))
        self._current += 1
        self._segment_samples = 0
        segments = list(self._segments)
        if self._current < len(segments):
            text = segments[self._current].text
        else:
            text = self._received()[sum(len(segment.text) for segment in segments) :]
        events.append(SegmentStarted(self._current, text))
        return events
