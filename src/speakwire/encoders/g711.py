"""G.711 µ-law and A-law, raw bytes with no container, as telephony APIs and SIP/PSTN bridges expect.

One byte per sample and no state between samples, so every chunk is encoded on its own and any prefix of the
stream is playable. The mapping is the ITU-T reference (G.191 Software Tools Library, ``g711.c``:
``ulaw_compress`` / ``alaw_compress``), ported line for line below and evaluated once into a 64 KiB table per
law. FFmpeg's ``pcm_mulaw``/``pcm_alaw`` encoders are *not* used: they pick the nearest reconstruction level
rather than the G.711 decision interval, which differs just above each segment boundary (where the step
doubles) and on negative decision values — 964 of the 65,536 16-bit inputs per law, each one code away.
Decoding is the same table either way, which the tests check with FFmpeg's decoders.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes


def ulaw_code(sample: int) -> int:
    """The µ-law byte for one signed 16-bit sample (G.191 ``ulaw_compress``)."""
    # Negative values use the one's complement, which makes the law exactly odd-symmetric:
    # code(~x) == code(x) ^ 0x80.
    magnitude = ((~sample if sample < 0 else sample) >> 2) + 33  # 14-bit magnitude plus the µ-law bias
    magnitude = min(magnitude, 0x1FFF)
    segment = (magnitude >> 6).bit_length() + 1
    code = ((8 - segment) << 4) | (0xF - ((magnitude >> segment) & 0xF))
    return code | 0x80 if sample >= 0 else code


def alaw_code(sample: int) -> int:
    """The A-law byte for one signed 16-bit sample (G.191 ``alaw_compress``)."""
    magnitude = (~sample if sample < 0 else sample) >> 4  # 0 <= magnitude < 2048
    if magnitude > 15:
        exponent = 1
        while magnitude > 16 + 15:
            magnitude >>= 1
            exponent += 1
        magnitude = magnitude - 16 + (exponent << 4)
    if sample >= 0:
        magnitude |= 0x80
    return magnitude ^ 0x55  # even bits inverted, as G.711 transmits A-law


def _table(code: Callable[[int], int]) -> npt.NDArray[np.uint8]:
    """Codes for every 16-bit input, indexed by ``sample + 32768``."""
    return np.array([code(sample) for sample in range(-32768, 32768)], dtype=np.uint8)


# Built at import (~40 ms for both) rather than on first use, where it would delay a call's first audio.
_TABLES = {"ulaw": _table(ulaw_code), "alaw": _table(alaw_code)}


def encode_g711(samples: Float32Array, law: str) -> bytes:
    """Encode float32 samples (clipped to [-1, 1], rounded to 16 bits) as ``law`` ("ulaw" or "alaw") bytes."""
    pcm = np.frombuffer(float_to_int16_bytes(samples), dtype="<i2")
    return bytes(_TABLES[law][pcm.astype(np.int32) + 32768])


class _G711Encoder:
    format: str
    content_type: str

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    def header(self) -> bytes:
        return b""

    def encode(self, samples: Float32Array) -> bytes:
        return encode_g711(samples, self.format)

    def finish(self) -> bytes:
        return b""


class MulawEncoder(_G711Encoder):
    """Raw G.711 µ-law; ``audio/basic`` is its registered type (RFC 2046, 8 kHz mono µ-law)."""

    format = "ulaw"
    content_type = "audio/basic"


class AlawEncoder(_G711Encoder):
    """Raw G.711 A-law; no type is registered for raw A-law, ``audio/x-alaw-basic`` is the usual one."""

    format = "alaw"
    content_type = "audio/x-alaw-basic"
