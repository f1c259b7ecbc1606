"""Word timings: which words of the client's text the audio speaks, and when.

Agents need them to know what a listener heard before a barge-in, and vendor dialects carry
them (ElevenLabs ``alignment``, Cartesia ``word_timestamps``, vLLM-Omni ``word_timestamps``).

Offsets index the utterance's text as the pipeline received it after hygiene (``clean_text``),
i.e. the client's own characters, not the normalized or phonemized text the engine saw.
Times are seconds from the start of the utterance's audio.

Three layers, none of them doing I/O:

* An engine reports ``WordMark`` s: words of the text *it was given* (normalized text: "five dollars"),
  with the samples that say them. Piper gets them from its duration predictor (``engines/piper_alignment``).
* ``match_words`` pairs the words of a text with the words an engine actually spoke (espeak's phoneme
  words), which differ in number: espeak merges "of the" into one word, says "😀" as "grinning face", and
  says nothing for "—". It is a monotone alignment by spoken size (see its docstring).
* ``SegmentWords`` maps marks on the normalized text back to the words of the original text (``$5,`` →
  "five dollars,"), through a character map of the two texts (``_boundary_maps``), and turns them into
  ``WordTiming`` s on the utterance's clock.

Every step is total: odd text costs precision (in the worst case a word's time is interpolated by
characters between its neighbours), never an exception, and every word of the original text gets a timing.

Precision: Piper's marks are exact to the frame (256 samples, 11.6 ms at 22.05 kHz) for the phonemes VITS
was asked to say; word edges inside an espeak merge ("of the") are split by size. Qwen3 gives no marks: its
only per-frame signal is the talker's text-track position, and it is a lead, not an alignment. The talker
reads one text token per 80 ms frame (12.5 tokens/s, about 9 English words/s) from its first frame (the
prompt consumes one token; measured on the tiny checkpoints: frame k has read k + 1 tokens), while it speaks
about 2.5 words/s, and the position is reported once per decoded chunk (2 to 25 frames, 0.16 to 2 s). So the
read position runs ahead of the speech by about six words per second of audio and only bounds a word's start
from below; the sentence labels of ``synthesis.sentence_labels`` cap it with a reading pace and are early or
late by a word or more. Word timings from that would be estimates, so Qwen3 takes its words from an aligner
run on its finished audio instead (``speakwire.aligners``, ``synthesis.aligning``).
"""

from __future__ import annotations

import bisect
import difflib
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from speakwire.text.widths import is_wide


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One spoken word of the original text and the span of audio that says it."""

    text: str
    """The word as the client wrote it (``"$5,"`` stays ``"$5,"``; punctuation attached)."""
    char_start: int
    char_end: int
    """``text == utterance_text[char_start:char_end]``."""
    start_s: float
    end_s: float
    """Audio time from the utterance's first sample; ``start_s <= end_s``, monotone across words."""


@dataclass(frozen=True, slots=True)
class WordMark:
    """What an engine reports: a word of the text passed to ``synthesize`` and the samples that say it.

    Samples count from the first sample the engine yielded for that text (one segment), at the engine's
    rate. A mark rides on the chunk at or before the one holding its first sample. An engine that marks
    a segment at all marks every whitespace-separated word of its text, in order (a word it does not
    voice, like "—", gets the pause it sits in, possibly zero-length), so the pipeline knows when a
    segment's words are complete.
    """

    char_start: int
    char_end: int
    start: int
    end: int


_WORD = re.compile(r"\S+")
_CLOSERS = "\"'”’)]}»」』）】*"
_PAUSE_MARKS = ",;:.!?…—–-"
_STOP_MARKS = ".!?…"
_LATIN_END = 0x250  # Basic Latin through IPA Extensions: one letter, about one phoneme
LETTER_PHONEMES = 0.8
"""Phonemes per Latin letter in English (``"thanks"``: 6 letters, /θæŋks/: 5)."""


