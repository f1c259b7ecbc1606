"""Least-laxity ordering: which engine work must start first so that no listener hears a gap."""

from __future__ import annotations

import pytest

from speakwire.pacing import (
    DELIVERY_MARGIN_S,
    FIRST_AUDIO_SLACK_S,
    WorkCosts,
    first_segment_key,
    next_chunk_s,
    refill_key,
    should_yield,
)

NOW = 1000.0


def test_a_young_stream_about_to_run_dry_goes_before_a_new_streams_first_segment() -> None:
    costs = WorkCosts(first_chunk_s=0.08)
    new_stream = first_segment_key(NOW, costs)
    # 0.3 s buffered, its next decoder window costs 0.2 s: it must start within 0.05 s.
    young_stream = refill_key(NOW + 0.3, 0.2)
    assert young_stream < new_stream


def test_a_new_streams_first_segment_goes_before_a_refill_with_seconds_buffered() -> None:
    costs = WorkCosts(first_chunk_s=0.08)
    assert first_segment_key(NOW, costs) < refill_key(NOW + 3.0, 0.5)


def test_a_first_segment_may_wait_only_its_slack() -> None:
    costs = WorkCosts(first_chunk_s=0.1)
    assert first_segment_key(NOW, costs) == pytest.approx(NOW + FIRST_AUDIO_SLACK_S - 0.1)


def test_a_first_segment_on_a_slow_machine_is_due_when_its_text_is_complete() -> None:
    # Its first chunk costs more than the slack: it must not look late (and refuse new streams) at once.
    assert first_segment_key(NOW, WorkCosts(first_chunk_s=0.8)) == NOW


def test_a_refill_starts_its_cost_and_a_margin_before_the_buffer_runs_out() -> None:
    assert refill_key(NOW + 2.0, 0.4) == pytest.approx(NOW + 2.0 - 0.4 - DELIVERY_MARGIN_S)


def test_the_next_window_is_expected_to_cost_more_than_the_last() -> None:
    assert next_chunk_s(0.1) > 0.1


@pytest.mark.parametrize(
    ("own_key", "waiting_key", "expected"),
    [
        (NOW + 1.0, NOW + 0.1, True),  # someone must start sooner, and we can wait
        (NOW + 0.1, NOW + 1.0, False),  # we are the more urgent one
        (NOW + 0.5, None, False),  # nobody waits
        (NOW - 0.1, NOW - 0.3, False),  # both late: a switch only moves the gap to us
        (NOW + 0.5, NOW + 0.5, False),  # a tie keeps the worker
    ],
)
def test_a_running_segment_gives_its_worker_only_to_work_that_cannot_wait(
    own_key: float, waiting_key: float | None, expected: bool
) -> None:
    assert should_yield(own_key, waiting_key, NOW) is expected


def test_first_chunk_cost_follows_what_the_machine_measures() -> None:
    costs = WorkCosts()
    costs.observe_first_chunk(0.3)
    assert costs.first_chunk_s == pytest.approx(0.3)  # the first measurement replaces the default
    for _ in range(20):
        costs.observe_first_chunk(0.05)
    assert costs.first_chunk_s == pytest.approx(0.05, abs=0.01)
