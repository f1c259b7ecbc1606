"""Raw PCM: signed 16-bit little-endian mono with no header, as OpenAI's ``pcm`` and agent frameworks expect.

LiveKit and Pipecat hard-code 24 kHz for it, so the rate is the caller's policy (see ``registry``), not ours.
"""

from __future__ import annotations

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes


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
