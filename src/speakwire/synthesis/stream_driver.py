"""Text streamed into one running generation (Qwen3): the engine pushes the utterance's audio to the event loop.

The text goes to the engine as it arrives, through the stream the engine opened for the utterance
(``AudioStreamingEngine.open_audio_stream``: ``feed``/``finish`` on the event loop, under the stream's lock);
the segmenter only labels the continuous audio with sentences (``sentence_labels``). The engine's own
threads (Qwen3: its generation loop and code2wav, shared by every utterance) hand each chunk to this driver
(``audio``, ``ended``), which resamples it there and wakes the event loop with it (``call_soon``): no thread
of the utterance's own, no polling. On the loop the chunk is labelled and posted to the utterance; at the
utterance's lead the driver ``hold``s the stream (its rows sit out) and ``release``s it once the reader has
taken half of it: the utterance's lead is the one flow limit.

A scheduler worker is used only for ``engine.prepare`` (a clone prompt's encoders), a short job. An engine
whose stream is read as a blocking iterator (``TextStreamingEngine.open_text_stream``) is pumped by a worker
for the whole utterance instead (``_PulledStream``), chunk by chunk as the reader takes them.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Protocol, runtime_checkable

import numpy as np

from speakwire.audio.chunk import Float32Array
from speakwire.audio.resample import StreamResampler
from speakwire.engines.base import Engine, SynthesisRequest, SynthesisRun, TextStream, TextStreamingEngine
from speakwire.errors import SpeakwireError
from speakwire.scheduler import Job
from speakwire.synthesis.driver import PipelineState, UtteranceHost
from speakwire.synthesis.events import AudioReady
from speakwire.synthesis.sentence_labels import SentenceLabels
from speakwire.text.segmenter import Segment

logger = logging.getLogger(__name__)


class AudioListener(Protocol):
    """Where an engine's stream hands an utterance's audio (this driver); called on the engine's threads."""

    def audio(self, samples: Float32Array, text_read: int) -> None:
        """Samples at the engine's rate, in order; ``text_read``: characters of the text the model had read."""
        ...

    def ended(self, error: SpeakwireError | None) -> None:
        """No more audio (also after ``cancel``); ``error``: why the engine failed, if it did."""
        ...


class AudioStream(Protocol):
    """One utterance in an engine, text in and audio pushed out (``AudioStreamingEngine.open_audio_stream``)."""

    def feed(self, text: str) -> None: ...

    def finish(self) -> None: ...

    def cancel(self) -> None: ...

    def hold(self) -> None:
        """The reader is a whole lead behind: make no more audio until ``release``."""
        ...

    def release(self) -> None:
        """The listener took what it was handed and wants more (after a hold, or after each chunk; a stream
        that is not held may ignore it)."""
        ...


@runtime_checkable
class AudioStreamingEngine(Engine, Protocol):
    """An engine that takes an utterance's text while generating it and pushes the audio from its own threads."""

    def open_audio_stream(self, request: SynthesisRequest, run: SynthesisRun, listener: AudioListener) -> AudioStream:
        """Start an utterance for a validated, prepared ``request``; feed it text, then ``finish``."""
        ...


