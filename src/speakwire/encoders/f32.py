"""32-bit float little-endian PCM, raw or in WAV, for APIs whose wire names a float sample encoding.

Cartesia's ``pcm_f32le`` (its SDK's default output) is the first user: float samples in [-1, 1], mono, no
header. The WAV variant is ``WAVE_FORMAT_IEEE_FLOAT`` (format tag 3) with the ``cbSize`` field and the
``fact`` chunk the RIFF spec asks of non-PCM formats, as FFmpeg writes it; streamed, its sizes are
``0xFFFFFFFF`` ("play to the end"), like ``wav.py``. Samples are clipped to [-1, 1] so a float stream
holds the same signal as the 16-bit one (``float_to_int16_bytes`` clips too).
"""

from __future__ import annotations

import struct

import numpy as np

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.wav import UNKNOWN_SIZE

WAVE_FORMAT_IEEE_FLOAT = 3
FLOAT_WAV_HEADER_SIZE = 58
"""RIFF (12) + fmt chunk with cbSize (8 + 18) + fact chunk (8 + 4) + data chunk header (8)."""


def float32_le_bytes(samples: Float32Array) -> bytes:
    """Mono float32 samples as little-endian bytes, clipped to [-1, 1]."""
    return np.clip(samples, -1.0, 1.0).astype("<f4").tobytes()


def float_wav_header(sample_rate: int, data_size: int) -> bytes:
    """The 58-byte header of a mono 32-bit float WAV; ``data_size`` may be ``UNKNOWN_SIZE`` for a stream."""
    unknown = data_size == UNKNOWN_SIZE
    riff_size = UNKNOWN_SIZE if unknown else min(data_size + FLOAT_WAV_HEADER_SIZE - 8, UNKNOWN_SIZE)
    frames = UNKNOWN_SIZE if unknown else data_size // 4
    return struct.pack(
        "<4sI4s4sIHHIIHHH4sII4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        18,  # size of the fmt chunk that follows, cbSize included
        WAVE_FORMAT_IEEE_FLOAT,
        1,  # channels
        sample_rate,
        sample_rate * 4,  # bytes per second
        4,  # block align
        32,  # bits per sample
        0,  # cbSize: no extension
        b"fact",
        4,
        min(frames, UNKNOWN_SIZE),
        b"data",
        min(data_size, UNKNOWN_SIZE),
    )


class Float32PcmEncoder:
    """Raw f32le mono samples, each ``encode()`` returning exactly its own samples; stateless."""

    format = "pcm_f32le"
    content_type = "application/octet-stream"
    """No media type names raw float PCM; ``audio/pcm`` would be read as 16-bit by OpenAI-style clients."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    def header(self) -> bytes:
        return b""

    def encode(self, samples: Float32Array) -> bytes:
        return float32_le_bytes(samples)

    def finish(self) -> bytes:
        return b""


class Float32WavEncoder:
    """Mono 32-bit float WAV; streamed with an unknown-length header, else whole with real sizes."""

    format = "wav_f32le"
    content_type = "audio/wav"

    def __init__(self, sample_rate: int, *, streaming: bool) -> None:
        self.sample_rate = sample_rate
        self.streaming = streaming
        self._held: list[bytes] = []
        self._finished = False

    def header(self) -> bytes:
        return float_wav_header(self.sample_rate, UNKNOWN_SIZE) if self.streaming else b""

    def encode(self, samples: Float32Array) -> bytes:
        if self._finished:
            raise RuntimeError("Float32WavEncoder.encode() after finish()")
        data = float32_le_bytes(samples)
        if self.streaming:
            return data
        self._held.append(data)
        return b""

    def finish(self) -> bytes:
        if self._finished:
            raise RuntimeError("Float32WavEncoder.finish() called twice")
        self._finished = True
        if self.streaming:
            return b""
        data = b"".join(self._held)
        self._held.clear()
        return float_wav_header(self.sample_rate, len(data)) + data
