"""Sentence segments through the scheduler (Piper): one generation per segment, one segment at a time.

Segments are synthesized on the scheduler's workers one at a time per utterance, in order; the next
segment is submitted the moment the previous one finishes, so it is synthesized while the protocol is
still sending the previous audio. A resumable engine's segment can give its worker away between chunks,
to more urgent work (``pacing.should_yield``) or to a reader that is a lead behind, and continue on
another worker where it stopped.

Word timings: an engine that can align puts ``WordMark`` s on its chunks (words of the normalized segment
text, in the segment's samples); ``text.alignment.SegmentWords`` maps them back to the segment's original
words and onto the utterance's clock, and each ``AudioReady`` carries the words whose first sample it holds.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from speakwire.audio.chunk import AudioChunk
from speakwire.audio.resample import StreamResampler
from speakwire.errors import SpeakwireError
from speakwire.pacing import next_chunk_s, refill_key, should_yield
from speakwire.scheduler import URGENT_WITHIN_S, Job
from speakwire.synthesis.driver import PipelineState, UtteranceHost
from speakwire.synthesis.events import AudioReady, SegmentFinished, SegmentStarted
from speakwire.text.alignment import SegmentWords, WordTiming
from speakwire.text.normalize import normalize_english
from speakwire.text.segmenter import Segment

logger = logging.getLogger(__name__)

LATENCY_CRITICAL_BUFFER_S = 1.0
"""Below this much buffered audio the next segment is urgent: engines may trade compute for earlier samples."""
STREAM_MARGIN_S = 0.3
"""A later segment is made latency-critical (frame-streamed on Piper) when its first whole sentence, after the
work queued before it, would arrive less than this before the listener's buffered audio runs out."""
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


