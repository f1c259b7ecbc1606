"""The live capacity estimate: fed windows of work, it rises, falls and holds as the work says, within bounds.

No server and no clock here: the estimate is a pure function of the windows it is given (the loopback tests
in ``test_capacity`` show it following real work through ``/ready`` and ``/metrics``).
"""

from __future__ import annotations

import itertools

import pytest

from speakwire.scheduler import WorkUsage
from speakwire.server import capacity as cap
from speakwire.server import live_capacity as live
from speakwire.server.live_capacity import LiveCapacity, WorkWindow

WORKERS = 2


def _warm_up(real_time_streams: float = 6.5) -> cap.Capacity:
    return cap.derive(operator_limit=None, engine_limit=None, workers=WORKERS, measured=(real_time_streams, 1.0))


def _saturated(real_time_streams: float, *, seconds: float = 2.0, underruns: int = 0, late: int = 0) -> WorkWindow:
    """``seconds`` with both workers busy, making ``real_time_streams`` audio seconds per second."""
    usage = WorkUsage(busy_thread_s=WORKERS * seconds, busy_s=seconds, late_starts=late,
                      audio_s=real_time_streams * seconds)  # fmt: skip
    return WorkWindow(usage, underruns)


def _one_worker(real_time_streams: float, *, seconds: float = 2.0) -> WorkWindow:
    """``seconds`` with one of the two workers busy, at a per-worker speed of ``real_time_streams / 2``."""
    return WorkWindow(WorkUsage(busy_thread_s=seconds, busy_s=seconds, audio_s=real_time_streams / WORKERS * seconds))


def test_it_starts_from_the_warm_up_figure_and_says_so() -> None:
    estimate = LiveCapacity(_warm_up(6.5))
    assert estimate.real_time_streams == 6.5
    assert estimate.streams == _warm_up(6.5).streams == 5
    assert estimate.source == "warm-up"
    assert estimate.to_dict()["measured_real_time_streams"] == 6.5


def test_it_rises_towards_a_faster_engine_by_bounded_steps_and_then_admits_more() -> None:
    estimate = LiveCapacity(_warm_up(6.5))
    seen = [estimate.real_time_streams]
    for _ in range(30):
        assert estimate.observe(_saturated(13.9))
        seen.append(estimate.real_time_streams)
    assert seen == sorted(seen)  # never down
    assert all(b / a <= live.MAX_STEP for a, b in itertools.pairwise(seen) if a)
    assert estimate.real_time_streams == pytest.approx(13.9, rel=0.01)
    assert estimate.source == "measured-live"
    assert estimate.streams == int(estimate.real_time_streams * cap.ADMISSION_SHARE) == 12
    assert estimate.samples == 30


def test_it_falls_when_the_engine_slows_down() -> None:
    estimate = LiveCapacity(_warm_up(15.3))
    before = estimate.streams
    for _ in range(30):
        estimate.observe(_saturated(8.0))
    assert estimate.real_time_streams == pytest.approx(8.0, rel=0.01)
    assert estimate.streams < before


def test_short_utterances_add_up_to_one_sample_and_idle_time_changes_nothing() -> None:
    estimate = LiveCapacity(_warm_up(6.5), min_sample_audio_s=4.0)
    short = _saturated(12.0, seconds=0.1)  # 1.2 s of audio: a short reply
    assert not estimate.observe(short)
    assert not estimate.observe(short)
    assert not estimate.observe(WorkWindow(WorkUsage()))  # idle: nothing made, nobody busy
    assert (estimate.samples, estimate.real_time_streams, estimate.source) == (0, 6.5, "warm-up")
    assert not estimate.observe(short)
    assert estimate.observe(short)  # 4.8 s of audio: one sample, of 12 real-time streams
    assert estimate.samples == 1 and estimate.real_time_streams > 6.5


def test_a_window_that_spans_idle_time_measures_only_the_busy_part() -> None:
    """Idle seconds are not in ``busy_s``: a burst of work after a quiet minute reads as the burst's speed."""
    quiet_then_busy = LiveCapacity(_warm_up(10.0))
    busy = LiveCapacity(_warm_up(10.0))
    quiet_then_busy.observe(WorkWindow(WorkUsage()))
    quiet_then_busy.observe(_saturated(12.0))
    busy.observe(_saturated(12.0))
    assert quiet_then_busy.real_time_streams == busy.real_time_streams > 10.0


