"""WAV (RIFF, mono, 16-bit PCM or 32-bit float) whose header is written exactly once, with or without a length.

Streaming: the header goes first with its size fields set to ``0xFFFFFFFF`` — the convention players,
browsers and FFmpeg read as "length unknown, play to the end" — then raw samples. A header per chunk plays
only the first sentence (Kokoro #57) and a trailer after the data clicks (Kokoro #463), so there is neither.
Not streaming: the samples are kept and ``finish()`` returns the whole file with its real sizes, as tools
that trust the header (``soundfile``, Python's ``wave``) require.

Two sample formats: ``s16le`` is the 44-byte canonical ``WAVE_FORMAT_PCM`` header. ``f32le`` (Cartesia's
``pcm_f32le`` in a WAV container) is ``WAVE_FORMAT_IEEE_FLOAT`` (format tag 3) with the ``cbSize`` field and
the ``fact`` chunk the RIFF spec asks of non-PCM formats, as FFmpeg writes it: 58 bytes.
"""

from __future__ import annotations

import struct
from typing import Literal

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes
from speakwire.encoders.pcm import float32_le_bytes

WavSampleFormat = Literal["s16le", "f32le"]

UNKNOWN_SIZE = 0xFFFFFFFF
HEADER_SIZE = 44
"""RIFF (12) + fmt chunk (8 + 16) + data chunk header (8): the 16-bit PCM header."""
FLOAT_HEADER_SIZE = 58
"""RIFF (12) + fmt chunk with cbSize (8 + 18) + fact chunk (8 + 4) + data chunk header (8): the float header."""
WAVE_FORMAT_PCM = 1
WAVE_FORMAT_IEEE_FLOAT = 3


def wav_header(sample_rate: int, data_size: int, sample_format: WavSampleFormat = "s16le") -> bytes:
    """The RIFF/WAVE header of a mono file: 44 bytes for ``s16le``, 58 for ``f32le``.

    Args:
        sample_rate: Samples per second.
        data_size: Bytes of sample data that follow, or ``UNKNOWN_SIZE`` for a stream.
        sample_format: 16-bit PCM or 32-bit IEEE float samples.
    """
    is_float = sample_format == "f32le"
    header_size = FLOAT_HEADER_SIZE if is_float else HEADER_SIZE
    unknown = data_size == UNKNOWN_SIZE
    riff_size = UNKNOWN_SIZE if unknown else min(data_size + header_size - 8, UNKNOWN_SIZE)
    channels, bits = 1, 32 if is_float else 16
    block_align = channels * bits // 8
    fmt_fields = struct.pack(
        "<HHIIHH",
        WAVE_FORMAT_IEEE_FLOAT if is_float else WAVE_FORMAT_PCM,
        channels,
        sample_rate,
        sample_rate * block_align,  # bytes per second
        block_align,
        bits,
    )
    if is_float:
        frames = UNKNOWN_SIZE if unknown else min(data_size // block_align, UNKNOWN_SIZE)
        fmt_chunk = struct.pack("<4sI", b"fmt ", 18) + fmt_fields + struct.pack("<H", 0)  # cbSize: no extension
        fmt_chunk += struct.pack("<4sII", b"fact", 4, frames)
    else:
        fmt_chunk = struct.pack("<4sI", b"fmt ", 16) + fmt_fields
    return (
        struct.pack("<4sI4s", b"RIFF", riff_size, b"WAVE")
        + fmt_chunk
        + struct.pack("<4sI", b"data", min(data_size, UNKNOWN_SIZE))
    )


class WavEncoder:
    """Mono WAV of 16-bit or (``sample_format="f32le"``, format ``wav_f32le``) 32-bit float samples.

    See the module docstring for what ``streaming`` changes. Float samples are clipped to [-1, 1], so a float
    stream holds the same signal as the 16-bit one (``float_to_int16_bytes`` clips too).
    """

    content_type = "audio/wav"

    def __init__(self, sample_rate: int, *, streaming: bool, sample_format: WavSampleFormat = "s16le") -> None:
        self.format = "wav_f32le" if sample_format == "f32le" else "wav"
        self.sample_rate = sample_rate
        self.streaming = streaming
        self.sample_format: WavSampleFormat = sample_format
        self._to_bytes = float32_le_bytes if sample_format == "f32le" else float_to_int16_bytes
        self._held: list[bytes] = []
        self._finished = False

    def header(self) -> bytes:
        return wav_header(self.sample_rate, UNKNOWN_SIZE, self.sample_format) if self.streaming else b""

    def encode(self, samples: Float32Array) -> bytes:
        if self._finished:
            raise RuntimeError("WavEncoder.encode() after finish()")
        data = self._to_bytes(samples)
        if self.streaming:
            return data
        self._held.append(data)
        return b""

    def finish(self) -> bytes:
        if self._finished:
            raise RuntimeError("WavEncoder.finish() called twice")
        self._finished = True
        if self.streaming:
            return b""
        data = b"".join(self._held)
        self._held.clear()
        return wav_header(self.sample_rate, len(data), self.sample_format) + data
