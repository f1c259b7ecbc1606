"""First audible audio (``speakwire.bench.audible``): the first sample above −40 dBFS, and when it is heard."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from speakwire.bench.audible import AudibleOnset, first_audible
from speakwire.bench.loadgen import WavAudibleOnset

RATE = 24_000


def pcm(samples: list[int]) -> bytes:
    return np.asarray(samples, dtype="<i2").tobytes()


def test_the_threshold_is_minus_40_dbfs_in_integer_and_float_samples() -> None:
    # -40 dBFS is 0.01 of full scale: 327.68 in 16-bit PCM.
    assert first_audible(np.array([0, 327, -327, 328], dtype=np.int16)) == 3
    assert first_audible(np.array([0, -328], dtype=np.int16)) == 1
    assert first_audible(np.array([0.0, 0.0099, -0.0101], dtype=np.float32)) == 2
    assert first_audible(np.zeros(100, dtype=np.float32)) is None
    assert first_audible(np.array([-32768], dtype=np.int16)) == 0  # the one sample whose abs overflows int16


def test_leading_silence_moves_the_audible_sample_past_the_first_byte() -> None:
    onset = AudibleOnset()
    onset.feed(1.0, pcm([0] * 2400))  # 100 ms of silence arrives first
    onset.feed(1.05, pcm([10] * 2400 + [1000]))  # 100 ms more below the threshold, then a loud sample
    assert onset.first_arrival == 1.0 and onset.arrival == 1.05 and onset.index == 4800
    # The player started at 1.0 reaches sample 4800 at 1.2, after the piece carrying it arrived.
    assert onset.heard_at(RATE) == pytest.approx(1.2)


def test_a_late_piece_is_heard_when_it_arrives() -> None:
    onset = AudibleOnset()
    onset.feed(1.0, pcm([0] * 240))  # 10 ms of silence, then nothing for half a second
    onset.feed(1.5, pcm([5000]))
    assert onset.heard_at(RATE) == 1.5


def test_a_sample_split_across_two_pieces_is_read_whole() -> None:
    loud = pcm([0, 0, 20_000])
    onset = AudibleOnset()
    onset.feed(0.0, loud[:5])  # the loud sample's low byte only
    assert onset.index is None
    onset.feed(0.1, loud[5:])
    assert (onset.index, onset.arrival) == (2, 0.1)


def test_silence_has_no_audible_sample_and_feeding_after_the_onset_changes_nothing() -> None:
    silent = AudibleOnset()
    silent.feed(0.0, pcm([0] * 100))
    assert silent.heard_at(RATE) is None
    onset = AudibleOnset()
    onset.feed_samples(0.0, np.array([0.0, 0.5], dtype=np.float32))
    onset.feed_samples(0.2, np.array([0.9], dtype=np.float32))
    assert (onset.index, onset.arrival) == (1, 0.0)


def test_a_wav_body_is_read_after_its_header() -> None:
    # A header's bytes read as samples are loud ("RIFF" is 0x4952 0x4646): they must not count.
    header = (
        b"RIFF"
        + struct.pack("<I", 36 + 8)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, RATE, 2 * RATE, 2, 16)
    )
    header += b"data" + struct.pack("<I", 8)
    body = header + pcm([0, 0, 0, 700])
    onset = WavAudibleOnset()
    onset.feed(0.0, body[:20])  # the header arrives in two pieces
    onset.feed(0.5, body[20:])
    assert (onset.first_arrival, onset.index, onset.arrival) == (0.0, 3, 0.5)
