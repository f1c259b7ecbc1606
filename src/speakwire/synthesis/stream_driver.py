"""Text streamed into one running generation (Qwen3): one worker and one generation for the whole utterance.

The text goes to the engine as it arrives (``TextStreamingEngine.open_text_stream``); the segmenter only
labels the continuous audio with sentences (``sentence_labels``). The generation cannot move to another
thread, so at the lead its worker waits for the reader (an engine that batches rows lets this row's turn
go while nobody takes its chunks).
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from speakwire.audio.chunk import Float32Array
from speakwire.audio.resample import StreamResampler
from speakwire.engines.base import TextStream, TextStreamingEngine
from speakwire.errors import SpeakwireError
from speakwire.scheduler import Job
from speakwire.synthesis.driver import PipelineState, UtteranceHost
from speakwire.synthesis.events import AudioReady
from speakwire.synthesis.sentence_labels import SentenceLabels
from speakwire.text.segmenter import Segment

logger = logging.getLogger(__name__)


class StreamDriver:
    """Drives an engine that takes an utterance's text while generating it (``EngineInfo.streams_text``)."""

    def __init__(self, host: UtteranceHost, pipeline: PipelineState) -> None:
        self._host = host
        self._pipeline = pipeline
        self._engine = pipeline.engine
        self._job: Job | None = None
        self._segments: list[Segment] = []
        """The segments decided so far, used to label the continuous audio."""
        self._lock = threading.Lock()
        """Guards the hand-over of text between the loop and the worker that opens the engine's stream."""
        self._stream: TextStream | None = None
        self._unsent: list[str] = []
        """Text that arrived before the engine's text stream was open."""
        self._input_done = False
        self._received = ""
        """All text fed (sentence labels need the part no segment holds yet)."""

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
        with self._lock:
            if self._stream is not None:
                self._stream.feed(text)
            else:
                self._unsent.append(text)
        if self._job is None and not host.done and any(ch.isalnum() for ch in "".join(self._unsent)):
            key = host.progress.latest_start(self._pipeline.costs)
            self._job = self._pipeline.scheduler.submit(self._run, deadline=key)

    def finish(self) -> None:
        self._segments.extend(self._host.segmenter.flush())
        with self._lock:
            self._input_done = True
            if self._stream is not None:
                self._stream.finish()
        if self._job is None:
            self._host.work_done()  # nothing speakable arrived, or the engine already ended

    def segment_finished(self) -> None:
        pass  # the one generation labels every sentence itself

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
        self._job = None

    @property
    def idle(self) -> bool:
        return self._job is None

    def _ended(self) -> None:
        if self._host.done:
            return
        self._job = None
        self._host.work_done()

    # ----- on a worker ------------------------------------------------------------------

    def _run(self) -> None:
        """Runs on a worker for the whole utterance: open the engine's text stream and label its audio."""
        host = self._host
        request = host.request
        labels = SentenceLabels(self._segments, lambda: self._received, host.output_rate)
        resampler = StreamResampler(self._engine.info.sample_rate, host.output_rate)
        started = time.monotonic()
        error: SpeakwireError | None = None
        try:
            if request.cancelled.is_set():
                return
            host.request = request = self._engine.prepare(request)
            assert isinstance(self._engine, TextStreamingEngine)
            stream = self._engine.open_text_stream(request)
            with self._lock:
                stream.feed("".join(self._unsent))
                self._unsent.clear()
                if self._input_done:
                    stream.finish()
                self._stream = stream
            for chunk, text_read in stream.chunks():
                if request.cancelled.is_set():
                    return
                out = resampler.process(chunk.samples)
                if len(out):
                    self._post(labels, labels.spoken_chars(text_read), out)
            tail = resampler.flush()
            if len(tail) and not request.cancelled.is_set():
                self._post(labels, labels.spoken_chars(len(stream.text)), np.asarray(tail, np.float32))
        except SpeakwireError as exc:
            error = exc
        except Exception as exc:
            logger.exception("utterance stream failed")
            error = SpeakwireError(f"synthesis failed: {type(exc).__name__}: {exc}")
        finally:
            if not request.cancelled.is_set():
                if request.extra.get("capped"):
                    host.usage.capped = True
                for event in labels.finish(error):
                    host.post(event)
                host.report_segment(time.monotonic() - started, labels.audio_s)
            host.call_soon(self._ended)

    def _post(self, labels: SentenceLabels, spoken: int, samples: Float32Array) -> None:
        host = self._host
        for event in labels.audio(spoken, samples):
            if isinstance(event, AudioReady):
                host.post_audio(event)
            else:
                host.post(event)
        if host.at_lead():
            # The reader is a lead behind. A text stream cannot move to another worker, so this one stops
            # taking the engine's chunks until the reader has taken half of it.
            host.wait_for_reader()
