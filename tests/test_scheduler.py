"""The scheduler's worker pool: deadline order, and one worker kept free for urgent work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from speakwire.scheduler import Scheduler

WAIT_S = 10.0
"""Generous: only a broken scheduler waits this long (these tests assert order, not speed)."""


@pytest.fixture
def two_workers() -> Iterator[Scheduler]:
    scheduler = Scheduler(2, name="test-scheduler")
    yield scheduler
    scheduler.close()


def blocking_job(started: threading.Event, release: threading.Event, log: list[str], name: str) -> Callable[[], None]:
    def run() -> None:
        log.append(name)
        started.set()
        release.wait(WAIT_S)

    return run


def test_bulk_work_leaves_one_worker_free_for_an_urgent_job(two_workers: Scheduler) -> None:
    log: list[str] = []
    release = threading.Event()
    bulk_started = [threading.Event(), threading.Event()]
    far = time.monotonic() + 60  # refills for listeners with a minute of audio buffered
    for i, started in enumerate(bulk_started):
        two_workers.submit(blocking_job(started, release, log, f"bulk-{i}"), deadline=far)
    assert bulk_started[0].wait(WAIT_S)
    assert not bulk_started[1].wait(0.3)  # the second bulk job waits although a worker is idle

    urgent_started = threading.Event()
    two_workers.submit(blocking_job(urgent_started, release, log, "urgent"))
    assert urgent_started.wait(WAIT_S)  # ...which a new stream's first segment takes at once
    assert log == ["bulk-0", "urgent"]
    release.set()
    assert bulk_started[1].wait(WAIT_S)  # and the bulk job runs once the workers are free again


def test_bulk_work_takes_any_worker_once_it_is_due(two_workers: Scheduler) -> None:
    release = threading.Event()
    started = [threading.Event(), threading.Event()]
    soon = time.monotonic() + 0.6  # due in 0.6 s: urgent within 0.1 s
    for i, event in enumerate(started):
        two_workers.submit(blocking_job(event, release, [], f"bulk-{i}"), deadline=soon)
    assert started[0].wait(WAIT_S)
    assert started[1].wait(WAIT_S)  # both run at once: nothing is held back past its deadline
    release.set()


def test_the_earliest_deadline_runs_first() -> None:
    scheduler = Scheduler(1, name="test-scheduler", urgent_within_s=None)
    try:
        log: list[str] = []
        release, started = threading.Event(), threading.Event()
        scheduler.submit(blocking_job(started, release, log, "running"))
        assert started.wait(WAIT_S)
        done = threading.Event()
        now = time.monotonic()
        scheduler.submit(lambda: log.append("late"), deadline=now + 5)
        scheduler.submit(lambda: log.append("soon"), deadline=now + 1)
        scheduler.submit(lambda: (log.append("last"), done.set()), deadline=now + 9)
        release.set()
        assert done.wait(WAIT_S)
        assert log == ["running", "soon", "late", "last"]
    finally:
        scheduler.close()


def test_a_single_worker_is_never_held_back() -> None:
    scheduler = Scheduler(1, name="test-scheduler")
    try:
        done = threading.Event()
        scheduler.submit(done.set, deadline=time.monotonic() + 60)
        assert done.wait(WAIT_S)
    finally:
        scheduler.close()
