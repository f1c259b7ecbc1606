"""The scheduler's worker pool: deadline order, and a reserve worker for urgent work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from speakwire.scheduler import LATE_START_S, Scheduler

WAIT_S = 10.0
"""Generous: only a broken scheduler waits this long (these tests assert order, not speed)."""
FAR = 60.0
"""A refill for a listener with a minute of audio buffered: bulk work."""


@pytest.fixture
def two_workers() -> Iterator[Scheduler]:
    scheduler = Scheduler(2, name="test-scheduler")
    yield scheduler
    scheduler.close()


def blocking_job(started: threading.Event, release: threading.Event) -> Callable[[], None]:
    def run() -> None:
        started.set()
        release.wait(WAIT_S)

    return run


def submit_blocking(scheduler: Scheduler, release: threading.Event, *, due_in_s: float = 0.0) -> threading.Event:
    started = threading.Event()
    scheduler.submit(blocking_job(started, release), deadline=time.monotonic() + due_in_s)
    return started


def test_bulk_work_takes_every_worker(two_workers: Scheduler) -> None:
    release = threading.Event()
    started = [submit_blocking(two_workers, release, due_in_s=FAR) for _ in range(2)]
    assert all(event.wait(WAIT_S) for event in started)  # nothing is held back while a worker is free
    release.set()


def test_an_urgent_job_starts_at_once_while_every_worker_is_on_bulk_work(two_workers: Scheduler) -> None:
    release = threading.Event()
    bulk = [submit_blocking(two_workers, release, due_in_s=FAR) for _ in range(2)]
    assert all(event.wait(WAIT_S) for event in bulk)
    urgent = submit_blocking(two_workers, release)  # a new stream's first segment
    assert urgent.wait(WAIT_S)
    release.set()


def test_the_reserve_takes_no_bulk_work(two_workers: Scheduler) -> None:
    release = threading.Event()
    bulk = [submit_blocking(two_workers, release, due_in_s=FAR) for _ in range(2)]
    assert all(event.wait(WAIT_S) for event in bulk)
    third = submit_blocking(two_workers, release, due_in_s=FAR)
    assert not third.wait(0.3)
    release.set()
    assert third.wait(WAIT_S)


def test_the_reserve_stays_out_while_a_worker_runs_urgent_work(two_workers: Scheduler) -> None:
    # In an overload every worker runs urgent work; more threads than workers would only share the cores.
    release = threading.Event()
    urgent = submit_blocking(two_workers, release)
    bulk = submit_blocking(two_workers, release, due_in_s=FAR)
    assert urgent.wait(WAIT_S) and bulk.wait(WAIT_S)
    waiting = submit_blocking(two_workers, release)
    assert not waiting.wait(0.3)
    release.set()
    assert waiting.wait(WAIT_S)


def test_bulk_work_that_turns_urgent_gets_the_reserve(two_workers: Scheduler) -> None:
    release = threading.Event()
    bulk = [submit_blocking(two_workers, release, due_in_s=FAR) for _ in range(2)]
    assert all(event.wait(WAIT_S) for event in bulk)
    soon = submit_blocking(two_workers, release, due_in_s=1.2)  # bulk now, urgent within 0.2 s
    assert soon.wait(WAIT_S)
    release.set()


def test_the_earliest_deadline_runs_first() -> None:
    scheduler = Scheduler(1, name="test-scheduler", reserve=False)
    try:
        log: list[str] = []
        release, started = threading.Event(), threading.Event()
        scheduler.submit(blocking_job(started, release))
        assert started.wait(WAIT_S)
        done = threading.Event()
        now = time.monotonic()
        scheduler.submit(lambda: log.append("late"), deadline=now + 5)
        scheduler.submit(lambda: log.append("soon"), deadline=now + 1)
        scheduler.submit(lambda: (log.append("last"), done.set()), deadline=now + 9)
        release.set()
        assert done.wait(WAIT_S)
        assert log == ["soon", "late", "last"]
    finally:
        scheduler.close()


def test_usage_counts_busy_threads_and_late_starts_and_leaves_idle_time_out() -> None:
    """What the live capacity estimate reads: thread-seconds of work, seconds with any work, late starts."""
    scheduler = Scheduler(2, name="test-scheduler", reserve=False)
    try:
        idle = scheduler.usage()
        assert (idle.busy_thread_s, idle.busy_s, idle.late_starts) == (0.0, 0.0, 0)
        release = threading.Event()
        both = [submit_blocking(scheduler, release, due_in_s=FAR) for _ in range(2)]
        assert all(event.wait(WAIT_S) for event in both)
        while_busy = scheduler.usage()
        assert while_busy.busy_thread_s >= while_busy.busy_s > 0  # counted while the jobs still run
        release.set()
        done = threading.Event()
        scheduler.submit(done.set, deadline=time.monotonic() - 10 * LATE_START_S)  # due long ago: a late start
        assert done.wait(WAIT_S)
        while scheduler.busy:
            time.sleep(0.01)
        after = scheduler.usage()
        assert after.late_starts == 1  # the two started early (due in a minute), this one late
        assert after.busy_s >= while_busy.busy_s
        later = scheduler.usage()
        assert (later.busy_thread_s, later.busy_s) == (after.busy_thread_s, after.busy_s)  # idle adds nothing
        window = later.since(idle)
        assert window.busy_thread_s == later.busy_thread_s and window.late_starts == 1
    finally:
        scheduler.close()
