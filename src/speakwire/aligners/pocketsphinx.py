"""English forced alignment with PocketSphinx (the ``[align]`` extra): CPU only, its own acoustic model and CMUdict.

How a sentence is aligned:

1. The text is normalized the way Piper speaks it (``normalize_english``: "$25" → "twenty-five dollars") and
   each normalized word is cut into dictionary words ("twenty-five" → ``twenty five``; "p.m" → ``p m``).
   Words missing from CMUdict get a pronunciation from ``letter_to_sound``, added to the decoder's dictionary,
   so a made-up name is aligned on its own audio, not dropped. A word with no letters or digits ("—", an
   emoji, another script) has nothing to align: it is timed between its neighbours.
2. The audio is resampled to 16 kHz and decoded in PocketSphinx's alignment mode (``set_align_text``), which
   gives each dictionary word its frames (10 ms), with optional silences between words.
3. The frames become ``WordMark`` s on the normalized text and ``text.alignment.SegmentWords`` maps them back
   to the words of the original text, the same way Piper's marks are mapped, so offsets index the
   caller's text.

Audio that is not the sentence: alignment mode only accepts a path that ends in the text's last word's final
state, and the decoder's beams prune every path through noise or silence (measured: white noise from 0.001
to 0.5 RMS and silence end without a hypothesis). Such a sentence gets no timings. Speech of *other* words
is not caught: forced alignment spreads the given words over it (a confidence test is left for later).

Times: a frame's 25.6 ms window starts every 10 ms, so the boundary PocketSphinx puts at frame ``f`` lies
between the centres of frames ``f - 1`` and ``f``, ``f * 10 + 7.8`` ms (``_BOUNDARY``).

One decoder per aligner, used by one thread at a time (a lock): PocketSphinx's decoder is not thread-safe.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np

from speakwire.aligners.base import checked_input
from speakwire.aligners.letter_to_sound import letter_to_sound
from speakwire.audio.chunk import Float32Array
from speakwire.audio.resample import StreamResampler
from speakwire.errors import MissingExtraError
from speakwire.text.alignment import SegmentWords, WordMark, WordTiming, word_spans
from speakwire.text.normalize import normalize_english

RATE = 16_000
_FRAME = 160
"""Samples per PocketSphinx frame at 16 kHz (100 frames a second)."""
_WINDOW = 410
"""Samples in a frame's analysis window (PocketSphinx's default ``wlen``, 0.025625 s at 16 kHz)."""
_BOUNDARY = (_WINDOW - _FRAME) // 2
"""Samples from a frame's start to the boundary between it and the frame before (see the module docstring)."""
_MIN_SECONDS = 0.1
_TOKEN = re.compile(r"[a-z0-9']+")
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_FILLERS = frozenset({"<s>", "</s>", "<sil>", "[NOISE]", "(NULL)"})


@dataclass(frozen=True, slots=True)
class _Word:
    """A dictionary word to align and the normalized word it belongs to (its character span)."""

    token: str
    char_start: int
    char_end: int


def dictionary_words(normalized: str) -> list[_Word]:
    """The dictionary words PocketSphinx is asked to find in ``normalized``, each tied to its normalized word."""
    words: list[_Word] = []
    for start, end in word_spans(normalized):
        plain = unicodedata.normalize("NFKD", normalized[start:end].lower())
        plain = "".join(char for char in plain if not unicodedata.combining(char)).replace("’", "'")
        for match in _TOKEN.finditer(plain):
            token = match.group().strip("'")
            for piece in re.findall(r"\d|[a-z']+", token):
                # A digit normalization left alone (it reads most numbers first) is said one by one.
                words.append(_Word(_DIGITS[int(piece)] if piece.isdigit() else piece, start, end))
    return words


class PocketSphinxAligner:
    """English word timings from PocketSphinx's forced alignment (see the module docstring)."""

    name = "pocketsphinx"
    languages = frozenset({"english"})

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self._lock = threading.Lock()
        self._known: dict[str, bool] = {}

    @classmethod
    def load(cls) -> PocketSphinxAligner:
        """Load the wheel's US English model and dictionary (about 0.3 s; no download).

        Raises:
            MissingExtraError: ``pocketsphinx`` is not installed.
        """
        try:
            from pocketsphinx import Decoder
        except ImportError as error:
            raise MissingExtraError("align", "pocketsphinx") from error
        return cls(Decoder(samprate=RATE, loglevel="FATAL"))

    def align(self, samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
        """Time the words of ``text`` in ``samples``; empty when the audio cannot be aligned (see ``base``)."""
        samples = checked_input(samples, sample_rate)
        normalized = normalize_english(text)
        words = dictionary_words(normalized)
        if not words or len(samples) < _MIN_SECONDS * sample_rate:
            return []
        resampler = StreamResampler(sample_rate, RATE)
        audio = np.concatenate([resampler.process(samples), resampler.flush()])
        pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        with self._lock:
            frames = self._decode(pcm, [word.token for word in words])
        if frames is None:
            return []
        limit = len(audio)
        marks = [
            WordMark(word.char_start, word.char_end, _sample(first, limit), _sample(last + 1, limit))
            for word, (first, last) in zip(words, frames, strict=True)
        ]
        timings = SegmentWords(text, normalized, offset=0, rate=RATE, start_s=0.0)
        return timings.add(_merge(marks)) + timings.finish()

    def close(self) -> None:
        self._decoder = None

    def _decode(self, pcm: bytes, tokens: list[str]) -> list[tuple[int, int]] | None:
        """First and last frame of each token, or None when the decoder found no good path."""
        decoder = self._decoder
        if decoder is None:
            raise RuntimeError("the aligner is closed")
        for token in set(tokens):
            self._ensure_known(token)
        try:
            decoder.set_align_text(" ".join(tokens))
            decoder.start_utt()
            decoder.process_raw(pcm, full_utt=True)
            decoder.end_utt()
        except RuntimeError:
            return None
        hypothesis = decoder.hyp()
        if hypothesis is None or decoder.n_frames() == 0:
            return None
        found = [
            (segment.start_frame, segment.end_frame)
            for segment in decoder.seg()
            if segment.word not in _FILLERS and not segment.word.startswith("++")
        ]
        return found if len(found) == len(tokens) else None

    def _ensure_known(self, token: str) -> None:
        known = self._known.get(token)
        if known is None:
            assert self._decoder is not None
            known = self._decoder.lookup_word(token) is not None
            if not known:
                phones = letter_to_sound(token)
                if phones:
                    self._decoder.add_word(token, " ".join(phones), True)
                    known = True
            self._known[token] = known


def _sample(frame: int, limit: int) -> int:
    """The sample at the boundary before ``frame``, inside the audio."""
    return min(frame * _FRAME + _BOUNDARY, limit)


def _merge(marks: list[WordMark]) -> list[WordMark]:
    """One mark per normalized word: its dictionary words' first start and last end."""
    merged: list[WordMark] = []
    for mark in marks:
        if merged and merged[-1].char_start == mark.char_start:
            merged[-1] = WordMark(mark.char_start, mark.char_end, merged[-1].start, mark.end)
        else:
            merged.append(mark)
    return merged
