"""The client-side playback simulator and the record/summary arithmetic, on synthetic arrival times."""

from __future__ import annotations

import pytest

from speakwire.bench.loadgen import parse_wav_head, text_pieces
from speakwire.bench.playback import PlaybackSimulator, simulate
from speakwire.bench.results import LevelResult, percentile, record_from_arrivals

# 100 bytes play for one second, so the arithmetic below reads in seconds.
RATE = 100.0


def test_audio_arriving_faster_than_real_time_never_underruns() -> None:
    player = simulate([(0.0, 100), (0.1, 100), (0.2, 100), (2.9, 100)], RATE)
    assert player.underruns == 0
    assert player.stall_s == 0.0
    assert player.audio_s == pytest.approx(4.0)
    assert player.buffer_end == pytest.approx(4.0)


def test_each_arrival_after_the_buffer_ran_dry_is_one_underrun_with_its_stall() -> None:
    player = simulate([(0.0, 100), (0.5, 100), (3.0, 50), (3.5, 100), (5.0, 100)], RATE)
    # buffer ends at 2.0; arrival at 3.0 stalls 1.0 s and playback restarts there (ends 3.5);
    # 3.5 arrives exactly on time (no stall); buffer ends 4.5; 5.0 stalls 0.5 s.
    assert player.underruns == 2
    assert player.stall_s == pytest.approx(1.5)
    assert player.stall_positions_s == pytest.approx([2.0, 3.5])
    assert player.audio_s == pytest.approx(4.5)
    assert player.buffer_end == pytest.approx(6.0)


def test_playback_starts_at_the_first_audio_byte_not_at_time_zero() -> None:
    player = simulate([(10.0, 100), (10.9, 100)], RATE)
    assert player.first_arrival == 10.0
    assert player.underruns == 0


def test_a_jitter_buffer_hides_lateness_up_to_its_length() -> None:
    arrivals = [(0.0, 10), (0.15, 100)]  # 0.1 s of audio, then the next piece 0.05 s after it ran out
    assert simulate(arrivals, RATE).underruns == 1
    buffered = simulate(arrivals, RATE, jitter_s=0.1)  # playback starts at 0.1 and runs dry at 0.2
    assert buffered.underruns == 0
    assert buffered.buffer_end == pytest.approx(1.2)
    late = simulate([(0.0, 10), (0.3, 100)], RATE, jitter_s=0.1)
    assert late.underruns == 1 and late.stall_s == pytest.approx(0.1)


def test_header_bytes_count_for_first_byte_but_add_no_playback_time() -> None:
    player = PlaybackSimulator(RATE, skip_bytes=44)
    player.feed(1.0, 20)  # all header
    assert player.first_arrival == 1.0
    assert player.audio_s == 0.0 and player.buffer_end is None
    player.feed(1.5, 124)  # 24 header bytes + 100 audio bytes
    assert player.audio_s == pytest.approx(1.0)
    assert player.bytes_received == 144
    assert player.underruns == 0


def test_empty_reads_are_ignored_and_a_zero_rate_is_refused() -> None:
    player = simulate([(0.0, 0), (1.0, 100), (1.2, 0)], RATE)
    assert player.first_arrival == 1.0 and player.bytes_received == 100
    with pytest.raises(ValueError):
        PlaybackSimulator(0)


def test_record_times_first_audio_and_total_from_the_send_instant() -> None:
    record = record_from_arrivals(
        target="t", concurrency=2, index=0, text="hello", level_start=100.0, sent_at=101.0, ended_at=110.0,
        arrivals=[(101.25, 100), (104.0, 100)], bytes_per_second=RATE,
    )  # fmt: skip
    assert record.started_at == pytest.approx(1.0)
    assert record.ttfa_s == pytest.approx(0.25)
    assert record.total_s == pytest.approx(3.0)
    assert record.audio_s == pytest.approx(2.0)
    assert record.rtf == pytest.approx(1.5)
    assert record.underruns == 1 and record.stall_s == pytest.approx(1.75)
    assert record.ok


def test_a_stream_with_no_audio_has_no_ttfa_and_is_left_out_of_latency_statistics() -> None:
    failed = record_from_arrivals(
        target="t", concurrency=1, index=0, text="x", level_start=0.0, sent_at=0.0, ended_at=2.0,
        arrivals=[], bytes_per_second=RATE, error="HTTP 429: busy",
    )  # fmt: skip
    good = record_from_arrivals(
        target="t", concurrency=1, index=1, text="x", level_start=0.0, sent_at=0.0, ended_at=1.0,
        arrivals=[(0.5, 100)], bytes_per_second=RATE,
    )  # fmt: skip
    assert failed.ttfa_s is None and failed.total_s == 2.0 and not failed.ok
    summary = LevelResult("t", 1, wall_s=2.0, streams=[failed, good]).summary()
    assert summary["errors"] == 1
    assert summary["ttfa_p50_s"] == pytest.approx(0.5)
    assert summary["throughput"] == pytest.approx(0.5)
    assert summary["first_error"] == "HTTP 429: busy"


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([float(x) for x in range(1, 21)], 95) == pytest.approx(19.05)


def test_text_pieces_join_back_to_the_text() -> None:
    text = "one two three four five six seven"
    pieces = text_pieces(text, 3)
    assert pieces == ["one two three ", "four five six ", "seven"]
    assert "".join(pieces) == text
    assert text_pieces(text, 0) == [text]


def test_wav_head_gives_rate_and_where_audio_starts() -> None:
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(22050)
        wav.writeframes(b"\0\0" * 10)
    assert parse_wav_head(buffer.getvalue()[:64]) == (22050, 44)
    with pytest.raises(ValueError):
        parse_wav_head(b"not a wav file at all")
