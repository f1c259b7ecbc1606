"""Word timings from an aligner (``speakwire.aligners``): each sentence's audio aligned once it is final.

For an engine with no word timings of its own (Qwen3), or for every engine when ``--aligner`` names one
(the utterance then drops the engine's own words: ``SynthesisPipeline.engine_words``), the utterance hands
each event its driver delivers to a ``SentenceWords`` first. It keeps the sentence's samples as they pass;
when the sentence's ``SegmentFinished`` is due it sends the samples and the sentence's text to the pipeline's
``AlignerThread`` (one thread, off the event loop and off every engine thread) and delivers the words as an
``AudioReady`` with no samples just before that ``SegmentFinished``.

Order, and why: every consumer of an utterance (``output.AudioOut``, hence every dialect) reads its
sentences one after the other — start, audio, end — and keys per-sentence files, ``audio.done`` and the
words carried at a sentence's end on that. So a sentence's words cannot come after its ``SegmentFinished``,
nor can the next sentence's audio come before it. The engine never waits: the driver is told the sentence
is finished at once (Piper starts the next one; Qwen3 never stops), and only the *delivery* of the events
after a ``SegmentFinished`` waits behind its words — the cost of aligning that one sentence (PocketSphinx:
~0.03 s per second of audio, while the listener still has that sentence's seconds to play). A sentence the
aligner cannot align (silence, noise, a failed sentence) gets no words; its audio is unaffected.

Times: the aligner times a sentence from its first sample; the sentence's start on the utterance's clock
(samples as the driver delivered them, before the leading-silence trim) is added here, and the words then
go through ``Utterance._trim`` like an engine's. Offsets: into the utterance's text, where the sentence is
found after the one before it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from speakwire.aligners.base import Aligner
from speakwire.aligners.registry import speaks
from speakwire.audio.chunk import Float32Array
from speakwire.synthesis.events import AudioReady, SegmentFinished, SegmentStarted, UtteranceEvent
from speakwire.text.alignment import WordTiming

logger = logging.getLogger(__name__)


class AlignerThread:
    """A pipeline's aligner and the one thread it runs on (aligning is blocking CPU work, one at a time)."""

    def __init__(self, aligner: Aligner) -> None:
        self.aligner = aligner
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="speakwire-aligner")
        self._warned = False

    def aligns(self, language: str | None) -> bool:
        """Whether an utterance in ``language`` is aligned (unknown or ``auto``: yes, the aligner may return none)."""
        if not language or language.strip().lower() == "auto":
            return True
        return speaks(self.aligner.languages, language)

    def submit(self, samples: Float32Array, rate: int, text: str) -> concurrent.futures.Future[list[WordTiming]]:
        return self._pool.submit(self._align, samples, rate, text)

    def _align(self, samples: Float32Array, rate: int, text: str) -> list[WordTiming]:
        try:
            return self.aligner.align(samples, rate, text)
        except Exception:
            if not self._warned:  # a sentence without timings must not cost its audio; say why once
                self._warned = True
                logger.exception("aligner %s failed; the sentence goes without word timings", self.aligner.name)
            return []

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.aligner.close()


@dataclass(slots=True)
class _Words:
    """A sentence's words, in the event order where they belong (None until the aligner is done)."""

    index: int
    words: tuple[WordTiming, ...] | None = None


@dataclass(slots=True)
class _Sentence:
    index: int
    text: str
    start: int
    """Utterance samples (as delivered, before trimming) before the sentence's first."""
    parts: list[Float32Array] = field(default_factory=list)


class SentenceWords:
    """One utterance's aligned words (see the module docstring); lives on the event loop."""

    def __init__(
        self,
        aligner: AlignerThread,
        *,
        rate: int,
        utterance_text: Callable[[], str],
        sentence_text: Callable[[int], str | None],
        emit: Callable[[UtteranceEvent], None],
    ) -> None:
        self._aligner = aligner
        self._rate = rate
        self._utterance_text = utterance_text
        self._sentence_text = sentence_text
        """The decided text of sentence ``index`` (None: not decided; its ``SegmentStarted`` text is used)."""
        self._emit = emit
        self._loop = asyncio.get_running_loop()
        self._clock = 0
        self._cursor = 0
        """Where in the utterance's text the next sentence is looked for."""
        self._sentence: _Sentence | None = None
        self._queue: deque[UtteranceEvent | _Words] = deque()
        """Events held behind a sentence's words still being aligned, in order."""
        self._on_drained: Callable[[], None] | None = None
        self._closed = False

    @property
    def holding(self) -> bool:
        """Events wait for a sentence's words."""
        return bool(self._queue)

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once nothing is held (at once when nothing is)."""
        if self._queue:
            self._on_drained = callback
        else:
            callback()

    def close(self) -> None:
        """The utterance ended (cancelled): deliver nothing more."""
        self._closed = True
        self._queue.clear()
        self._on_drained = None

    def intake(self, event: UtteranceEvent) -> None:
        """An event as its driver delivered it: kept, aligned, and emitted in order."""
        if isinstance(event, SegmentStarted):
            self._sentence = _Sentence(event.index, event.text, self._clock)
        elif isinstance(event, AudioReady):
            self._clock += len(event.samples)
            sentence = self._sentence
            if sentence is not None and sentence.index == event.index and len(event.samples):
                sentence.parts.append(event.samples)
        elif isinstance(event, SegmentFinished):
            sentence, self._sentence = self._sentence, None
            if sentence is not None and sentence.index == event.index and event.error is None:
                self._align(sentence)
        self._queue.append(event)
        self._drain()

    def _align(self, sentence: _Sentence) -> None:
        text = self._sentence_text(sentence.index) or sentence.text
        spoken = text.strip()
        if not sentence.parts or not any(ch.isalnum() for ch in spoken):
            return
        at = self._utterance_text().find(spoken, self._cursor)
        if at < 0:
            return  # not the client's text as written (cannot happen for text the utterance was fed)
        self._cursor = at + len(spoken)
        slot = _Words(sentence.index)
        self._queue.append(slot)
        samples = np.concatenate(sentence.parts) if len(sentence.parts) > 1 else sentence.parts[0]
        start_s = sentence.start / self._rate
        future = self._aligner.submit(samples, self._rate, spoken)

        def done(future: concurrent.futures.Future[list[WordTiming]]) -> None:
            words = [] if future.cancelled() else future.result()
            placed = tuple(
                dataclasses.replace(w, char_start=w.char_start + at, char_end=w.char_end + at,
                                    start_s=w.start_s + start_s, end_s=w.end_s + start_s)
                for w in words
            )  # fmt: skip
            self._loop.call_soon_threadsafe(self._resolved, slot, placed)

        future.add_done_callback(done)

    def _resolved(self, slot: _Words, words: tuple[WordTiming, ...]) -> None:
        slot.words = words
        self._drain()

    def _drain(self) -> None:
        queue = self._queue
        while queue and not self._closed:
            head = queue[0]
            if isinstance(head, _Words):
                if head.words is None:
                    return
                queue.popleft()
                if head.words:
                    self._emit(AudioReady(head.index, np.zeros(0, np.float32), head.words))
            else:
                queue.popleft()
                self._emit(head)
        callback, self._on_drained = self._on_drained, None
        if callback is not None and not self._closed:
            callback()