class SegmentDriver:
    """Drives an engine that makes one generation per segment (``Engine.synthesize``)."""

    def __init__(self, host: UtteranceHost, pipeline: PipelineState) -> None:
        self._host = host
        self._pipeline = pipeline
        self._engine = pipeline.engine
        self._pending: deque[Segment] = deque()
        self._job: Job | None = None
        self._prepared = False
        self._audio_out = 0
        """Samples at the output rate of the segments finished so far (the next segment's start time)."""

    # ----- on the loop ------------------------------------------------------------------

    def feed(self, text: str) -> None:
        self._pending.extend(self._host.segmenter.feed(text))
        self._submit_next()

    def finish(self) -> None:
        self._pending.extend(self._host.segmenter.flush())
        self._submit_next()
        self._maybe_finish()

    def segment_finished(self) -> None:
        self._job = None
        self._submit_next()
        self._maybe_finish()

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
        self._job = None
        self._pending.clear()

    @property
    def idle(self) -> bool:
        return self._job is None and not self._pending

    def _maybe_finish(self) -> None:
        if self.idle:
            self._host.work_done()

    def _submit_next(self) -> None:
        host = self._host
        if host.done or self._job is not None or not self._pending:
            return
        if host.at_lead():
            host.park(self._submit_next)  # the reader is a lead behind: the next segment waits for it
            return
        segment = self._pending.popleft()
        now = time.monotonic()
        progress = host.progress
        progress.segment_submitted_at = now
        # Urgent: the first segment, or a refill running low while the engine has spare capacity. Under
        # saturation every stream runs low, and spending extra compute on each would deepen the overload.
        first = progress.playback_end is None
        buffered_s = 0.0 if first else progress.playback_end - now  # type: ignore[operator]
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
            due = progress.playback_end
            arrives_s = scheduler.work_due_before(refill_key(due, whole_first_s)) + whole_first_s  # type: ignore[arg-type]
            critical = buffered_s < arrives_s + STREAM_MARGIN_S
        host.run.latency_critical = critical
        key = progress.latest_start(self._pipeline.costs, None if critical or first else whole_first_s)
        self._job = scheduler.submit(lambda: self._run_segment(segment), deadline=key)

    def _continue_segment(self, segment: Segment, run: _SegmentRun) -> None:
        """Put a segment that stopped at the lead back in the queue, where it left off.

        Submitted now, as ``_submit_next`` does: the reader held this work back, not the queue. With the
        submit time from before the park, a slow reader's listener had run dry "while the segment was queued"
        (an underrun) and its next chunk was due seconds ago (a late start), and the live capacity lowered
        every stream's limit for one slow client (issue 31).
        """
        progress = self._host.progress
        progress.segment_submitted_at = time.monotonic()
        own_key = progress.latest_start(self._pipeline.costs, next_chunk_s(run.last_chunk_s))
        self._job = self._pipeline.scheduler.submit(functools.partial(self._run_segment, segment, run),
                                                    deadline=own_key)  # fmt: skip

    # ----- on a worker ------------------------------------------------------------------

    def _run_segment(self, segment: Segment, run: _SegmentRun | None = None) -> None:
        """Runs on a scheduler worker thread: start a segment, or continue one that yielded its worker."""
        host = self._host
        cancelled = host.run.cancelled
        if cancelled.is_set():
            return
        error: SpeakwireError | None = None
        try:
            if run is None:
                run = self._start_segment(segment)
                run.timed = not host.run.latency_critical
            mark = time.monotonic()
            scheduler = self._pipeline.scheduler
            for chunk in run.chunks:
                scheduler.count_audio(len(chunk.samples) / chunk.sample_rate)  # made, heard or not (cancels)
                if cancelled.is_set():
                    return
                now = time.monotonic()
                if not run.last_chunk_s and host.run.latency_critical:  # the frontend and a first window
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
                    words = run.take_words(host.output_rate)
                    host.post_audio(AudioReady(segment.index, out, words, host.s16le_of(out)))
                    if host.at_lead() and self._engine.info.resumable:
                        # The reader is a lead behind: give the worker away; the loop puts this segment back
                        # in the queue, where it stopped, once the reader has taken half of it.
                        resume = functools.partial(self._continue_segment, segment, run)
                        host.call_soon(functools.partial(host.park, resume))
                        return
                own_key = self._yield_key(run)
                if own_key is not None:
                    # Others must start sooner: continue this segment by the latest start of its next chunk.
                    job = self._pipeline.scheduler.submit(
                        functools.partial(self._run_segment, segment, run), deadline=own_key
                    )
                    self._job = job
                    if cancelled.is_set():
                        job.cancel()  # cancel() ran between the check above and the submit
                    return
                mark = time.monotonic()
            tail = run.resampler.flush()
            if run.words is not None:
                run.pending.extend(run.words.finish())
            words, run.pending = tuple(run.pending), []
            if (len(tail) or words) and not cancelled.is_set():
                run.audio_samples += len(tail)
                tail = np.asarray(tail, dtype=np.float32)
                host.post_audio(AudioReady(segment.index, tail, words, host.s16le_of(tail)))
        except SpeakwireError as exc:
            error = exc
        except Exception as exc:
            logger.exception("segment %d failed", segment.index, extra={"request_id": host.request_id or "-"})
            error = SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}")
        if host.run.result.capped:
            host.usage.capped = True
        audio_samples = run.audio_samples if run is not None else 0
        self._audio_out += audio_samples
        if run is not None:
            host.report_segment(time.monotonic() - run.started, audio_samples / host.output_rate)
        host.post(SegmentFinished(segment.index, audio_samples / host.output_rate, error))

    def _start_segment(self, segment: Segment) -> _SegmentRun:
        host = self._host
        host.post(SegmentStarted(segment.index, segment.text))
        run = _SegmentRun(
            started=time.monotonic(), resampler=StreamResampler(self._engine.info.sample_rate, host.output_rate)
        )
        if not self._prepared:
            host.request = self._engine.prepare(host.request)
            self._prepared = True
        text = segment.spoken
        if self._engine.info.needs_text_normalization:
            text = normalize_english(text)
        run.start_s = self._audio_out / host.output_rate
        run.spoken, run.engine_text = segment.spoken, text
        run.offset = host.segmenter.offset(segment.index) + len(segment.text) - len(segment.text.lstrip())
        if any(ch.isalnum() for ch in text):
            run.chunks = iter(self._engine.synthesize(text, host.request, host.run))
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

    def _yield_key(self, run: _SegmentRun) -> float | None:
        """Between engine chunks: this segment's next latest start if waiting work must start before it, else None."""
        progress = self._host.progress
        if not self._engine.info.resumable or progress.produced_end is None:
            return None
        own_key = progress.latest_start(self._pipeline.costs, next_chunk_s(run.last_chunk_s))
        scheduler, now = self._pipeline.scheduler, time.monotonic()
        if scheduler.on_reserve() and own_key > now + URGENT_WITHIN_S:
            return own_key  # bulk now: the reserve is for urgent work, a worker continues this segment
        return own_key if should_yield(own_key, scheduler.earliest_deadline(), now) else None
