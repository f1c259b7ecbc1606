"""Raw PCM, mono with no header: signed 16-bit little-endian, or 32-bit float for APIs whose wire names it.

``pcm`` (s16le) is what OpenAI's ``pcm`` and agent frameworks expect; LiveKit and Pipecat hard-code 24 kHz for
it, so the rate is the caller's policy (see ``registry``), not ours. ``pcm_f32le`` is Cartesia's (its SDK's
default output): float samples clipped to [-1, 1], so a float stream holds the same signal as the 16-bit one
(``float_to_int16_bytes`` clips too).
"""

from __future__ import annotations

import numpy as np

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes


def float32_le_bytes(samples: Float32Array) -> bytes:
    """Mono float32 samples as little-endian bytes, clipped to [-1, 1]."""
    return np.clip(samples, -1.0, 1.0).astype("<f4").tobytes()


class PcmEncoder:
    """s16le mono samples, each ``encode()`` returning exactly its own samples; stateless."""

    format = "pcm"
    content_type = "audio/pcm"

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    def header(self) -> bytes:
        return b""

    def encode(self, samples: Float32Array) -> bytes:
        return float_to_int16_bytes(samples)

    def finish(self) -> bytes:
        return b""


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
