"""Scheduler: the engine worker threads, and who gets the next free one.

Work is one segment's synthesis. A free worker takes the job with the earliest
playback deadline: a stream's first segment is due "now" (so it jumps ahead of
every later segment), a later segment is due when the audio already sent to its
client runs out. Streams far ahead of playback therefore wait behind streams that
are about to underrun, which keeps time to first audio flat under load.
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


@dataclass(order=True, slots=True)
class Job:
    """A unit of engine work; ordered by deadline, then submission order."""

    deadline: float
    seq: int
    run: Callable[[], None] = field(compare=False)
    submitted_at: float = field(compare=False, default=0.0)
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        """Skip the job if no worker has started it yet (a running job stops via its own cancel flag)."""
        self.cancelled = True


class Scheduler:
    """A fixed pool of worker threads serving a deadline-ordered queue."""

    def __init__(self, workers: int, *, name: str = "speakwire-engine") -> None:
        self._heap: list[Job] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._closed = False
        self._busy = 0
        self._job_s = 0.0
        """Moving average of how long one job holds a worker (a segment, or its slice until it yields)."""
        self.queue_wait_observer: Callable[[float], None] | None = None
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(max(1, workers))
        ]
        for thread in self._threads:
            thread.start()

    @property
    def workers(self) -> int:
        return len(self._threads)

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
            return jobs * self._job_s / len(self._threads)

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    def submit(self, run: Callable[[], None], *, deadline: float | None = None) -> Job:
        """Queue ``run`` for a worker; ``deadline`` is a ``time.monotonic()`` instant (None = now)."""
        now = time.monotonic()
        job = Job(deadline if deadline is not None else now, next(self._seq), run, submitted_at=now)
        with self._cond:
            if self._closed:
                raise RuntimeError("scheduler is closed")
            heapq.heappush(self._heap, job)
            self._cond.notify()
        return job

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting work, drop what is queued, and join the workers."""
        with self._cond:
            self._closed = True
            for job in self._heap:
                job.cancelled = True
            self._heap.clear()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    def _next_job(self) -> Job | None:
        with self._cond:
            while True:
                while self._heap and self._heap[0].cancelled:
                    heapq.heappop(self._heap)
                if self._heap:
                    self._busy += 1
                    return heapq.heappop(self._heap)
                if self._closed:
                    return None
                self._cond.wait()

    def _work(self) -> None:
        while (job := self._next_job()) is not None:
            started = time.monotonic()
            try:
                if self.queue_wait_observer is not None:
                    self.queue_wait_observer(started - job.submitted_at)
                job.run()
            except Exception:  # a job reports its own errors; this only keeps the worker alive
                logger.exception("engine job failed")
            finally:
                with self._cond:
                    self._busy -= 1
                    held = time.monotonic() - started
                    self._job_s = held if self._job_s == 0 else 0.8 * self._job_s + 0.2 * held
