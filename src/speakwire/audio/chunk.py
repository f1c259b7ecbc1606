"""AudioChunk: a piece of mono float32 PCM that states its own sample rate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from speakwire.text.alignment import WordMark

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """Mono float32 samples in [-1, 1] at ``sample_rate`` Hz."""

    samples: Float32Array
    sample_rate: int
    marks: tuple[WordMark, ...] = ()
    """Engines that can align: words of the segment's text and their samples, counted from the segment's
    first sample (see ``WordMark``); empty for engines that cannot."""

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate

    def to_int16_bytes(self) -> bytes:
        """Signed 16-bit little-endian PCM, clipped rather than wrapped."""
        return float_to_int16_bytes(self.samples)


def float_to_int16_bytes(samples: Float32Array) -> bytes:
    """Convert float32 [-1, 1] to s16le bytes, clipping out-of-range values."""
    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def s16le_of_suffix(s16le: bytes | None, whole: Float32Array, part: Float32Array) -> bytes | None:
    """``s16le`` (``float_to_int16_bytes(whole)``) cut to ``part`` when ``part`` is the end of ``whole``, as the
    leading-silence trim returns unless it joined samples it had held back; else None (the caller casts)."""
    if s16le is None or part is whole:
        return s16le
    if not len(part):
        return b""
    if not (whole.flags.c_contiguous and part.flags.c_contiguous):
        return None  # the address arithmetic below holds for plain runs of samples only
    end = whole.__array_interface__["data"][0] + whole.nbytes
    if len(part) > len(whole) or part.__array_interface__["data"][0] + part.nbytes != end:
        return None
    return s16le[2 * (len(whole) - len(part)) :]
