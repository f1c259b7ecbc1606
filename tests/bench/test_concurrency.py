"""``together``, the burst the benchmarks and the capacity probe start: every worker at once, failures after all."""

from __future__ import annotations

import threading

import pytest

from speakwire.bench.concurrency import together


def test_together_runs_every_worker_at_the_same_time() -> None:
    meet = threading.Barrier(4, timeout=30)  # passes only if all four are running at once
    seen: list[int] = []

    def work(index: int) -> None:
        meet.wait()
        seen.append(index)

    assert together(4, work) >= 0
    assert sorted(seen) == [0, 1, 2, 3]


def test_together_raises_the_first_failure_once_every_worker_has_returned() -> None:
    finished: list[int] = []

    def work(index: int) -> None:
        if index == 0:
            raise ValueError("worker 0 failed")
        finished.append(index)

    with pytest.raises(ValueError, match="worker 0 failed"):
        together(3, work)
    assert sorted(finished) == [1, 2]