class StreamDriver:
    """Drives an engine that takes an utterance's text while generating it (``EngineInfo.streams_text``)."""

    def __init__(self, host: UtteranceHost, pipeline: PipelineState) -> None:
        self._host = host
        self._pipeline = pipeline
        self._engine = pipeline.engine
        self._job: Job | None = None
        """The scheduler job that prepares the request (or pumps a pulled stream)."""
        self._stream: AudioStream | None = None
        self._started = False
        self._running = False
        """The engine has (or is about to have) this utterance: from the first speakable text to its end."""
        self._held = False
        self._segments: list[Segment] = []
        """The segments decided so far, used to label the continuous audio."""
        self._unsent: list[str] = []
        """Text that arrived before the engine's stream was open."""
        self._input_done = False
        self._received = ""
        """All text fed (sentence labels need the part no segment holds yet)."""
        self._labels = SentenceLabels(self._segments, lambda: self._received, host.output_rate)
        self._resampler = StreamResampler(self._engine.info.sample_rate, host.output_rate)
        """Used on the engine's thread that hands the audio over (one at a time, in order)."""
        self._started_at = 0.0

    # ----- on the loop ------------------------------------------------------------------

    def feed(self, text: str) -> None:
        """Text to the engine now; the segmenter only decides sentence labels."""
        host = self._host
        if not self._received:
            text = text.lstrip()  # the engine's text track starts at the first word too
            if not text:
                return
        self._received += text
        self._segments.extend(host.segmenter.feed(text))
        host.progress.segment_submitted_at = time.monotonic()
        if self._stream is not None:
            self._stream.feed(text)
        else:
            self._unsent.append(text)
        if not self._started and not host.done and any(ch.isalnum() for ch in "".join(self._unsent)):
            self._started = self._running = True
            key = host.progress.latest_start(self._pipeline.costs)
            self._job = self._pipeline.scheduler.submit(self._prepare, deadline=key)

    def finish(self) -> None:
        self._segments.extend(self._host.segmenter.flush())
        self._input_done = True
        if self._stream is not None:
            self._stream.finish()
        if not self._running:
            self._host.work_done()  # nothing speakable arrived, or the engine already ended

    def segment_finished(self) -> None:
        pass  # the one generation labels every sentence itself

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
        self._job = None
        if self._stream is not None:
            self._stream.cancel()
        self._running = False

    @property
    def idle(self) -> bool:
        return not self._running

    def _open(self, request: SynthesisRequest) -> None:
        """The request is prepared: open the engine's stream and give it the text so far."""
        self._job = None
        if self._host.done:
            return
        engine = self._engine
        stream: AudioStream
        if isinstance(engine, AudioStreamingEngine):
            stream = engine.open_audio_stream(request, self._host.run, self)
        else:
            assert isinstance(engine, TextStreamingEngine)
            pulled = _PulledStream(engine.open_text_stream(request, self._host.run), self, self._host.request_id)
            self._job = self._pipeline.scheduler.submit(pulled.pump)
            stream = pulled
        stream.feed("".join(self._unsent))
        self._unsent.clear()
        if self._input_done:
            stream.finish()
        self._stream = stream

    def _on_audio(self, samples: Float32Array, s16le: bytes | None, text_read: int) -> None:
        host = self._host
        if host.done or host.run.cancelled.is_set():
            return
        if len(samples):
            self._post(self._labels.spoken_chars(text_read), samples, s16le)
        stream = self._stream
        if stream is None:
            return
        if host.at_lead():
            # The reader is a whole lead behind: the engine makes nothing for this utterance until the reader
            # has taken half of it (or the transport lets a reader that takes nothing go: ``server.flow``).
            self._held = True
            stream.hold()
            host.park(self._release)
        elif not self._held:
            stream.release()

    def _release(self) -> None:
        self._held = False
        if self._stream is not None:
            self._stream.release()

    def _on_end(self, tail: Float32Array, s16le: bytes | None, error: SpeakwireError | None) -> None:
        host = self._host
        if not host.done and not host.run.cancelled.is_set():
            if len(tail):
                self._post(self._labels.spoken_chars(len(self._received)), tail, s16le)
            if host.run.result.capped:
                host.usage.capped = True
            for event in self._labels.finish(error):
                host.post(event)
            host.report_segment(time.monotonic() - self._started_at, self._labels.audio_s)
        host.call_soon(self._ended)  # after the events just posted

    def _ended(self) -> None:
        self._job = None
        if self._host.done:
            return
        self._running = False
        self._host.work_done()

    def _post(self, spoken: int, samples: Float32Array, s16le: bytes | None) -> None:
        host = self._host
        for event in self._labels.audio(spoken, samples, s16le):
            if isinstance(event, AudioReady):
                host.post_audio(event)
            else:
                host.post(event)

    # ----- on a worker or the engine's threads --------------------------------------------

    def _prepare(self) -> None:
        """A worker prepares the request (a clone prompt's encoders), then the loop opens the stream."""
        host = self._host
        request = host.request
        self._started_at = time.monotonic()
        if host.run.cancelled.is_set():
            return
        try:
            host.request = request = self._engine.prepare(request)
        except SpeakwireError as exc:
            self.ended(exc)
            return
        except Exception as exc:
            logger.exception("utterance stream failed", extra={"request_id": host.request_id or "-"})
            self.ended(SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}"))
            return
        host.call_soon(partial(self._open, request))

    def audio(self, samples: Float32Array, text_read: int) -> None:
        """``AudioListener``: resampled and cast to s16le here, on the engine's thread; labelled and posted on
        the loop (even empty: the stream waits for its release)."""
        out = self._resampler.process(samples)
        self._host.call_soon(partial(self._on_audio, out, self._host.s16le_of(out), text_read))

    def ended(self, error: SpeakwireError | None) -> None:
        tail = np.asarray(self._resampler.flush(), np.float32)
        self._host.call_soon(partial(self._on_end, tail, self._host.s16le_of(tail), error))


class _PulledStream:
    """A stream read as a blocking iterator (``TextStream.chunks``), pumped by a scheduler worker chunk by chunk:
    each chunk waits until the listener took the one before and is not at its lead (``release``)."""

    def __init__(self, stream: TextStream, listener: AudioListener, request_id: str | None = None) -> None:
        self._stream = stream
        self._request_id = request_id or "-"
        self._listener = listener
        self._go = threading.Event()
        self._cancelled = False

    def feed(self, text: str) -> None:
        self._stream.feed(text)

    def finish(self) -> None:
        self._stream.finish()

    def cancel(self) -> None:
        self._cancelled = True
        self._stream.cancel()
        self._go.set()

    def hold(self) -> None:
        pass  # the pump already waits for ``release`` after every chunk

    def release(self) -> None:
        self._go.set()

    def pump(self) -> None:
        error: SpeakwireError | None = None
        try:
            for chunk, text_read in self._stream.chunks():
                if self._cancelled:
                    return
                self._go.clear()
                self._listener.audio(chunk.samples, text_read)
                self._go.wait()
        except SpeakwireError as exc:
            error = exc
        except Exception as exc:
            logger.exception("utterance stream failed", extra={"request_id": self._request_id})
            error = SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}")
        finally:
            self._listener.ended(error)
