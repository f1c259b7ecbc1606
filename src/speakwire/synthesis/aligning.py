"""Word timings from an aligner (``speakwire.aligners``): each sentence's audio aligned once it is final.

For an engine with no word timings of its own (Qwen3), or for every engine when ``--aligner`` names one
(the utterance then drops the engine's own words: ``SynthesisPipeline.engine_words``), the utterance hands
each event its driver delivers to a ``SentenceWords``. It passes every event on at once and keeps the sentence's
samples as they pass; at the sentence's ``SegmentFinished`` it sends the samples and the sentence's text to the
pipeline's ``AlignerThread`` (one thread, off the event loop and off every engine thread), and delivers the words,
when they come, as a ``SegmentWords`` event.

Order, and why: audio never waits for an aligner (issue 29). Neither the engine (the driver is told the sentence
is finished at once) nor the delivery of anything after the sentence (its ``SegmentFinished``, the next sentence's
start and audio) is held for the words: they come in a ``SegmentWords`` of their own, after their sentence's
``SegmentFinished`` and possibly after later sentences' audio, so they trail the audio by at most one sentence
(the next one plays while this one is aligned) plus the bound below. Every sentence gets exactly one
``SegmentWords``, in sentence order, before ``UtteranceFinished`` (which waits for the last sentence's words);
it is empty for a sentence the aligner cannot align (silence, noise, a failed sentence) or that ran past its
bound. A protocol maps it to its wire form, where it may refer back to an earlier sentence
(``output.WordsPart``); one that binds words to the sentence's end (Baseten's ``sync``) holds what follows itself
(``output.words_at_segment_end``). A cancel drops the words not delivered yet: they were not reported heard.

A bound, so a hung or very slow aligner never holds the words forever: a sentence waits for its words at most
``AlignerThread.deadline_s`` (``--aligner-timeout``; by default ``max(1 s, 2 × its audio)``), then goes without
them; the log says why once. While a call runs past its bound, later sentences go without words at once rather
than queueing behind it, and no second thread is started.

Times: the aligner times a sentence from its first sample; the sentence's start on the utterance's clock
(samples as the driver delivered them, before the leading-silence trim) is added here, and the words then
move back with the leading-silence trim like an engine's (``Utterance._shift``). Offsets: into the utterance's
text, where the sentence is found after the one before it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from speakwire.aligners.base import Aligner
from speakwire.aligners.registry import speaks
from speakwire.audio.chunk import Float32Array
from speakwire.synthesis.events import AudioReady, SegmentFinished, SegmentStarted, SegmentWords, UtteranceEvent
from speakwire.text.alignment import WordTiming

logger = logging.getLogger(__name__)

CLOSE_WAIT_S = 5.0
"""How long closing waits for a call in progress before leaving the (daemon) thread to the process's end."""
TIMEOUT_FLOOR_S = 1.0
TIMEOUT_PER_AUDIO_S = 2.0
"""The default bound on one sentence's wait for its words: ``max(TIMEOUT_FLOOR_S, TIMEOUT_PER_AUDIO_S × its audio)``.
An aligner that keeps up costs a fraction of the audio (PocketSphinx ~0.03 s per audio second); twice the audio
only passes when something is wrong, and the floor keeps a short sentence from timing out on a busy machine."""


@dataclass(slots=True, eq=False)
class _Job:
    samples: Float32Array
    rate: int
    text: str
    future: concurrent.futures.Future[list[WordTiming]]
    deadline: float
    """``time.monotonic()`` after which nobody waits for this job's words."""


