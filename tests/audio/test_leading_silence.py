"""Leading silence is cut before the first audible sample, keeping the onset; nothing else changes."""

from __future__ import annotations

import numpy as np
import pytest

from speakwire.audio.chunk import float_to_int16_bytes, s16le_of_suffix
from speakwire.audio.leading_silence import MAX_TRIM_S, ONSET_S, THRESHOLD, LeadingSilenceTrimmer, audible_from

RATE = 24_000
ONSET = round(ONSET_S * RATE)


def loud(n: int) -> np.ndarray:
    return np.full(n, 0.5, dtype=np.float32)


def quiet(n: int) -> np.ndarray:
    return np.full(n, THRESHOLD / 2, dtype=np.float32)


def feed(trimmer: LeadingSilenceTrimmer, chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([trimmer.trim(chunk) for chunk in chunks])


def test_silence_before_the_first_audible_sample_is_cut_keeping_the_onset() -> None:
    trimmer = LeadingSilenceTrimmer(RATE)
    audio = np.concatenate([quiet(4800), loud(2400)])
    out = feed(trimmer, [audio])
    assert trimmer.trimmed == 4800 - ONSET
    assert np.array_equal(out, audio[4800 - ONSET :])


def test_a_silence_spread_over_chunks_is_cut_and_the_onset_comes_from_the_held_chunk() -> None:
    audio = np.concatenate([quiet(3000), quiet(3000), quiet(50), loud(1000), quiet(500), loud(100)])
    chunks = [audio[:3000], audio[3000:6000], audio[6000:6100], audio[6100:]]
    trimmer = LeadingSilenceTrimmer(RATE)
    out = feed(trimmer, chunks)
    first_loud = 6050
    assert trimmer.trimmed == first_loud - ONSET
    assert np.array_equal(out, audio[first_loud - ONSET :])  # the rest, silences inside included, is untouched


@pytest.mark.parametrize("cuts", [[], [3000, 6000, 6100], [6040, 6049, 6050], [1, 6051], [200, 400, 30_000]])
def test_a_worker_found_audible_sample_trims_exactly_as_the_trimmers_own_scan(cuts: list[int]) -> None:
    """The utterance's workers look for the first audible sample (``AudioReady.audible_from``) so the loop only
    cuts: fed the same chunks, the hinted trimmer sends the same samples and cuts the same count, held
    samples joined included."""
    audio = np.concatenate([quiet(6050), loud(1000), quiet(500), loud(100), quiet(30_000)])
    chunks = np.split(audio, cuts)
    own, hinted = LeadingSilenceTrimmer(RATE), LeadingSilenceTrimmer(RATE)
    scanned = feed(own, chunks)
    told = np.concatenate([hinted.trim(chunk, audible_from(chunk)) for chunk in chunks])
    assert np.array_equal(told, scanned)
    assert hinted.trimmed == own.trimmed == 6050 - ONSET
    assert audible_from(quiet(10)) == 10


def test_audio_that_starts_loud_passes_whole() -> None:
    trimmer = LeadingSilenceTrimmer(RATE)
    audio = np.concatenate([loud(100), quiet(5000), loud(100)])
    assert np.array_equal(feed(trimmer, [audio, audio]), np.concatenate([audio, audio]))
    assert trimmer.trimmed == 0


def test_trimming_stops_after_its_budget_whatever_comes() -> None:
    budget = round(MAX_TRIM_S * RATE)
    audio = np.concatenate([quiet(budget + 2400), loud(10)])
    trimmer = LeadingSilenceTrimmer(RATE)
    out = feed(trimmer, [audio[i : i + 1000] for i in range(0, len(audio), 1000)])
    assert trimmer.trimmed == budget
    assert np.array_equal(out, audio[budget:])


def test_a_disabled_trimmer_passes_everything() -> None:
    trimmer = LeadingSilenceTrimmer(RATE, enabled=False)
    audio = np.concatenate([quiet(4800), loud(10)])
    assert np.array_equal(feed(trimmer, [audio]), audio)
    assert trimmer.trimmed == 0


@pytest.mark.parametrize("negative", [False, True])
def test_the_threshold_is_minus_40_dbfs_in_either_polarity(negative: bool) -> None:
    sign = -1.0 if negative else 1.0
    audio = np.concatenate([np.full(2000, sign * THRESHOLD * 0.99), np.full(10, sign * THRESHOLD * 1.01)])
    trimmer = LeadingSilenceTrimmer(RATE)
    out = feed(trimmer, [audio.astype(np.float32)])
    assert trimmer.trimmed == 2000 - ONSET and len(out) == ONSET + 10


def test_the_workers_pcm_of_a_trimmed_chunk_is_cut_with_it_and_a_joined_one_is_cast_again() -> None:
    """The event loop sends the s16le a worker made with the samples; after the trim it must still be theirs."""
    trimmer = LeadingSilenceTrimmer(RATE)
    chunk = np.concatenate([quiet(4800), loud(2400)]) * np.linspace(0.5, 1.0, 7200, dtype=np.float32)
    out = trimmer.trim(chunk)
    assert 0 < len(out) < len(chunk)
    assert s16le_of_suffix(float_to_int16_bytes(chunk), chunk, out) == float_to_int16_bytes(out)
    later = loud(100)
    assert s16le_of_suffix(float_to_int16_bytes(later), later, trimmer.trim(later)) == float_to_int16_bytes(later)

    held = LeadingSilenceTrimmer(RATE)
    first, second = quiet(3000), np.concatenate([quiet(10), loud(500)])
    assert s16le_of_suffix(float_to_int16_bytes(first), first, held.trim(first)) == b""
    joined = held.trim(second)
    assert len(joined) > len(second)  # the onset held from the first chunk comes first
    assert s16le_of_suffix(float_to_int16_bytes(second), second, joined) is None
    assert s16le_of_suffix(None, second, second) is None
