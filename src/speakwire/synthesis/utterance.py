"""The utterance a protocol drives: text in (whole or piece by piece), events out, cancellable at any point.

Every protocol (HTTP, WebSocket, SageMaker) feeds text, says when input is done, and iterates events. The
utterance owns what is common to every engine: input limits and hygiene, the event queue, playback
bookkeeping and usage, cancel, and flow control; its driver (``driver``) owns how the engine is driven.

Flow control: an utterance makes at most ``SynthesisPipeline.max_lead_s`` of audio ahead of what its reader
has taken. Every protocol writes each event to its transport before it asks ``events()`` for the next, and a
full transport makes that write wait, so the samples of the ``AudioReady`` events the reader has come back
from are what the socket or HTTP body accepted. At the lead the driver's work waits (``park`` hands the loop
what continues it, ``wait_for_reader`` holds a worker that cannot give its work away), and it continues,
where it stopped, once the reader is down to half the lead. A reader that takes nothing at all is let go by
the transport (``server.flow``).

Word timings from an aligner (``aligning``, for engines without their own or when ``--aligner`` names one):
the events pass through ``SentenceWords`` on their way to the reader, which passes them on at once. A sentence's
words come later, as a ``SegmentWords`` after its ``SegmentFinished`` (possibly after later sentences' audio):
neither the engine nor the delivery of any audio waits for the aligner. ``UtteranceFinished`` waits for the last
sentence's words (at most the aligner's bound). Aligned words go through the leading-silence trim like an
engine's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes, s16le_of_suffix
from speakwire.audio.leading_silence import LeadingSilenceTrimmer, audible_from
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.errors import PayloadTooLargeError
from speakwire.synthesis.aligning import AlignerThread, SentenceWords
from speakwire.synthesis.driver import DriverFactory, PipelineState
from speakwire.synthesis.events import (
    AudioReady,
    SegmentFinished,
    SegmentWords,
    Usage,
    UtteranceEvent,
    UtteranceFinished,
)
from speakwire.synthesis.numbering import UtteranceSegmenter
from speakwire.synthesis.observer import PipelineObserver
from speakwire.synthesis.progress import Progress
from speakwire.text.alignment import WordTiming
from speakwire.text.hygiene import clean_text
from speakwire.text.segmenter import ChunkSchedule, Granularity

MIN_FIRST_AUDIO_S = 0.15
"""The least audio an utterance's first chunk carries. Once its leading silence is cut, a first decoder window
may hold only a few tens of milliseconds (Piper, "Our train left the station ...": 48 to 108 ms), and a listener
whose jitter buffer is 100 ms then hears a stall unless the next chunk comes within that much more: on a loaded
server it often does not (the open-loop benchmark's stalls 20-60 ms into a stream). Such a piece waits for the
next chunk, one decoder window (tens of ms) of first audio, instead. Most first chunks are 200-260 ms."""


class UtterancePipeline(PipelineState, Protocol):
    """What an utterance needs of its pipeline (``SynthesisPipeline``), named so that neither imports the other."""

    max_lead_s: float | None
    trim_leading_silence: bool
    engine_words: bool
    """Deliver the words the engine times itself (False: ``--aligner`` named a choice that replaces them)."""
    aligner: AlignerThread | None
    """Aligns each sentence's audio for word timings (``synthesis.aligning``); None: the engine's own, if any."""
    driver: DriverFactory
    """The driver for the pipeline's engine, chosen once when the pipeline is built."""

    def _release(self) -> None: ...


class Utterance:
    """One utterance: text in (all at once or piece by piece), events out, cancellable at any point."""

    def __init__(
        self,
        pipeline: UtterancePipeline,
        request: SynthesisRequest,
        *,
        output_rate: int,
        granularity: Granularity,
        schedule: ChunkSchedule | None,
        max_buffer_chars: int,
        observer: PipelineObserver,
    ) -> None:
        self._pipeline = pipeline
        self.request = request
        self.run = SynthesisRun()
        """This utterance's run state: its cancel event, the latency-critical flag, the engine's results."""
        self.output_rate = output_rate
        self._segmenter = UtteranceSegmenter(granularity, schedule)
        self._max_buffer_chars = max_buffer_chars
        self._observer = observer
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[UtteranceEvent] = asyncio.Queue()
        self._input_done = False
        self._done = False
        self._released = False
        self._progress = Progress()
        self.usage = Usage()
        self._text_parts: list[str] = []
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
        self._first_held: AudioReady | None = None
        """The utterance's first audio while it is shorter than ``MIN_FIRST_AUDIO_S``: sent with what follows
        (or alone, before its sentence's end)."""
        self._min_first_samples = round(MIN_FIRST_AUDIO_S * output_rate)
        self._trimmer = LeadingSilenceTrimmer(output_rate, enabled=pipeline.trim_leading_silence)
        """Cuts the silence the utterance starts with (``audio.leading_silence``); later word times move back
        by what it cut, so they still count from the first sample the listener gets."""
        self._drained = threading.Event()
        """Set unless a worker waits for the reader (work that cannot change threads)."""
        self._drained.set()
        self.request_id: str | None = None
        """Set by whoever admitted the utterance (the server's request id): drivers name it when they log, from
        threads that do not carry the request's context."""
        self.wants_s16le = False
        """Set by the output (``AudioOut.parts``) when it sends 16-bit PCM as is: the drivers' threads then cast
        each chunk (``AudioReady.s16le``) and the event loop does not. Unset, nobody casts what nobody sends
        (MP3, float PCM, a volume to apply); a chunk made before it was set is cast by the output."""
        self.wants_words = True
        """Cleared by an output whose reader takes no word timings (an HTTP audio body: ``AudioOut.all_parts``
        with ``words=False``). The trim then leaves the events' words as the engine timed them, or drops them,
        instead of rebuilding them with moved times for every chunk: they are not to be read."""
        self._words: SentenceWords | None = None
        """Word timings from the pipeline's aligner; the events pass through it first (``synthesis.aligning``)."""
        aligner = pipeline.aligner
        if aligner is not None and aligner.aligns(request.language):
            self._words = SentenceWords(
                aligner, rate=output_rate, utterance_text=lambda: self.text, sentence_text=self._segmenter.text,
                emit=self._emit,
            )  # fmt: skip
        self._driver = pipeline.driver(self, pipeline)

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
        self._driver.feed(text)

    def finish(self) -> None:
        """No more text: the rest of the buffer becomes the last segment(s)."""
        if self._done or self._input_done:
            return
        self._input_done = True
        if self._progress.started_at is None:
            self._progress.started_at = time.monotonic()
        self._driver.finish()

    def cancel(self) -> None:
        """Stop now: the running segment stops between engine chunks, nothing else is synthesized."""
        if self._done:
            return
        self.run.cancelled.set()
        self._driver.cancel()
        if self._words is not None:
            self._words.close()  # words not delivered by now were not heard
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
    def aligned_words(self) -> bool:
        """Its words come from an aligner: each sentence's in a ``SegmentWords`` after its ``SegmentFinished``."""
        return self._words is not None

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
        return self._driver.idle

    # ----- output side ----------------------------------------------------------------

    async def events(self) -> AsyncGenerator[UtteranceEvent, None]:
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

    def _deliver(self, event: UtteranceEvent) -> None:
        """Runs on the event loop: forward a worker event, and keep the driver's work moving."""
        if self._done:
            return
        if isinstance(event, AudioReady) and event.words and not self._pipeline.engine_words:
            # An aligner named explicitly replaces the engine's words.
            event = AudioReady(event.index, event.samples, s16le=event.s16le, audible_from=event.audible_from)
        if self._words is None:
            self._emit(event)
        else:
            self._words.intake(event)  # passed on at once; the sentence's words follow when aligned
        if isinstance(event, SegmentFinished):
            self._driver.segment_finished()  # the engine goes on even while the words are being aligned

    def _emit(self, event: UtteranceEvent) -> None:
        """Runs on the event loop: an event to the reader, with the playback bookkeeping."""
        if self._done:
            return
        if self._first_held is not None and not (isinstance(event, AudioReady) and len(event.samples)):
            held, self._first_held = self._first_held, None
            self._send_audio(held)  # its sentence ended (or words follow): it goes out alone, before them
        if isinstance(event, SegmentWords):
            # An aligner's: times move with the trim.
            event = SegmentWords(event.index, self._shift(event.words) if self.wants_words else ())
        elif isinstance(event, AudioReady) and not len(event.samples):
            trimmed = self._trim(event)  # words only: times shift, no audio to account for
            if trimmed is None:
                return
            event = trimmed
        elif isinstance(event, AudioReady):
            trimmed = self._trim(event)
            if trimmed is None:
                return
            if self._first_held is not None:
                trimmed = _joined(self._first_held, trimmed)
                self._first_held = None
            if self._progress.first_audio_at is None and len(trimmed.samples) < self._min_first_samples:
                self._first_held = trimmed  # too short to carry the listener to the next chunk: sent with it
                return
            self._send_audio(trimmed)
            return
        self._events.put_nowait(event)
        if isinstance(event, SegmentFinished):
            self.usage.segments += 1

    def _send_audio(self, event: AudioReady) -> None:
        """Runs on the event loop: audio to the reader, on the playback clock (first audio, underruns, usage)."""
        progress = self._progress
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

    def _trim(self, event: AudioReady) -> AudioReady | None:
        """``event`` without the utterance's leading silence (None: nothing of it is left to send)."""
        trimmer = self._trimmer
        if trimmer.done and (not trimmer.trimmed or not event.words or not self.wants_words):
            return event  # the common case once speech has started: nothing to cut, nothing to move
        before = trimmer.trimmed
        whole = event.samples
        samples = trimmer.trim(whole, event.audible_from) if len(whole) else whole
        if trimmer.trimmed != before:
            self._taken += trimmer.trimmed - before  # never sent, so never read: the lead lets go of them
            if self._parked is not None and self._made - self._taken <= self._lead // 2:
                self._resume()
        words = self._shift(event.words) if self.wants_words else ()
        if not len(samples) and not words:
            return None
        return AudioReady(event.index, samples, words, s16le_of_suffix(event.s16le, whole, samples))

    def _shift(self, words: tuple[WordTiming, ...]) -> tuple[WordTiming, ...]:
        """``words`` timed from the first sample sent: back by the leading silence cut so far."""
        shift = self._trimmer.trimmed / self.output_rate
        if not shift or not words:
            return words
        # Built directly: ``dataclasses.replace`` costs ~10 calls a word, and every word of an utterance that
        # began with silence passes here on the event loop.
        return tuple(
            WordTiming(
                w.text, w.char_start, w.char_end,
                w.start_s - shift if w.start_s > shift else 0.0, w.end_s - shift if w.end_s > shift else 0.0,
            )
            for w in words
        )  # fmt: skip

    def _end(self, *, cancelled: bool) -> None:
        self._done = True
        if not cancelled and self._observer.on_finish:
            self._observer.on_finish(self.usage)
        self._events.put_nowait(UtteranceFinished(self.usage, cancelled=cancelled))

    def _resume(self) -> None:
        resume, self._parked = self._parked, None
        if resume is not None and not self._done:
            resume()

    # ----- the driver's side (``driver.UtteranceHost``) -----------------------------------

    @property
    def progress(self) -> Progress:
        """Playback bookkeeping: when the listener runs out of audio, hence the latest start of the next work."""
        return self._progress

    @property
    def segmenter(self) -> UtteranceSegmenter:
        return self._segmenter

    def post(self, event: UtteranceEvent) -> None:
        self._loop.call_soon_threadsafe(self._deliver, event)

    def post_audio(self, event: AudioReady) -> None:
        samples = len(event.samples)
        if samples and not self._trimmer.done and event.audible_from is None:
            # Looked for here, on the worker: the event loop only cuts. (Read unlocked: should the loop finish
            # trimming meanwhile, this scan is merely unused.)
            event = replace(event, audible_from=audible_from(event.samples))
        self._made += samples
        lead = self._made - self._taken
        if lead > self.peak_lead_samples:
            self.peak_lead_samples = lead
        if samples > self.largest_chunk_samples:
            self.largest_chunk_samples = samples
        self._loop.call_soon_threadsafe(self._deliver, event)
        self._progress.note_produced(samples / self.output_rate)

    def report_segment(self, wall_s: float, audio_s: float) -> None:
        if self._observer.on_segment is not None:
            self._loop.call_soon_threadsafe(self._observer.on_segment, wall_s, audio_s)

    def s16le_of(self, samples: Float32Array) -> bytes | None:
        return float_to_int16_bytes(samples) if self.wants_s16le and len(samples) else None

    def call_soon(self, callback: Callable[[], object]) -> None:
        self._loop.call_soon_threadsafe(callback)

    def at_lead(self) -> bool:
        return bool(self._lead) and self._made - self._taken >= self._lead

    def park(self, resume: Callable[[], None]) -> None:
        if self._done:
            return
        if self._made - self._taken > self._lead // 2:
            self._parked = resume
        else:
            resume()  # the reader caught up while the worker's note was on its way

    def wait_for_reader(self) -> None:
        self._drained.clear()
        self._loop.call_soon_threadsafe(self.park, self._drained.set)
        while not self._drained.wait(1.0):
            if self.run.cancelled.is_set():
                return

    def work_done(self) -> None:
        if self._input_done and not self._done:
            if self._words is not None:
                self._words.when_drained(self._finish_done)  # the last sentence's words come first
            else:
                self._end(cancelled=False)

    def _finish_done(self) -> None:
        if not self._done:
            self._end(cancelled=False)


def _joined(first: AudioReady, then: AudioReady) -> AudioReady:
    """Two consecutive pieces of one sentence's audio as one (word times count from the utterance's start)."""
    samples = np.concatenate([first.samples, then.samples])
    s16le = first.s16le + then.s16le if first.s16le is not None and then.s16le is not None else None
    return AudioReady(then.index, samples, first.words + then.words, s16le)
