"""StreamResampler: chunking never changes the output, and nothing is lost at the end."""

from __future__ import annotations

import numpy as np
import pytest

from speakwire.audio.chunk import Float32Array
from speakwire.audio.resample import StreamResampler

RATE_PAIRS = [(22050, 24000), (24000, 8000), (22050, 48000), (24000, 16000), (16000, 44100)]
UNEVEN_CHUNKS = (137, 4096, 1, 999, 2000, 3, 480)


def speech_like(sample_rate: int, seconds: float = 1.3) -> Float32Array:
    t = np.arange(round(sample_rate * seconds)) / sample_rate
    noise = np.random.default_rng(7).standard_normal(len(t))
    return (0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * noise).astype(np.float32)


def resample_in_chunks(resampler: StreamResampler, samples: Float32Array) -> Float32Array:
    out, start, i = [], 0, 0
    while start < len(samples):
        size = UNEVEN_CHUNKS[i % len(UNEVEN_CHUNKS)]
        out.append(resampler.process(samples[start : start + size]))
        start, i = start + size, i + 1
    out.append(resampler.flush())
    return np.concatenate(out)


def resample_whole(in_rate: int, out_rate: int, samples: Float32Array) -> Float32Array:
    resampler = StreamResampler(in_rate, out_rate)
    return np.concatenate([resampler.process(samples), resampler.flush()])


@pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
def test_chunked_resampling_equals_resampling_in_one_call(in_rate: int, out_rate: int) -> None:
    samples = speech_like(in_rate)
    chunked = resample_in_chunks(StreamResampler(in_rate, out_rate), samples)
    np.testing.assert_allclose(chunked, resample_whole(in_rate, out_rate, samples), atol=1e-6)


@pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
def test_flush_returns_the_tail_so_the_length_scales_with_the_rate(in_rate: int, out_rate: int) -> None:
    samples = speech_like(in_rate)
    out = resample_in_chunks(StreamResampler(in_rate, out_rate), samples)
    assert out.dtype == np.float32
    assert abs(len(out) - round(len(samples) * out_rate / in_rate)) <= 1


@pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
def test_resampling_keeps_a_tone_at_its_frequency_and_level(in_rate: int, out_rate: int) -> None:
    t = np.arange(in_rate) / in_rate
    out = resample_whole(in_rate, out_rate, (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))
    expected = 0.5 * np.sin(2 * np.pi * 440 * np.arange(len(out)) / out_rate)
    middle = slice(len(out) // 10, -len(out) // 10)  # away from the filter's start and end transients
    assert np.max(np.abs(out[middle] - expected[middle])) < 1e-3


def test_the_end_of_the_signal_is_not_lost() -> None:
    samples = np.zeros(22050, dtype=np.float32)
    samples[-200:] = 0.5  # a burst in the last ~9 ms, still in the filter when the input ends
    out = resample_in_chunks(StreamResampler(22050, 24000), samples)
    assert np.max(np.abs(out[-250:])) > 0.4


def test_the_resampler_starts_a_fresh_stream_after_flush() -> None:
    resampler = StreamResampler(22050, 24000)
    first = resample_in_chunks(resampler, speech_like(22050))
    second = resample_in_chunks(resampler, speech_like(22050))
    np.testing.assert_array_equal(first, second)


def test_equal_rates_pass_samples_through_without_copy_or_delay() -> None:
    resampler = StreamResampler(24000, 24000)
    samples = speech_like(24000)
    assert resampler.passthrough
    assert resampler.process(samples) is samples
    assert len(resampler.flush()) == 0


def test_a_nonpositive_rate_is_refused() -> None:
    with pytest.raises(ValueError):
        StreamResampler(0, 24000)