def test_work_on_one_of_two_workers_extrapolates_with_the_weight_of_a_loaded_sample() -> None:
    """Half the workers busy is loaded (``LOADED_SHARE``): it weighs as much as every worker busy. Fewer weigh
    less (the next test, on four workers)."""
    half, full = LiveCapacity(_warm_up(6.5)), LiveCapacity(_warm_up(6.5))
    half.observe(_one_worker(13.0))
    full.observe(_saturated(13.0))
    assert half.real_time_streams is not None and full.real_time_streams is not None
    assert 6.5 < half.real_time_streams == pytest.approx(full.real_time_streams)
    for _ in range(60):
        half.observe(_one_worker(13.0))
    assert half.real_time_streams == pytest.approx(13.0, rel=0.01)  # one worker at 6.5x: two would make 13


def test_a_sample_with_fewer_than_half_the_workers_busy_moves_the_estimate_less() -> None:
    def on_four(busy: int) -> LiveCapacity:
        estimate = LiveCapacity(cap.derive(operator_limit=None, engine_limit=None, workers=4, measured=(6.5, 1.0)))
        usage = WorkUsage(busy_thread_s=2.0 * busy, busy_s=2.0, audio_s=13.0 / 4 * busy * 2)
        assert estimate.observe(WorkWindow(usage))
        assert estimate.real_time_streams is not None
        return estimate

    one, two, four = on_four(1), on_four(2), on_four(4)
    assert 6.5 < one.real_time_streams < two.real_time_streams == four.real_time_streams  # type: ignore[operator]


def test_a_warm_up_ten_times_too_low_is_left_behind_within_a_dozen_samples_of_one_stream() -> None:
    """Session 12's loaded VM: the warm-up said 0.66, one stream on one of two workers made 3.2 audio s/s."""
    estimate = LiveCapacity(_warm_up(0.66))
    assert estimate.streams == 1
    for _ in range(12):
        estimate.observe(_one_worker(6.4))
    assert estimate.real_time_streams is not None and estimate.real_time_streams > 5.0
    assert estimate.streams >= 4


def test_a_lone_stream_that_stalls_does_not_lower_the_correction() -> None:
    """At a limit of one stream there is nothing to shed: the stalls are the machine's, not admission's."""
    estimate = LiveCapacity(_warm_up(0.66))
    for _ in range(5):
        assert estimate.observe(WorkWindow(WorkUsage(busy_thread_s=12.0, busy_s=6.0, audio_s=4.0), underruns=1))
    assert (estimate.streams, estimate.correction, estimate.hurt_samples) == (1, 1.0, 5)


def test_it_stays_within_its_bounds() -> None:
    fast = LiveCapacity(_warm_up(400.0))
    for _ in range(60):
        fast.observe(_saturated(1e6))
    assert fast.real_time_streams == cap.MAX_STREAMS
    assert fast.streams == int(cap.MAX_STREAMS * cap.ADMISSION_SHARE)
    slow = LiveCapacity(_warm_up(6.5))
    for _ in range(60):
        slow.observe(WorkWindow(WorkUsage(busy_thread_s=2e4, busy_s=1e4, audio_s=4.0)))
    assert slow.real_time_streams == live.MIN_REAL_TIME_STREAMS
    assert slow.streams == 1  # one stream is always admitted


def test_underruns_and_late_starts_lower_the_limit_and_clean_busy_work_brings_it_back() -> None:
    estimate = LiveCapacity(_warm_up(13.0))
    estimate.observe(_saturated(13.0))
    clean = estimate.streams
    estimate.observe(_saturated(13.0, underruns=2))
    estimate.observe(_saturated(13.0, late=1))
    assert estimate.real_time_streams == pytest.approx(13.0)  # the measurement holds...
    assert estimate.streams < clean  # ...the limit admits fewer
    assert estimate.correction == pytest.approx(live.HURT_FACTOR**2)
    assert estimate.hurt_samples == 2
    for _ in range(100):
        estimate.observe(_saturated(13.0, underruns=5))
    assert estimate.correction == live.MIN_CORRECTION
    for _ in range(100):
        estimate.observe(_saturated(13.0))
    assert (estimate.correction, estimate.streams) == (1.0, clean)


