"""First *audible* audio: the first sample above −40 dBFS, and when a listener would hear it.

A stream's first byte can be silence: cloned voices often start with a few hundred milliseconds of it (vLLM-Omni
users report 125–740 ms, its issues 5048 and 4966), so first byte alone flatters an engine that sends silence
early. Every benchmark reports both, from this one helper.

When is the first audible sample heard? A player starts at the first byte and plays in real time, so it reaches
the sample ``index / sample_rate`` seconds later; if the piece that carries it arrives after that, then. Stalls
before it are not modelled (``playback`` counts those). ``AudibleOnset`` does no I/O: feed it what arrives.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

AUDIBLE_DBFS = -40.0
"""A sample is audible above this level (dB relative to full scale): 0.01 of full scale, 328 in 16-bit PCM."""


def first_audible(samples: npt.NDArray[np.generic], *, threshold_dbfs: float = AUDIBLE_DBFS) -> int | None:
    """Index of the first sample above ``threshold_dbfs``, or None if there is none.

    Args:
        samples: 16-bit integer PCM (full scale 32768) or floats (full scale 1.0), one channel.
        threshold_dbfs: The level a sample must exceed.
    """
    full_scale = 32768.0 if np.issubdtype(samples.dtype, np.integer) else 1.0
    level = full_scale * 10 ** (threshold_dbfs / 20)
    hits = np.flatnonzero(np.abs(samples.astype(np.float32)) > level)
    return int(hits[0]) if hits.size else None


class AudibleOnset:
    """Follows one mono stream piece by piece and finds its first audible sample (no I/O).

    Feed raw 16-bit little-endian PCM with ``feed`` (a sample may straddle two pieces; ``skip_bytes`` drops a
    header such as a WAV's), or sample arrays with ``feed_samples``; times are the caller's clock. Once the
    sample is found, feeding costs nothing.
    """

    def __init__(self, *, skip_bytes: int = 0, threshold_dbfs: float = AUDIBLE_DBFS) -> None:
        self.threshold_dbfs = threshold_dbfs
        self.first_arrival: float | None = None
        """When the first piece (header included) arrived."""
        self.index: int | None = None
        """The first audible sample's position in the stream, in samples."""
        self.arrival: float | None = None
        """When the piece carrying it arrived."""
        self._skip = skip_bytes
        self._carry = b""
        self._seen = 0

    def feed(self, at: float, data: bytes) -> None:
        """A piece of 16-bit PCM that arrived at ``at``."""
        if not data or self.index is not None:
            self._note_arrival(at, data)
            return
        self._note_arrival(at, data)
        if self._skip:
            cut = min(self._skip, len(data))
            data, self._skip = data[cut:], self._skip - cut
        data = self._carry + data
        whole = len(data) - len(data) % 2
        self._carry = data[whole:]
        self._found(at, np.frombuffer(data[:whole], dtype="<i2"))

    def feed_samples(self, at: float, samples: npt.NDArray[np.generic]) -> None:
        """A chunk of samples (floats or 16-bit integers) that arrived at ``at``."""
        self._note_arrival(at, samples)
        if self.index is None:
            self._found(at, samples)

    def heard_at(self, sample_rate: float) -> float | None:
        """When a real-time player started at the first piece reaches the first audible sample (None: silence)."""
        if self.index is None or self.arrival is None or self.first_arrival is None:
            return None
        return max(self.arrival, self.first_arrival + self.index / sample_rate)

    def _note_arrival(self, at: float, piece: bytes | npt.NDArray[np.generic]) -> None:
        if self.first_arrival is None and len(piece):
            self.first_arrival = at

    def _found(self, at: float, samples: npt.NDArray[np.generic]) -> None:
        hit = first_audible(samples, threshold_dbfs=self.threshold_dbfs)
        if hit is not None:
            self.index, self.arrival = self._seen + hit, at
        self._seen += len(samples)
