"""Word marks for Piper: espeak's words, timed by the VITS duration predictor, placed on the words of the text.

VITS predicts how many frames each phoneme id lasts (``w_ceil``, exposed by ``piper_split.find_durations``),
and the decoder turns each frame into ``hop_length`` samples, so a phoneme's samples are known before any
audio is decoded. Piper's ids are ``^ _ p1 _ p2 _ ... pn _ $`` (``piper.phoneme_ids``): each phoneme owns its
ids and the pad after it. espeak separates words by a space phoneme and ends clauses with their
punctuation, so an espeak word is the run of phonemes between spaces, timed from its first to its last
sounding phoneme (the pause of a trailing comma or period is left between words).

espeak's words are not the text's words ("of the" is one, "😀" is two), so ``text.alignment.match_words``
pairs them by size, one espeak sentence at a time against the text words still unclaimed: a sentence takes
text words up to a sentence mark where it can (the last sentence takes the rest). Working per sentence keeps
the cost of the first audio to its own sentence and the work linear in the text. A text word said as
several espeak words spans them; several text words said as one share it by size; a text word said as
nothing (``—``) gets the pause it sits in. No module here runs a model or touches I/O.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from speakwire.text.alignment import (
    WordMark,
    match_words,
    pauses_after,
    spoken_size,
    stops_after,
    word_spans,
)

BOS, EOS, PAD, SPACE = "^", "$", "_", " "
_TERMINATORS = ",.;:!?"
_NOT_PHONEMES = "ˈˌːˑ"  # stress and length marks
_WINDOW = 16
"""Text words beyond three per espeak word a non-final sentence may look at (bounds the search)."""


@dataclass(frozen=True, slots=True)
class PhonemeWord:
    """One espeak word: phonemes ``[first, stop)`` of its sentence."""

    phonemes: str
    first: int
    stop: int

    @property
    def size(self) -> int:
        return sum(1 for char in self.phonemes if char.isalpha() and char not in _NOT_PHONEMES)

    @property
    def pause(self) -> bool:
        return self.phonemes[-1:] in tuple(_TERMINATORS)


def phoneme_words(phonemes: Sequence[str]) -> list[PhonemeWord]:
    """espeak's words in one sentence of phonemes (Piper's list of phoneme strings)."""
    words: list[PhonemeWord] = []
    start = 0
    for index, phoneme in enumerate([*phonemes, SPACE]):
        if phoneme == SPACE:
            if index > start:
                words.append(PhonemeWord("".join(phonemes[start:index]), start, index))
            start = index + 1
    return words


def phoneme_samples(
    phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]], id_samples: Sequence[int]
) -> list[tuple[int, int]] | None:
    """Samples ``(start, end)`` of each phoneme (its ids and the pad after it) within the sentence.

    Returns None when the ids the durations belong to are not the ones ``piper.phoneme_ids`` makes from
    ``phonemes`` (another phonemizer's layout), rather than guess.
    """
    pad = len(id_map.get(PAD, ()))
    cumulative = [0]
    for samples in id_samples:
        cumulative.append(cumulative[-1] + int(samples))
    position = len(id_map.get(BOS, ())) + pad
    spans: list[tuple[int, int]] = []
    for phoneme in phonemes:
        count = len(id_map[phoneme]) + pad if phoneme in id_map else 0  # unknown phonemes are skipped by Piper
        if position + count >= len(cumulative):
            return None
        spans.append((cumulative[position], cumulative[position + count]))
        position += count
    if position + len(id_map.get(EOS, ())) != len(id_samples):
        return None
    return spans


def _sounding_span(word: PhonemeWord, spans: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """From the first to the last phoneme of ``word`` that is not punctuation."""
    sounding = [k for k in range(word.first, word.stop) if word.phonemes[k - word.first] not in _TERMINATORS]
    if not sounding:
        return spans[word.first][0], spans[word.first][0]
    return spans[sounding[0]][0], spans[sounding[-1]][1]


def _max_splits(word: str) -> int:
    """How many espeak words one text word may become: a few, more for symbols and non-Latin letters."""
    spelled = sum(1 for char in word if ord(char) >= 0x250 and (char.isalnum() or unicodedata.category(char)[0] == "S"))
    return min(3 + 3 * spelled, 40)


class PiperWordMarks:
    """Marks for one segment: built from its text and espeak's sentences, timed one sentence at a time."""

    def __init__(self, text: str, sentences: Sequence[Sequence[str]]) -> None:
        self._text = text
        self._spans = word_spans(text)
        words = [text[a:b] for a, b in self._spans]
        self._sizes = [spoken_size(word) for word in words]
        self._pauses = [pauses_after(word) for word in words]
        self._stops = [stops_after(word) for word in words]
        self._splits = [_max_splits(word) for word in words]
        self._sentences = [phoneme_words(phonemes) for phonemes in sentences]
        self._next_sentence = 0
        self._next_word = 0

    def sentence(
        self,
        index: int,
        phonemes: Sequence[str],
        id_map: Mapping[str, Sequence[int]],
        id_samples: Sequence[int] | None,
        offset: int,
        length: int,
    ) -> tuple[WordMark, ...]:
        """Marks of the text words sentence ``index`` says, in segment samples (the sentence starts at ``offset``).

        Sentences must come in order; one that is skipped (cancelled, or without durations) still claims its
        words, unmarked, so the ones after it stay in place.
        """
        while self._next_sentence < index:
            self._claim(self._next_sentence)
        if index != self._next_sentence or index >= len(self._sentences):
            return ()
        first_word = self._next_word
        groups = self._claim(index)
        spans = phoneme_samples(phonemes, id_map, id_samples) if id_samples is not None else None
        if spans is None:
            return ()
        units = self._sentences[index]
        timed: dict[int, tuple[int, int]] = {}
        for t0, t1, u0, u1 in groups:
            if t1 == t0 or u1 == u0:
                continue
            start, end = _sounding_span(units[u0], spans)[0], _sounding_span(units[u1 - 1], spans)[1]
            if t1 - t0 == 1:
                timed[first_word + t0] = (start, end)
                continue
            # Several text words said as one: shared by size. A word of no size ("—" after "Hello") is left
            # to the pause it sits in, like a word said as nothing.
            sized = [word for word in range(first_word + t0, first_word + t1) if self._sizes[word] > 0]
            total = sum(self._sizes[word] for word in sized)
            at = float(start)
            for word in sized:
                step = (end - start) * self._sizes[word] / total
                timed[word] = (round(at), round(at + step))
                at += step
        return self._marks(first_word, self._next_word, timed, offset, length)

    def _claim(self, index: int) -> list[tuple[int, int, int, int]]:
        """Match sentence ``index`` against the unclaimed words; move past the ones it takes."""
        units = self._sentences[index]
        first = self._next_word
        last_sentence = index == len(self._sentences) - 1
        stop = len(self._spans) if last_sentence else min(len(self._spans), first + 3 * len(units) + _WINDOW)
        groups = match_words(
            self._sizes[first:stop], self._pauses[first:stop],
            [unit.size for unit in units], [unit.pause for unit in units],
            text_stops=None if last_sentence else self._stops[first:stop], max_splits=self._splits[first:stop],
        )  # fmt: skip
        self._next_word = first + (max((group[1] for group in groups), default=0))
        self._next_sentence = index + 1
        return groups

    def _marks(
        self, first: int, stop: int, timed: dict[int, tuple[int, int]], offset: int, length: int
    ) -> tuple[WordMark, ...]:
        """One mark per word in ``[first, stop)``: timed words as timed, the others in the pause they sit in."""
        latest_start = max(length - 1, 0)
        marks: list[WordMark] = []
        previous_end = 0
        k = first
        while k < stop:
            if k in timed:
                start, end = timed[k]
                start = min(max(start, previous_end), latest_start)
                end = min(max(end, start), length)
                marks.append(self._mark(k, offset + start, offset + end))
                previous_end = end
                k += 1
                continue
            run_end = k
            while run_end < stop and run_end not in timed:
                run_end += 1
            gap_end = timed[run_end][0] if run_end < stop else length
            gap_start = min(previous_end, latest_start)
            gap_end = min(max(gap_end, gap_start), length)
            chars = [self._spans[w][1] - self._spans[w][0] for w in range(k, run_end)]
            at = float(gap_start)
            for w, count in zip(range(k, run_end), chars, strict=True):
                step = (gap_end - gap_start) * count / sum(chars)
                start = min(round(at), latest_start)
                marks.append(self._mark(w, offset + start, offset + max(start, round(at + step))))
                at += step
            previous_end = gap_end
            k = run_end
        return tuple(marks)

    def _mark(self, word: int, start: int, end: int) -> WordMark:
        char_start, char_end = self._spans[word]
        return WordMark(char_start, char_end, start, end)
