"""Stand-in aligners for tests of the wiring around an aligner (``synthesis.aligning``), registered by name.

They are real ``Aligner`` s (the small interface of ``speakwire.aligners.base``), for what a real aligner cannot
do here: PocketSphinx rightly refuses the babble of a random-weight Qwen3 checkpoint, and no real aligner hangs on
cue. Accuracy is ``bench/aligner_accuracy``'s business, on real speech.
"""

from __future__ import annotations

import threading

import numpy as np

from speakwire.aligners.registry import register_aligner
from speakwire.audio.chunk import Float32Array
from speakwire.text.alignment import WordTiming, word_spans


def spread(samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
    """Each word of ``text`` timed by its share of the characters; nothing for silence."""
    if not len(samples) or float(np.max(np.abs(samples))) < 1e-3:
        return []
    spans = word_spans(text)
    total_s, chars = len(samples) / sample_rate, sum(end - start for start, end in spans)
    words, at = [], 0
    for start, end in spans:
        begin_s = total_s * at / chars
        at += end - start
        words.append(WordTiming(text[start:end], start, end, begin_s, total_s * at / chars))
    return words


class SpreadAligner:
    """Times each word of a sentence by its share of the sentence's characters (``spread``)."""

    name = "spread"
    languages = frozenset({"english"})

    def align(self, samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
        return spread(samples, sample_rate, text)

    def close(self) -> None:
        pass


class StallingAligner:
    """``SpreadAligner``, except that a sentence holding ``trigger`` blocks its call until ``release`` is set."""

    name = "stalling"
    languages = frozenset({"english"})

    def __init__(self, trigger: str) -> None:
        self.trigger = trigger
        self.release = threading.Event()
        self.calls: list[str] = []
        """The sentences it was asked to align, in order."""
        self.returned = 0
        self.closed = False

    def align(self, samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
        self.calls.append(text)
        if self.trigger in text:
            self.release.wait()
        self.returned += 1
        return spread(samples, sample_rate, text)

    def close(self) -> None:
        self.closed = True


def register_spread() -> None:
    """Make ``--aligner spread`` load a ``SpreadAligner``."""
    register_aligner("spread", SpreadAligner, SpreadAligner.languages)
