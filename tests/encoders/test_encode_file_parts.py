"""encode_file from a stream's parts makes the bytes of the joined samples, in every format."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from speakwire.encoders.registry import AUDIO_FORMATS, default_sample_rate, encode_file

PARTS = (137, 4096, 1, 999, 2000, 3, 480, 6000)


def _comparable(fmt: str, data: bytes) -> bytes:
    """The bytes, or for Opus the decoded audio: each Ogg stream gets a random serial number."""
    if fmt != "opus":
        return data
    with av.open(io.BytesIO(data)) as container:
        return b"".join(frame.to_ndarray().tobytes() for frame in container.decode(audio=0))


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_parts_encode_to_the_bytes_of_the_joined_samples(fmt: str) -> None:
    rate = default_sample_rate(fmt, None, 24_000)
    rng = np.random.default_rng(7)
    samples = (0.3 * np.sin(np.arange(sum(PARTS)) * 0.05) + 0.01 * rng.standard_normal(sum(PARTS))).astype(np.float32)
    parts = np.split(samples, np.cumsum(PARTS)[:-1])
    assert _comparable(fmt, encode_file(fmt, rate, parts)) == _comparable(fmt, encode_file(fmt, rate, samples))


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_no_parts_make_the_file_of_no_samples(fmt: str) -> None:
    rate = default_sample_rate(fmt, None, 24_000)
    empty = np.zeros(0, dtype=np.float32)
    assert _comparable(fmt, encode_file(fmt, rate, [])) == _comparable(fmt, encode_file(fmt, rate, empty))
