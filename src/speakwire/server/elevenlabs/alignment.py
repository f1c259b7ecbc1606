"""ElevenLabs' per-character ``alignment`` from the pipeline's word timings (no I/O).

ElevenLabs times every character of the text, spaces and punctuation included; the pipeline times words
(``AudioReady.words``: the client's words, with offsets into the utterance's text and times from its first
sample). So a word's characters share its span evenly, the whitespace after a word takes the gap until the
next word starts (or until the chunk ends, when the next word is not in this chunk), and characters no word
owns (punctuation standing alone) take the gap before the next word. Every character is placed once, in
order, and times never go backwards, so the chunks' ``chars`` join back to the text.

A chunk carries the characters of the words that start in its audio. On the WebSocket, times are integer
milliseconds relative to the chunk's first sample, as ElevenLabs sends them, and a chunk's last character
lasts until the chunk's end: clients that place chunks by adding up each chunk's last character end
(pipecat's ``calculate_word_times``) then stay in step with the audio. The characters of a word still being
spoken when its chunk ends are placed at that end, so every chunk holds whole words (pipecat counts a word
once a space ends it). HTTP ``with-timestamps`` uses seconds from the start of the audio, as pipecat's HTTP
service reads them (the largest end time is the utterance's length).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from speakwire.text.alignment import WordTiming


@dataclass(frozen=True, slots=True)
class CharTiming:
    char: str
    start_s: float
    end_s: float
    """Seconds from the utterance's first sample."""


class CharacterAligner:
    """Places the characters of one utterance's text, chunk by chunk, as its word timings arrive."""

    def __init__(self) -> None:
        self._text = ""
        self._placed = 0
        """Characters ``text[:placed]`` have been placed."""
        self._last_end_s = 0.0

    @property
    def text(self) -> str:
        return self._text

    def add_text(self, text: str) -> None:
        """Text as the utterance received it (after ``clean_text``: the pipeline's offsets count that text)."""
        self._text += text

    def place(self, words: Sequence[WordTiming], chunk_end_s: float) -> list[CharTiming]:
        """The characters of ``words`` (the words starting in a chunk that ends at ``chunk_end_s``)."""
        placed: list[CharTiming] = []
        for i, word in enumerate(words):
            if word.char_end <= self._placed:
                continue
            start = max(word.char_start, self._placed)
            word_start = max(word.start_s, self._last_end_s)
            word_end = max(word.end_s, word_start)
            placed += _spread(self._text[self._placed : start], self._last_end_s, word_start)
            placed += _spread(self._text[start : word.char_end], word_start, word_end)
            self._placed, self._last_end_s = word.char_end, word_end
            space_end = _whitespace_end(self._text, word.char_end)
            if space_end > word.char_end:
                next_start = words[i + 1].start_s if i + 1 < len(words) else chunk_end_s
                gap_end = max(next_start, word_end)
                placed += _spread(self._text[word.char_end : space_end], word_end, gap_end)
                self._placed, self._last_end_s = space_end, gap_end
        return placed

    def finish(self, end_s: float) -> list[CharTiming]:
        """The characters no word timing reached (trailing punctuation, late whitespace), up to ``end_s``.

        None when the engine timed no word at all: an even spread over the audio would only look like timings.
        """
        if self._placed == 0:
            return []
        rest = _spread(self._text[self._placed :], self._last_end_s, max(end_s, self._last_end_s))
        self._placed = len(self._text)
        return rest


def _spread(text: str, start_s: float, end_s: float) -> list[CharTiming]:
    if not text:
        return []
    step = (end_s - start_s) / len(text)
    return [CharTiming(char, start_s + i * step, start_s + (i + 1) * step) for i, char in enumerate(text)]


def _whitespace_end(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def ws_alignment(chars: Sequence[CharTiming], start_s: float, end_s: float) -> dict[str, Any] | None:
    """The WebSocket ``alignment`` of a chunk spanning ``start_s``–``end_s`` (None when it has no characters)."""
    if not chars:
        return None
    t0 = round(start_s * 1000)
    t1 = max(round(end_s * 1000), t0)
    starts = [min(max(round(c.start_s * 1000), t0), t1) for c in chars]
    ends = [min(max(round(c.end_s * 1000), s), t1) for c, s in zip(chars, starts, strict=True)]
    ends[-1] = t1
    return {
        "chars": [c.char for c in chars],
        "charStartTimesMs": [s - t0 for s in starts],
        "charDurationsMs": [e - s for s, e in zip(starts, ends, strict=True)],
    }


def http_alignment(chars: Sequence[CharTiming]) -> dict[str, Any] | None:
    """The HTTP ``alignment`` (``characters`` and their start/end seconds from the start of the audio)."""
    if not chars:
        return None
    return {
        "characters": [c.char for c in chars],
        "character_start_times_seconds": [round(c.start_s, 3) for c in chars],
        "character_end_times_seconds": [round(c.end_s, 3) for c in chars],
    }