def test_only_work_with_half_the_workers_busy_or_more_undoes_a_correction() -> None:
    """Recovery needs evidence under load: one worker busy of four says nothing about a full server."""
    two = LiveCapacity(_warm_up(13.0))
    four = LiveCapacity(cap.derive(operator_limit=None, engine_limit=None, workers=4, measured=(13.0, 1.0)))
    for estimate in (two, four):
        estimate.observe(_saturated(13.0, underruns=1))
        assert estimate.correction == live.HURT_FACTOR
        estimate.observe(WorkWindow(WorkUsage(busy_thread_s=1.0, busy_s=1.0, audio_s=4.0)))  # one worker busy
    assert two.correction == pytest.approx(live.HURT_FACTOR + live.RECOVERY_STEP)
    assert four.correction == live.HURT_FACTOR


def test_a_hurt_sample_from_a_half_idle_server_neither_lowers_nor_raises_the_limit() -> None:
    """Underruns and late starts with one worker of four busy are not for want of workers (a client that paused,
    a reader that parked its stream, a blip of the VM): only a loaded server's hurt says the limit is too high."""
    four = LiveCapacity(cap.derive(operator_limit=None, engine_limit=None, workers=4, measured=(13.0, 1.0)))
    quiet_but_hurt = WorkWindow(WorkUsage(busy_thread_s=1.0, busy_s=1.0, late_starts=3, audio_s=4.0), underruns=2)
    assert four.observe(quiet_but_hurt)
    assert (four.correction, four.hurt_samples, four.samples) == (1.0, 0, 1)
    half = WorkWindow(WorkUsage(busy_thread_s=2.0, busy_s=1.0, late_starts=1, audio_s=4.0))  # two of four: loaded
    four.observe(half)
    assert (four.correction, four.hurt_samples) == (live.HURT_FACTOR, 1)


def test_an_operator_limit_still_wins_and_fixed_admission_keeps_the_warm_up_limit() -> None:
    operator = LiveCapacity(cap.derive(operator_limit=3, engine_limit=None, workers=WORKERS, measured=(6.5, 1.0)))
    fixed = LiveCapacity(_warm_up(6.5), admission="fixed")
    for estimate in (operator, fixed):
        for _ in range(30):
            estimate.observe(_saturated(13.9))
        assert estimate.real_time_streams == pytest.approx(13.9, rel=0.01)  # still measured, shown
    assert (operator.streams, operator.source) == (3, "operator")
    assert (fixed.streams, fixed.source) == (5, "warm-up")
    assert fixed.to_dict()["admission"] == "fixed"


def test_without_a_warm_up_the_first_sample_sets_the_figure() -> None:
    estimate = LiveCapacity(cap.derive(operator_limit=None, engine_limit=None, workers=WORKERS, measured=None))
    assert (estimate.streams, estimate.source, estimate.real_time_streams) == (cap.DEFAULT_STREAMS, "default", None)
    estimate.observe(_saturated(11.0))
    assert (estimate.real_time_streams, estimate.source) == (11.0, "measured-live")
    assert estimate.streams == int(11.0 * cap.ADMISSION_SHARE)


def test_without_a_warm_up_a_far_extrapolated_sample_is_not_the_first_figure_and_later_ones_are_bounded() -> None:
    """One worker of four busy would be extrapolated fourfold: not enough to set a figure nothing bounds."""
    four = cap.derive(operator_limit=None, engine_limit=None, workers=4, measured=None)
    estimate = LiveCapacity(four)
    one_of_four = WorkWindow(WorkUsage(busy_thread_s=1.0, busy_s=1.0, audio_s=10.0))  # 10 audio s/s on one worker: "40"
    assert not estimate.observe(one_of_four)  # set aside, not held: the next sample is not mixed with it
    assert (estimate.real_time_streams, estimate.samples, estimate.streams) == (None, 0, cap.DEFAULT_STREAMS)
    assert estimate.source == "default"
    loaded = WorkWindow(WorkUsage(busy_thread_s=4.0, busy_s=1.0, audio_s=11.0))  # every worker busy: 11
    assert estimate.observe(loaded)
    assert (estimate.real_time_streams, estimate.samples, estimate.source) == (11.0, 1, "measured-live")
    estimate.observe(WorkWindow(WorkUsage(busy_thread_s=4.0, busy_s=1.0, audio_s=1000.0)))  # an outlier
    assert estimate.real_time_streams is not None
    assert 11.0 < estimate.real_time_streams <= 11.0 * live.MAX_STEP


def test_bad_input_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="admission must be one of live, fixed"):
        LiveCapacity(_warm_up(), admission="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be negative"):
        LiveCapacity(_warm_up()).observe(WorkWindow(WorkUsage(audio_s=-1.0)))
