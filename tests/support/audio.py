"""Decode what the server sent, with PyAV (a decoder we did not write), for assertions."""

from __future__ import annotations

import io

import av
import numpy as np

RAW_FORMATS = {"pcm": "s16le", "ulaw": "mulaw", "alaw": "alaw"}


def decode(data: bytes, fmt: str, sample_rate: int = 24000) -> tuple[np.ndarray, int]:
    """Decode any response format to mono float32 and its rate."""
    if fmt in RAW_FORMATS:
        container = av.open(io.BytesIO(data), format=RAW_FORMATS[fmt],
                            options={"sample_rate": str(sample_rate), "ch_layout": "mono"})  # fmt: skip
    else:
        container = av.open(io.BytesIO(data))
    with container:
        stream = container.streams.audio[0]
        rate = stream.rate or sample_rate
        frames = [frame.to_ndarray().astype(np.float32) for frame in container.decode(stream)]
    if not frames:
        return np.zeros(0, dtype=np.float32), rate
    samples = np.concatenate([f.reshape(f.shape[0], -1)[0] if f.ndim > 1 else f for f in frames])
    if samples.dtype != np.float32 or np.abs(samples).max() > 1.5:
        samples = samples / 32768.0
    return samples.astype(np.float32), rate


def pcm_to_float(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
