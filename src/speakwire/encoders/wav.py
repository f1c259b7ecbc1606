"""WAV (RIFF, PCM s16le mono) whose header is written exactly once, with or without a known length.

Streaming: the 44-byte header goes first with both size fields set to ``0xFFFFFFFF`` — the convention
players, browsers and FFmpeg read as "length unknown, play to the end" — then raw samples. A header per
chunk plays only the first sentence (Kokoro #57) and a trailer after the data clicks (Kokoro #463), so
there is neither. Not streaming: the samples are kept and ``finish()`` returns the whole file with its
real sizes, as tools that trust the header (``soundfile``, Python's ``wave``) require.
"""

from __future__ import annotations

import struct

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes

UNKNOWN_SIZE = 0xFFFFFFFF
HEADER_SIZE = 44


def wav_header(sample_rate: int, data_size: int) -> bytes:
    """The 44-byte canonical RIFF/WAVE header for 16-bit mono PCM.

    Args:
        sample_rate: Samples per second.
        data_size: Bytes of sample data that follow, or ``UNKNOWN_SIZE`` for a stream.
    """
    riff_size = UNKNOWN_SIZE if data_size == UNKNOWN_SIZE else min(data_size + HEADER_SIZE - 8, UNKNOWN_SIZE)
    channels, bits = 1, 16
    block_align = channels * bits // 8
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,  # size of the fmt chunk that follows
        1,  # WAVE_FORMAT_PCM
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        bits,
        b"data",
        min(data_size, UNKNOWN_SIZE),
    )


class WavEncoder:
    """16-bit mono WAV; see the module docstring for what ``streaming`` changes."""

    format = "wav"
    content_type = "audio/wav"

    def __init__(self, sample_rate: int, *, streaming: bool) -> None:
        self.sample_rate = sample_rate
        self.streaming = streaming
        self._held: list[bytes] = []
        self._finished = False

    def header(self) -> bytes:
        return wav_header(self.sample_rate, UNKNOWN_SIZE) if self.streaming else b""

    def encode(self, samples: Float32Array) -> bytes:
        if self._finished:
            raise RuntimeError("WavEncoder.encode() after finish()")
        data = float_to_int16_bytes(samples)
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
        return wav_header(self.sample_rate, len(data)) + data