def word_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every whitespace-separated word of ``text``, in order."""
    return [match.span() for match in _WORD.finditer(text)]


def spoken_size(word: str) -> float:
    """About how many phonemes an English voice says for ``word``, before normalization or phonemization.

    Latin letters count ``LETTER_PHONEMES``; a digit about three (espeak reads it as a word); other letters
    (Greek, Cyrillic) four, since an English voice spells their names; a CJK character ten ("chinese
    letter"); a symbol such as an emoji eight (espeak says its name); punctuation nothing.
    """
    size = 0.0
    for char in word:
        if char.isalpha():
            size += LETTER_PHONEMES if ord(char) < _LATIN_END else (10.0 if is_wide(char) else 4.0)
        elif char.isdigit():
            size += 3.0
        elif unicodedata.category(char) in ("So", "Sm", "Sc"):
            size += 8.0
        elif is_wide(char) and char.isalnum():
            size += 10.0
    return size


def ends_with(word: str, marks: str) -> bool:
    """Whether ``word``, without closing quotes or brackets, ends with one of ``marks``."""
    stripped = word.rstrip(_CLOSERS)
    return bool(stripped) and stripped[-1] in marks


def pauses_after(word: str) -> bool:
    """Whether a voice pauses after ``word`` (a clause or sentence mark ends it)."""
    return ends_with(word, _PAUSE_MARKS)


def stops_after(word: str) -> bool:
    """Whether ``word`` may end a sentence."""
    return ends_with(word, _STOP_MARKS)


# ----- matching a text's words with the words a voice spoke ----------------------------------------------

Group = tuple[int, int, int, int]
"""``(text_start, text_end, spoken_start, spoken_end)``: text words ``[text_start, text_end)`` were said as
spoken words ``[spoken_start, spoken_end)``; either side may be empty."""

_MERGE_MAX = 3
_SPLIT_MIN = 3
_STEP_PENALTY = 0.4
_PAUSE_PENALTY = 0.5
_NO_STOP_PENALTY = 1.0
_BAND = 8


@dataclass(frozen=True, slots=True)
class _Side:
    sizes: Sequence[float]
    pauses: Sequence[bool]
    cumulative: list[float]

    @classmethod
    def of(cls, sizes: Sequence[float], pauses: Sequence[bool]) -> _Side:
        cumulative = [0.0]
        for size in sizes:
            cumulative.append(cumulative[-1] + size)
        return cls(sizes, pauses, cumulative)

    def total(self, start: int, end: int) -> float:
        return self.cumulative[end] - self.cumulative[start]


def match_words(
    text_sizes: Sequence[float],
    text_pauses: Sequence[bool],
    spoken_sizes: Sequence[float],
    spoken_pauses: Sequence[bool],
    *,
    text_stops: Sequence[bool] | None = None,
    max_splits: Sequence[int] | None = None,
) -> list[Group]:
    """Pair text words with the words a voice spoke: a monotone alignment, every word on both sides in a group.

    Why an alignment and not a count: espeak's words are not the text's words. It merges function words
    ("of the" → /ʌvðə/, "out of" → /aʊɾəv/), splits others (an emoji is said as its name, "日本語" as three
    words), drops punctuation-only ones ("—"), and may run words together across an ellipsis. Counts alone
    cannot tell where the difference is; sizes can. Each group pairs one text word with 0..k spoken words,
    or 2..3 text words with one spoken word, or skips one spoken word; its cost is the log-ratio of the two
    sides' sizes (``spoken_size`` against phonemes), plus a small price per extra word in a group and for a
    pause on one side only (a clause mark in the text against a terminator in espeak's output). A dynamic
    programme finds the cheapest path inside a band around the diagonal of cumulative size, widened until a
    path exists.

    Args:
        text_sizes, text_pauses: per text word, ``spoken_size`` and ``pauses_after``.
        spoken_sizes, spoken_pauses: per spoken word, its phoneme count and whether a pause mark ends it.
        text_stops: when given, the text side may end early (a sentence of a longer text): the path may stop
            after any text word, preferring one after which ``text_stops`` is true; otherwise every text word
            is used.
        max_splits: per text word, the most spoken words it may take (default 3).

    Returns:
        Groups in order; their text ranges cover ``[0, end)`` and their spoken ranges all spoken words. Never
        raises: with no path at all (cannot happen with the skip moves, but bands are bands), words are paired
        in proportion.
    """
    text = _Side.of(text_sizes, text_pauses)
    spoken = _Side.of(spoken_sizes, spoken_pauses)
    splits = max_splits if max_splits is not None else [_SPLIT_MIN] * len(text_sizes)
    n, m = len(text_sizes), len(spoken_sizes)
    band = _BAND
    while True:
        groups = _match_in_band(text, spoken, splits, text_stops, band)
        if groups is not None:
            return groups
        if band > n + m:
            return _proportional_groups(text, spoken, n)
        band *= 2


def _match_in_band(
    text: _Side, spoken: _Side, splits: Sequence[int], stops: Sequence[bool] | None, band: int
) -> list[Group] | None:
    n, m = len(text.sizes), len(spoken.sizes)
    # Band: spoken index j is near where the spoken words' cumulative size reaches the text's at i. A closed
    # end scales the text's sizes so the diagonal ends at (n, m); an open one trusts them as they are.
    scale = spoken.cumulative[-1] / text.cumulative[-1] if stops is None and text.cumulative[-1] > 0 else 1.0
    low = [0] * (n + 1)
    high = [0] * (n + 1)
    for i in range(n + 1):
        center = bisect.bisect_left(spoken.cumulative, text.cumulative[i] * scale)
        low[i], high[i] = max(0, center - band), min(m, center + band)
    if low[0] != 0:
        return None
    inf = math.inf
    cost = [[inf] * (high[i] - low[i] + 1) for i in range(n + 1)]
    back = [[(0, 0)] * (high[i] - low[i] + 1) for i in range(n + 1)]
    cost[0][0] = 0.0
    t_cum, s_cum, t_pause, s_pause = text.cumulative, spoken.cumulative, text.pauses, spoken.pauses
    log, log1p = math.log, math.log1p
    for i in range(n + 1):
        row, row_low = cost[i], low[i]
        for j in range(row_low, high[i] + 1):
            here = row[j - row_low]
            if here == inf:
                continue
            moves: list[tuple[int, int, float]] = []
            if j < m:  # a spoken word no text word claims
                size = spoken.sizes[j]
                moves.append((0, 1, 1.0 + log1p(size) if size else 0.2))
            if i < n:
                size = text.sizes[i]
                moves.append((1, 0, 1.0 + log1p(size) if size else 0.0))  # a text word said as nothing
                for b in range(1, min(splits[i], m - j) + 1):  # one text word said as b spoken words
                    step = abs(log((t_cum[i + 1] - t_cum[i] + 1.0) / (s_cum[j + b] - s_cum[j] + 1.0)))
                    step += _STEP_PENALTY * (b - 1) + (_PAUSE_PENALTY if t_pause[i] != s_pause[j + b - 1] else 0.0)
                    moves.append((1, b, step))
                if j < m:
                    for a in range(2, min(_MERGE_MAX, n - i) + 1):  # a text words said as one spoken word
                        step = abs(log((t_cum[i + a] - t_cum[i] + 1.0) / (s_cum[j + 1] - s_cum[j] + 1.0)))
                        step += _STEP_PENALTY * (a - 1)
                        step += _PAUSE_PENALTY if t_pause[i + a - 1] != s_pause[j] else 0.0
                        moves.append((a, 1, step))
            for a, b, step in moves:
                ti, tj = i + a, j + b
                if low[ti] <= tj <= high[ti] and here + step < cost[ti][tj - low[ti]]:
                    cost[ti][tj - low[ti]] = here + step
                    back[ti][tj - low[ti]] = (i, j)
    end = _best_end(cost, low, high, m, stops)
    if end is None:
        return None
    groups: list[Group] = []
    i, j = end, m
    while (i, j) != (0, 0):
        pi, pj = back[i][j - low[i]]
        groups.append((pi, i, pj, j))
        i, j = pi, pj
    groups.reverse()
    return groups


def _best_end(
    cost: list[list[float]], low: list[int], high: list[int], m: int, stops: Sequence[bool] | None
) -> int | None:
    """The text words the path ends after: all of them, or (open end) the cheapest stop."""
    n = len(cost) - 1

    def final(i: int) -> float:
        return cost[i][m - low[i]] if low[i] <= m <= high[i] else math.inf

    if stops is None:
        return n if final(n) < math.inf else None
    best, best_cost = None, math.inf
    for i in range(n + 1):
        total = final(i) + (0.0 if i == 0 or stops[i - 1] else _NO_STOP_PENALTY)
        if total < best_cost:
            best, best_cost = i, total
    return best


def _proportional_groups(text: _Side, spoken: _Side, n: int) -> list[Group]:
    """The last resort: spoken word j goes to the text word at the same fraction of the total size."""
    m = len(spoken.sizes)
    if n == 0 or m == 0:
        return [(0, n, 0, m)] if n or m else []
    owner = [min(n - 1, j * n // m) for j in range(m)]
    groups: list[Group] = []
    j = 0
    for i in range(n):
        start = j
        while j < m and owner[j] == i:
            j += 1
        groups.append((i, i + 1, start, j))
    return groups


# ----- from marks on the normalized text to words of the original text --------------------------------------

_RESYNC_ORIGINAL = 8
"""Words of original text one normalization rule may rewrite at once ("March 15, 2024" is three)."""
_RESYNC_NORMALIZED = 48
"""Words one rule may write for them (a 15-digit number read out, an address spelled with "dot")."""
_DIFF_LIMIT = 250_000
"""Above this product of lengths a changed stretch is mapped in proportion instead of by ``difflib``."""


def _boundary_maps(original: str, normalized: str) -> tuple[list[int], list[int]]:
    """For each boundary ``p`` of ``original`` (0..len), the first and last boundary of ``normalized`` it maps to.

    Normalization rewrites local stretches ("$5" → "five dollars") and copies the rest. So the two texts are
    walked word by word: equal words map character for character; where they differ, the walk looks for the
    nearest place where two words in a row agree again (within ``_RESYNC_*`` words), and maps the stretch in
    between by a character diff (``difflib``), which keeps "Jan" on "January" and "5," on "fifth,". Text
    inserted at a boundary (the "uary" of "January") belongs to both sides of it: a word ending there ends
    after it (``last``), a word starting there starts before it (``first``).
    """
    pieces: list[tuple[int, int, int, int]] = []
    a_words, b_words = word_spans(original), word_spans(normalized)
    i = j = 0
    pa = pb = 0

    def changed(a_end: int, b_end: int) -> None:
        _diff_into(pieces, original, normalized, pa, a_end, pb, b_end)

    while i < len(a_words) and j < len(b_words):
        if _same(original, a_words[i], normalized, b_words[j]):
            changed(a_words[i][0], b_words[j][0])
            (a0, a1), (b0, b1) = a_words[i], b_words[j]
            pieces.append((a0, a1, b0, b1))
            pa, pb = a1, b1
            i, j = i + 1, j + 1
            continue
        sync = _resync(original, a_words, i, normalized, b_words, j)
        if sync is None:
            break
        i, j = sync
        changed(a_words[i][0], b_words[j][0])
        pa, pb = a_words[i][0], b_words[j][0]
    changed(len(original), len(normalized))

    size = len(original) + 1
    first, last = [-1] * size, [-1] * size
    for a0, a1, b0, b1 in pieces:
        for p in range(a0, a1 + 1):
            if a1 == a0:
                low, high = b0, b1
            else:
                low = high = b0 + (p - a0) * (b1 - b0) // (a1 - a0)
            first[p] = low if first[p] < 0 else min(first[p], low)
            last[p] = max(last[p], high)
    # Fill any gap (none expected) and make both maps non-decreasing.
    running_first = running_last = 0
    for p in range(size):
        running_first = max(running_first, first[p] if first[p] >= 0 else running_first)
        running_last = max(running_last, last[p], running_first)
        first[p], last[p] = running_first, running_last
    return first, last


def _same(a: str, a_span: tuple[int, int], b: str, b_span: tuple[int, int]) -> bool:
    return a_span[1] - a_span[0] == b_span[1] - b_span[0] and a[a_span[0] : a_span[1]] == b[b_span[0] : b_span[1]]


def _resync(
    a: str, a_words: list[tuple[int, int]], i: int, b: str, b_words: list[tuple[int, int]], j: int
) -> tuple[int, int] | None:
    """The nearest ``(i', j')`` past a difference where the texts agree for two words (or to their ends)."""
    for total in range(1, _RESYNC_ORIGINAL + _RESYNC_NORMALIZED + 1):
        for di in range(min(total, _RESYNC_ORIGINAL) + 1):
            dj = total - di
            if dj > _RESYNC_NORMALIZED:
                continue
            ai, bj = i + di, j + dj
            if ai >= len(a_words) or bj >= len(b_words) or not _same(a, a_words[ai], b, b_words[bj]):
                continue
            a_last, b_last = ai + 1 == len(a_words), bj + 1 == len(b_words)
            if (a_last and b_last) or (not a_last and not b_last and _same(a, a_words[ai + 1], b, b_words[bj + 1])):
                return ai, bj
    return None


def _diff_into(pieces: list[tuple[int, int, int, int]], a: str, b: str, a0: int, a1: int, b0: int, b1: int) -> None:
    """Map ``a[a0:a1]`` onto ``b[b0:b1]``: by a character diff when small enough, else in proportion.

    Whitespace at either end maps to whitespace at the same end, so the diff cannot pair a stretch's last
    space with a space inside it and leave the words after that space to the next word ("2024 at" read as
    "twenty twenty-four at").
    """
    a_core0, b_core0 = _skip_space(a, a0, a1), _skip_space(b, b0, b1)
    a_core1, b_core1 = _back_space(a, a_core0, a1), _back_space(b, b_core0, b1)
    if (a_core0, b_core0) != (a0, b0):
        pieces.append((a0, a_core0, b0, b_core0))
    _diff_core(pieces, a, b, a_core0, a_core1, b_core0, b_core1)
    if (a_core1, b_core1) != (a1, b1):
        pieces.append((a_core1, a1, b_core1, b1))


def _skip_space(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _back_space(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _diff_core(pieces: list[tuple[int, int, int, int]], a: str, b: str, a0: int, a1: int, b0: int, b1: int) -> None:
    if a0 == a1 and b0 == b1:
        return
    if a0 == a1 or b0 == b1 or (a1 - a0) * (b1 - b0) > _DIFF_LIMIT:
        pieces.append((a0, a1, b0, b1))
        return
    matcher = difflib.SequenceMatcher(None, a[a0:a1], b[b0:b1], autojunk=False)
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pieces.append((a0 + i1, a0 + i2, b0 + j1, b0 + j2))


class _Clock:
    """Sample time of any boundary of the normalized text, from the marks received so far."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.marks: list[WordMark] = []

    def add(self, marks: Iterable[WordMark]) -> None:
        for mark in sorted(marks, key=lambda item: (item.char_start, item.char_end)):
            previous = self.marks[-1] if self.marks else None
            char_start, start = mark.char_start, mark.start
            if previous is not None:  # an engine's marks are monotone; keep them so if one is not
                char_start = max(char_start, previous.char_end)
                start = max(start, previous.end)
            char_end, end = max(mark.char_end, char_start), max(mark.end, start)
            self.marks.append(WordMark(char_start, char_end, start, end))
            self.starts.append(char_start)

    @property
    def covered(self) -> int:
        return self.marks[-1].char_end if self.marks else -1

    def at(self, position: int, *, complete: bool) -> float | None:
        """Sample time at ``position``; None while it lies past the last mark and more marks may come."""
        if not self.marks:
            return None
        k = bisect.bisect_right(self.starts, position) - 1
        if k < 0:
            return float(self.marks[0].start)
        mark = self.marks[k]
        if position <= mark.char_end:
            return _lerp(position, mark.char_start, mark.char_end, mark.start, mark.end)
        if k + 1 < len(self.marks):
            after = self.marks[k + 1]
            return _lerp(position, mark.char_end, after.char_start, mark.end, after.start)
        return float(mark.end) if complete else None


def _lerp(x: int, x0: int, x1: int, y0: float, y1: float) -> float:
    if x1 <= x0:
        return float(y1 if x >= x1 else y0)
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class SegmentWords:
    """Turns an engine's marks on one segment's normalized text into ``WordTiming`` s of its original words.

    Feed it the marks as chunks bring them (``add``); each call returns the original words whose timing is
    now settled, in order (a word is settled once the marks reach past its end); ``finish`` returns the
    rest when no more marks will come. A word's span is the time of its first and last character mapped
    into the normalized text (``_boundary_maps``) and read off the marks there, so "$5," spans "five
    dollars,", two original words sharing a normalized word share it by characters, and a word the engine
    did not voice (or that normalization dropped) gets the pause around it, possibly zero-length.
    """

    def __init__(self, original: str, normalized: str, *, offset: int, rate: int, start_s: float) -> None:
        """
        Args:
            original: the segment's text as the client wrote it (its ``spoken`` part).
            normalized: the text the engine was given (``normalize_english(original)`` or ``original``).
            offset: where ``original`` starts in the utterance's text.
            rate: the engine's sample rate; start_s: utterance time of the segment's first sample.
        """
        self._original = original
        self._words = word_spans(original)
        self._first, self._last = _boundary_maps(original, normalized)
        ends = word_spans(normalized)
        self._normalized_end = ends[-1][1] if ends else 0
        self._offset = offset
        self._rate = rate
        self._start_s = start_s
        self._clock = _Clock()
        self._next = 0
        self._previous_end = start_s

    @property
    def done(self) -> bool:
        return self._next >= len(self._words)

    def add(self, marks: Iterable[WordMark]) -> list[WordTiming]:
        self._clock.add(marks)
        return self._settle(complete=self._clock.covered >= self._normalized_end)

    def finish(self) -> list[WordTiming]:
        """The words not yet settled, timed with the marks there are (none: at the last mark, or not at all)."""
        if not self._clock.marks:
            return []
        return self._settle(complete=True)

    def _settle(self, *, complete: bool) -> list[WordTiming]:
        settled: list[WordTiming] = []
        while self._next < len(self._words):
            a, b = self._words[self._next]
            start = self._clock.at(self._first[a], complete=complete)
            end = self._clock.at(self._last[b], complete=complete)
            if start is None or end is None:
                break
            start_s = max(self._start_s + start / self._rate, self._previous_end)
            end_s = max(self._start_s + end / self._rate, start_s)
            self._previous_end = end_s
            settled.append(WordTiming(self._original[a:b], self._offset + a, self._offset + b, start_s, end_s))
            self._next += 1
        return settled
