"""Scheduler: the engine worker threads, and who gets the next free one.

Work is one segment's synthesis (or its next chunks, after it gave its worker away).
A free worker takes the job with the earliest deadline, which the pipeline sets to the
job's latest start (``speakwire.pacing``): when its audio is due (a new stream's first
audio soon, a later segment's when the audio already sent runs out) minus what making
it costs. Streams far ahead of playback therefore wait behind streams that are about to
underrun, and a new stream's first segment waits only for streams that would otherwise
run dry.

A reserve worker takes urgent work when every worker is on bulk. A job whose deadline is
more than ``URGENT_WITHIN_S`` away (a refill for a listener with seconds buffered) is
*bulk*. Engine calls cannot be interrupted (a whole sentence holds its worker for up to
half a second), so a new stream's first segment used to wait behind two of them: that
wait was most of the p95 time to first audio under load. The reserve starts it at once
and the operating system shares the cores for that moment (bulk has the buffer to
spare). It never takes bulk work, and never helps while a worker runs urgent work, so an
overload does not put more threads than workers on the cores. Holding bulk back to keep a
worker free instead halved the throughput of two streams on two cores.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

URGENT_WITHIN_S = 1.0
"""Jobs due to start within this many seconds are urgent; later ones are bulk (the reserve does not take them)."""
LATE_START_S = 0.3
"""A job that starts this long after its deadline (its latest start) is *late*: its listener hears a gap, or
waits that much longer for first audio. Counted in ``WorkUsage.late_starts`` (the live capacity estimate)."""


@dataclass(frozen=True, slots=True)
class WorkUsage:
    """How much the workers have worked since the scheduler started (totals; subtract two to get a window)."""

    busy_thread_s: float = 0.0
    """Sum over threads of the seconds each ran a job (two threads busy for one second: 2)."""
    busy_s: float = 0.0
    """Seconds during which at least one thread ran a job (idle time is not in it)."""
    late_starts: int = 0
    """Jobs that started ``LATE_START_S`` or more after their deadline."""
    audio_s: float = 0.0
    """Audio the jobs made, counted per engine chunk as it comes (``count_audio``): a segment cancelled
    half-way counts what it made, as its busy time does."""

    def since(self, earlier: WorkUsage) -> WorkUsage:
        return WorkUsage(
            self.busy_thread_s - earlier.busy_thread_s, self.busy_s - earlier.busy_s,
            self.late_starts - earlier.late_starts, self.audio_s - earlier.audio_s,
        )  # fmt: skip


@dataclass(order=True, slots=True)
class Job:
    """A unit of engine work; ordered by deadline, then submission order."""

    deadline: float
    seq: int
    run: Callable[[], None] = field(compare=False)
    submitted_at: float = field(compare=False, default=0.0)
    cancelled: bool = field(compare=False, default=False)
    bulk: bool = field(compare=False, default=False)
    """Taken by a (non-reserve) worker while its deadline was more than ``URGENT_WITHIN_S`` away."""

    def cancel(self) -> None:
        """Skip the job if no worker has started it yet (a running job stops via its own cancel flag)."""
        self.cancelled = True


class Scheduler:
    """A fixed pool of worker threads serving a deadline-ordered queue."""

    def __init__(self, workers: int, *, name: str = "speakwire-engine", reserve: bool = True) -> None:
        """``reserve``: add the worker for urgent work (off for engines whose jobs last a whole utterance)."""
        self._heap: list[Job] = []
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        """The workers wait here, one woken per job: a batched engine has a worker per stream (64, say), and
        waking all of them for every job made each new stream cost the event loop ~1 ms of GIL."""
        self._reserve_wake = threading.Condition(lock)
        """The reserve waits here (same lock), told of every job and of every worker turning to bulk."""
        self._seq = itertools.count()
        self._closed = False
        self._busy = 0
        self._bulk = 0
        """Jobs running on the (non-reserve) workers that were bulk when taken."""
        self._workers = max(1, workers)
        self._job_s = 0.0
        """Moving average of how long one job holds a worker (a segment, or its slice until it yields)."""
        self._busy_thread_s = 0.0
        self._busy_s = 0.0
        self._late_starts = 0
        self._audio_s = 0.0
        self._counted_at = time.monotonic()
        """Until when ``_busy_thread_s`` and ``_busy_s`` are counted (``_count_busy``, under the lock)."""
        self.queue_wait_observer: Callable[[float], None] | None = None
        self._threads = [
            threading.Thread(target=self._work, args=(False,), name=f"{name}-{i}", daemon=True)
            for i in range(self._workers)
        ]
        self._reserve: threading.Thread | None = None
        if reserve:
            self._reserve = threading.Thread(target=self._work, args=(True,), name=f"{name}-reserve", daemon=True)
            self._threads.append(self._reserve)
        for thread in self._threads:
            thread.start()

    @property
    def workers(self) -> int:
        """Workers that take any job (the reserve not counted)."""
        return self._workers

    def on_reserve(self) -> bool:
        """True on the reserve worker's thread (a job there should hand bulk work back to the workers)."""
        return self._reserve is not None and threading.current_thread() is self._reserve

    @property
    def queued(self) -> int:
        with self._cond:
            return sum(1 for job in self._heap if not job.cancelled)

    def earliest_deadline(self) -> float | None:
        """Deadline of the most urgent waiting job, or None when nothing waits."""
        with self._cond:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            return self._heap[0].deadline if self._heap else None

    def work_due_before(self, deadline: float) -> float:
        """Estimated seconds until the workers are through the queued jobs due before ``deadline``."""
        with self._cond:
            jobs = sum(1 for job in self._heap if not job.cancelled and job.deadline < deadline)
            return jobs * self._job_s / self._workers

    @property
    def busy(self) -> int:
        """Threads running a job, the reserve included (so it may be ``workers + 1``)."""
        with self._cond:
            return self._busy

    def usage(self) -> WorkUsage:
        """What the workers have done so far (read by the live capacity estimate, ``server.live_capacity``)."""
        with self._cond:
            self._count_busy(time.monotonic())
            return WorkUsage(self._busy_thread_s, self._busy_s, self._late_starts, self._audio_s)

    def count_audio(self, seconds: float) -> None:
        """A job made ``seconds`` of audio (called per engine chunk, from the worker, before any cancel check).

        Counted here, beside the busy time and under the same lock, so a window of ``usage`` holds the audio
        of exactly the work whose time it holds. Counted at the end of a segment instead, a barge-in's or a
        cancel's audio was left out while its compute stayed in, and the live capacity read low (issue 31).
        """
        with self._cond:
            self._audio_s += seconds

    def _count_busy(self, now: float) -> None:
        """Add the time since the last count at the present number of busy threads; call under the lock,
        before that number changes."""
        elapsed = now - self._counted_at
        self._counted_at = now
        if self._busy:
            self._busy_thread_s += self._busy * elapsed
            self._busy_s += elapsed

    def submit(self, run: Callable[[], None], *, deadline: float | None = None) -> Job:
        """Queue ``run``; ``deadline`` is the ``time.monotonic()`` instant it should start by (None = now)."""
        now = time.monotonic()
        job = Job(deadline if deadline is not None else now, next(self._seq), run, submitted_at=now)
        with self._cond:
            if self._closed:
                raise RuntimeError("scheduler is closed")
            heapq.heappush(self._heap, job)
            self._cond.notify()  # an idle worker takes it
            self._reserve_wake.notify()  # the reserve looks too (and declines while a worker is idle)
        return job

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting work, drop what is queued, and join the workers."""
        with self._cond:
            self._closed = True
            for job in self._heap:
                job.cancelled = True
            self._heap.clear()
            self._cond.notify_all()
            self._reserve_wake.notify_all()
        deadline = time.monotonic() + timeout  # one bound for all of them, not one per thread
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _next_job(self, reserve: bool) -> Job | None:
        with self._cond:
            while True:
                while self._heap and self._heap[0].cancelled:
                    heapq.heappop(self._heap)
                if self._closed and not self._heap:
                    return None
                if self._heap:
                    head = self._heap[0]
                    now = time.monotonic()
                    until_urgent = head.deadline - URGENT_WITHIN_S - now
                    if not reserve:
                        head.bulk = until_urgent > 0
                        self._bulk += head.bulk
                        self._start(head, now)
                        if self._bulk == self._workers:
                            self._reserve_wake.notify()  # the reserve now watches the queue for work turning urgent
                        return heapq.heappop(self._heap)
                    if self._bulk == self._workers:  # every worker is on bulk work
                        if until_urgent <= 0:
                            self._start(head, now)
                            return heapq.heappop(self._heap)
                        self._reserve_wake.wait(until_urgent)
                        continue
                (self._reserve_wake if reserve else self._cond).wait()

    def _start(self, job: Job, now: float) -> None:
        """A thread takes ``job``: one more busy, and a late start counted; under the lock."""
        self._count_busy(now)
        self._busy += 1
        self._late_starts += now - job.deadline >= LATE_START_S

    def _work(self, reserve: bool) -> None:
        while (job := self._next_job(reserve)) is not None:
            started = time.monotonic()
            try:
                if self.queue_wait_observer is not None:
                    self.queue_wait_observer(started - job.submitted_at)
                job.run()
            except Exception:  # a job reports its own errors; this only keeps the worker alive
                logger.exception("engine job failed")
            finally:
                with self._cond:
                    ended = time.monotonic()
                    self._count_busy(ended)
                    self._busy -= 1
                    self._bulk -= job.bulk
                    held = ended - started
                    self._job_s = held if self._job_s == 0 else 0.8 * self._job_s + 0.2 * held