class AlignerThread:
    """A pipeline's aligner, the one thread it runs on, and how long a sentence may wait for it.

    Aligning is blocking CPU (or GPU) work, one sentence at a time, on a daemon thread of its own (not a
    ``ThreadPoolExecutor``: the interpreter joins those at exit, so a hung call would hold the process). A
    sentence waits for its words at most ``deadline_s`` of its audio (``SentenceWords`` keeps the clock): a job
    still queued then is dropped, and while a call runs past its bound every new sentence goes without words at
    once instead of queueing behind it. The thread stays the only one: a hung call is never replaced by another
    thread (that would leak one per hang, and an aligner holding a lock would block it too); when the call returns,
    aligning resumes.
    """

    def __init__(self, aligner: Aligner, *, timeout_s: float | None = None) -> None:
        """``timeout_s``: the bound on every sentence's wait; None: ``max(1 s, 2 × the sentence's audio)``."""
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"the aligner timeout must be positive, got {timeout_s}")
        self.aligner = aligner
        self.timeout_s = timeout_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: _Job | None = None
        self._started_at = 0.0
        self._overrun = False
        """A call ran past its bound (said once in the log, until it returns)."""
        self._warned = False
        self._behind_warned = False
        self.timed_out = 0
        """Clients' sentences that went without words because they waited their bound (for metrics and tests)."""
        self._thread = threading.Thread(target=self._work, name="speakwire-aligner", daemon=True)
        self._thread.start()

    def aligns(self, language: str | None) -> bool:
        """Whether an utterance in ``language`` is aligned (unknown or ``auto``: yes, the aligner may return none)."""
        if not language or language.strip().lower() == "auto":
            return True
        return speaks(self.aligner.languages, language)

    def deadline_s(self, audio_s: float) -> float:
        """How long a sentence of ``audio_s`` seconds waits for its words before it goes without them."""
        if self.timeout_s is not None:
            return self.timeout_s
        return max(TIMEOUT_FLOOR_S, TIMEOUT_PER_AUDIO_S * audio_s)

    def submit(self, samples: Float32Array, rate: int, text: str) -> concurrent.futures.Future[list[WordTiming]]:
        """Align one sentence on the aligner's thread; the future is done at once (no words) while a call overruns."""
        future: concurrent.futures.Future[list[WordTiming]] = concurrent.futures.Future()
        now = time.monotonic()
        with self._lock:
            running = self._running
            if running is not None and now > running.deadline:
                self.timed_out += 1
                self._say_overrun(now - self._started_at)
                future.set_result([])  # behind a call past its bound: no words rather than an unbounded wait
                return future
        self._jobs.put(_Job(samples, rate, text, future, now + self.deadline_s(len(samples) / rate)))
        return future

    def expired(self, future: concurrent.futures.Future[list[WordTiming]], *, counted: bool = True) -> None:
        """The sentence of ``future`` went without words (its bound passed): drop its job if it has not started.

        ``counted``: it adds to ``timed_out`` (False for the start-up measurement's clip, which is no client's).
        """
        now = time.monotonic()
        with self._lock:
            if counted:
                self.timed_out += 1
            running = self._running
            if running is not None and (running.future is future or now > running.deadline):
                self._say_overrun(now - self._started_at)  # its own call, or one it queued behind, overran
            elif not self._behind_warned and not future.done():
                self._behind_warned = True
                logger.warning("aligner %s is behind: a sentence waited its bound in the queue and goes without word "
                               "timings, its audio unaffected (said once)", self.aligner.name)  # fmt: skip
            future.cancel()  # still queued: it never runs (a running call cannot be stopped)

    def close(self) -> None:
        """Stop the thread (jobs still queued are dropped) and release the aligner once its call has returned."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.future.cancel()
        self._jobs.put(None)
        self._thread.join(timeout=CLOSE_WAIT_S)
        if self._thread.is_alive():  # a call that does not return: the daemon thread ends with the process
            logger.warning("aligner %s is still busy at shutdown; it is left to end with the process",
                           self.aligner.name)  # fmt: skip
            return
        self.aligner.close()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue  # its sentence stopped waiting while it was queued
            with self._lock:
                self._running, self._started_at = job, time.monotonic()
            try:
                words = self._align(job)
            finally:
                with self._lock:
                    self._running = None
                    overran, self._overrun = self._overrun, False
            if overran:
                logger.info("aligner %s: the call that overran returned after %.1f s; aligning again",
                            self.aligner.name, time.monotonic() - self._started_at)  # fmt: skip
            job.future.set_result(words)

    def _align(self, job: _Job) -> list[WordTiming]:
        try:
            return self.aligner.align(job.samples, job.rate, job.text)
        except Exception:
            if not self._warned:  # a sentence without timings must not cost its audio; say why once
                self._warned = True
                logger.exception("aligner %s failed; the sentence goes without word timings", self.aligner.name)
            return []

    def _say_overrun(self, running_s: float) -> None:
        """Log once per overrunning call why sentences go without words (called holding the lock)."""
        if self._overrun:
            return
        self._overrun = True
        job = self._running
        audio_s = len(job.samples) / job.rate if job is not None else 0.0
        logger.warning(
            "aligner %s: a %.2f s sentence is still being aligned after %.1f s (bound %.1f s); sentences go without "
            "word timings until it returns, their audio unaffected",
            self.aligner.name, audio_s, running_s, self.deadline_s(audio_s),
        )  # fmt: skip


@dataclass(slots=True)
class _Words:
    """A sentence's words, in sentence order (None until the aligner is done or the bound passed)."""

    index: int
    words: tuple[WordTiming, ...] | None = None
    timer: asyncio.TimerHandle | None = None
    """Gives the sentence no words once its bound (``AlignerThread.deadline_s``) has passed."""


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
        self._pending: deque[_Words] = deque()
        """Finished sentences whose ``SegmentWords`` is not delivered yet, in order."""
        self._on_drained: Callable[[], None] | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """A finished sentence's words are still to be delivered."""
        return bool(self._pending)

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once every finished sentence's words are delivered (at once when they are)."""
        if self._pending:
            self._on_drained = callback
        else:
            callback()

    def close(self) -> None:
        """The utterance ended (cancelled): deliver nothing more."""
        self._closed = True
        for slot in self._pending:
            if slot.timer is not None:
                slot.timer.cancel()
        self._pending.clear()
        self._on_drained = None

    def intake(self, event: UtteranceEvent) -> None:
        """An event as its driver delivered it: passed on at once; at a sentence's end, its words are asked for."""
        if self._closed:
            return
        self._emit(event)
        if isinstance(event, SegmentStarted):
            self._sentence = _Sentence(event.index, event.text, self._clock)
        elif isinstance(event, AudioReady):
            self._clock += len(event.samples)
            sentence = self._sentence
            if sentence is not None and sentence.index == event.index and len(event.samples):
                sentence.parts.append(event.samples)
        elif isinstance(event, SegmentFinished):
            sentence, self._sentence = self._sentence, None
            slot = _Words(event.index)
            self._pending.append(slot)
            whole = sentence is not None and sentence.index == event.index and event.error is None
            if not whole or sentence is None or not self._align(sentence, slot):
                slot.words = ()  # nothing to align: the sentence's (empty) words are settled at once
            self._drain()

    def _align(self, sentence: _Sentence, slot: _Words) -> bool:
        """Send the sentence to the aligner (False: there is nothing to align)."""
        text = self._sentence_text(sentence.index) or sentence.text
        spoken = text.strip()
        if not sentence.parts or not any(ch.isalnum() for ch in spoken):
            return False
        at = self._utterance_text().find(spoken, self._cursor)
        if at < 0:
            return False  # not the client's text as written (cannot happen for text the utterance was fed)
        self._cursor = at + len(spoken)
        samples = np.concatenate(sentence.parts) if len(sentence.parts) > 1 else sentence.parts[0]
        start_s = sentence.start / self._rate
        future = self._aligner.submit(samples, self._rate, spoken)
        bound_s = self._aligner.deadline_s(len(samples) / self._rate)
        slot.timer = self._loop.call_later(bound_s, self._expire, slot, future)

        def done(future: concurrent.futures.Future[list[WordTiming]]) -> None:
            if future.cancelled():
                return  # its bound passed while it was queued: ``_expire`` gave the sentence no words
            placed = tuple(
                dataclasses.replace(w, char_start=w.char_start + at, char_end=w.char_end + at,
                                    start_s=w.start_s + start_s, end_s=w.end_s + start_s)
                for w in future.result()
            )  # fmt: skip
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone, nobody waits
                self._loop.call_soon_threadsafe(self._resolved, slot, placed)

        future.add_done_callback(done)
        return True

    def _resolved(self, slot: _Words, words: tuple[WordTiming, ...]) -> None:
        if slot.words is not None:
            return  # its bound passed first: the sentence went on without these
        if slot.timer is not None:
            slot.timer.cancel()
        slot.words = words
        self._drain()

    def _expire(self, slot: _Words, future: concurrent.futures.Future[list[WordTiming]]) -> None:
        """The sentence's bound passed without its words: it goes without them."""
        if slot.words is not None or self._closed:
            return
        self._aligner.expired(future)
        slot.words = ()
        self._drain()

    def _drain(self) -> None:
        """Deliver the settled words at the head of the line, in sentence order."""
        pending = self._pending
        while pending and not self._closed:
            head = pending[0]
            if head.words is None:
                return
            pending.popleft()
            self._emit(SegmentWords(head.index, head.words))
        callback, self._on_drained = self._on_drained, None
        if callback is not None and not self._closed:
            callback()
