"""Leading silence: the quiet an utterance starts with, cut before it reaches the listener.

Cloned voices often begin with silence (vLLM-Omni users report 125–740 ms, its issues 5048 and 4966), and
Piper opens each utterance with a few tens of milliseconds of it: the listener waits that long after the
first byte to hear anything. The trimmer drops the samples before the first one above ``THRESHOLD``
(−40 dBFS), keeping ``ONSET_S`` of them so a soft consonant's start is not clipped, and stops trimming
after ``MAX_TRIM_S`` whatever comes (a text that is silence on purpose stays silence). No I/O.
"""

from __future__ import annotations

import numpy as np

from speakwire.audio.chunk import Float32Array

THRESHOLD = 10 ** (-40 / 20)
"""−40 dBFS: the first sample louder than this is where the listener starts to hear speech."""
ONSET_S = 0.015
"""Kept before the first audible sample."""
MAX_TRIM_S = 1.0
"""At most this much is trimmed from one utterance."""
SCAN_BLOCK = 1024
"""Samples compared per step while looking for the first audible one: speech is found in the first few blocks,
so a sentence-long chunk costs a few small comparisons, not one over all of it (on the synthesis worker, or
on the event loop for audio nobody scanned)."""


def first_audible(samples: Float32Array) -> int | None:
    """Index of the first sample louder than ``THRESHOLD``, or None."""
    for start in range(0, len(samples), SCAN_BLOCK):
        loud = np.flatnonzero(np.abs(samples[start : start + SCAN_BLOCK]) > THRESHOLD)
        if len(loud):
            return start + int(loud[0])
    return None


def audible_from(samples: Float32Array) -> int:
    """Index of the first sample louder than ``THRESHOLD``; ``len(samples)`` when none is (``trim``'s hint)."""
    first = first_audible(samples)
    return len(samples) if first is None else first


class LeadingSilenceTrimmer:
    """Feed an utterance's audio in order; ``trim`` returns what to send, ``trimmed`` counts what was dropped."""

    def __init__(self, sample_rate: int, *, enabled: bool = True) -> None:
        self._onset = round(ONSET_S * sample_rate)
        self._budget = round(MAX_TRIM_S * sample_rate)
        self.trimmed = 0
        """Samples dropped so far (a word's time moves back by ``trimmed / sample_rate``)."""
        self.done = not enabled
        """True once audible audio was found (or the budget spent): everything passes from then on."""
        self._held: Float32Array | None = None
        """The last silent samples, up to the onset, kept in case audio follows in the next chunk."""

    def trim(self, samples: Float32Array, audible_from: int | None = None) -> Float32Array:
        """What of ``samples`` to send (the whole of them once trimming is done). ``audible_from``: where
        ``samples``' first audible sample is (``len(samples)``: none is), when the caller already looked."""
        if self.done:
            return samples
        held = self._held if self._held is not None else samples[:0]
        joined = np.concatenate([held, samples]) if len(held) else samples
        if audible_from is None:
            first = first_audible(joined)
        else:  # the held samples are silent (they end a chunk that was), so the first audible is in ``samples``
            first = len(held) + audible_from if audible_from < len(samples) else None
        if first is not None:
            return self._finish(joined, min(max(0, first - self._onset), self._budget - self.trimmed))
        # All silent: drop it, but hold the last onset's worth for a start in the next chunk.
        keep = min(self._onset, len(joined))
        if self.trimmed + len(joined) - keep >= self._budget:
            return self._finish(joined, self._budget - self.trimmed)
        self.trimmed += len(joined) - keep
        self._held = joined[len(joined) - keep :]
        return samples[:0]

    def _finish(self, joined: Float32Array, cut: int) -> Float32Array:
        """Send ``joined`` (held samples and the new ones) from ``cut`` on; trimming is over."""
        self.done = True
        self._held = None
        self.trimmed += cut
        return joined[cut:]
