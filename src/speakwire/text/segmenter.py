"""Incremental, boundary-safe text segmentation: where to cut streaming text into utterances.

Why this exists: Piper (VITS) speaks every segment as a separate utterance, and first audio exists only
once the first segment is synthesized. So the first segment should be short (a clause, ~0.04 s of compute),
later segments whole sentences of growing size (prosody, throughput), and no cut may land inside "3.14",
"Dr. Smith" or "$29." before the next word is known. Text arrives token by token from an LLM, so this is a
state machine with no I/O, shaped like ``websockets``' protocol core: ``feed()`` text and get back the
segments no future text can change; ``flush()`` at the end of input.

How a boundary is decided (each rule looks at most at the next word, never further):

* A *sentence* ends at a run of ``. ! ? …`` plus any closing quotes or brackets, followed by whitespace;
  at CJK ``。！？`` immediately; and at a paragraph break (a whitespace run holding two newlines).
* A *clause* ends at ``, ; : —`` (plus closers) followed by whitespace, or at CJK ``，；、：``
  immediately. Clause ends count in ``"clause"`` granularity, and for the first segment once it holds
  ``first_clause_min_chars`` characters (the early-first-audio rule).
* Requiring whitespace after the mark keeps "3.14", "$3.50", "22,1", "1,000", "3:30", "v1.2.3", URLs and
  e-mail addresses whole without any special case.
* Lookahead: a boundary is decided only once the next non-space character after it is known (or at
  ``flush()``), so "$29." waits and "$29. Next" splits. Every decision depends only on text up to that
  character, which is why feeding text in any pieces gives exactly the segments of feeding it whole.
* A period is *not* a sentence end (a late cut costs latency, a wrong one costs prosody, so we prefer late):
  after a title or prefix abbreviation (``_NEVER_END``: Dr. Mr. St. vs. e.g. U.S. ...) whatever follows;
  after a single letter ("J. R. R. Tolkien"); after a 1-3 digit list marker at the start of a line
  ("1. First item"); after an abbreviation that may end a sentence (``_END_BEFORE_CAPITAL``: etc. a.m.
  Inc. No. Jan. ...) or a dotted acronym (Ph.D.) unless a capital (or caseless) letter follows; and after
  anything when a lowercase letter follows ("approx. five"). ``!`` and ``?`` end a sentence unless a
  lowercase letter follows; an ellipsis (``...`` or ``…``) only before a capital letter.
* A piece with fewer than two letters or digits ("A.", "— ") is never a segment of its own: it is
  carried into the next one.
* A piece longer than ``max_chars`` is cut at its last clause mark within the limit, else at its last
  space (not right after a title or initial), else hard at the limit.

Pieces are then grouped: segment ``i`` takes whole pieces until its spoken text holds ``min_chars[i]``
characters, but never grows past ``max_chars`` by taking one more.

Whitespace: every segment's ``text`` is the original slice, trailing whitespace included, so the texts of
all segments join back to exactly what was fed. The one exception is input with no non-space character at
all, which yields no segment (a segment never has empty ``spoken`` text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Granularity = Literal["none", "sentence", "clause"]

_SENTENCE_MARKS = ".!?…"
_CJK_SENTENCE_MARKS = "。！？"
_CLAUSE_MARKS = ",;:—"
_CJK_CLAUSE_MARKS = "，；、："
_CLOSERS = "\"'”’)]}»」』）】*"
_OPENERS = "\"'“‘([{«¿¡「『（【*"

# Titles and prefix abbreviations: the next word belongs to them, so their period never ends a sentence.
_NEVER_END = frozenset(
    {
        *("mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "rev", "fr", "sr", "gen", "col", "capt"),
        *("lt", "sgt", "maj", "cmdr", "adm", "hon", "gov", "sen", "rep", "pres", "supt", "insp"),
        *("vs", "e.g", "i.e", "cf", "viz", "approx", "ca", "u.s", "u.k", "u.n", "u.s.a", "e.u"),
    }
)
# Abbreviations that often end a sentence: their period ends one only before a capital letter, so
# "6 p.m. today" and "No. 5" stay whole while "etc. Then" and "No. I won't" split.
_END_BEFORE_CAPITAL = frozenset(
    {
        *("etc", "a.m", "p.m", "inc", "ltd", "co", "corp", "llc", "plc", "jr", "bros", "no", "nos"),
        *("fig", "figs", "vol", "vols", "ch", "sec", "pp", "est", "dept", "univ", "assn"),
        *("ave", "blvd", "rd"),
        *("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
        *("mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun"),
    }
)
_WORD_LOOKBACK = 40  # longer than any abbreviation; keeps the look behind a period bounded

_WHITESPACE_RUN = re.compile(r"\s*")
_SENTENCE_EVENTS = re.compile(r"[.!?…。！？\n]")
_CLAUSE_EVENTS = re.compile(r"[.!?…。！？\n,;:—，；、：]")
_CUT_AT_CLAUSE = re.compile(r"[,;:—][\"'”’)\]}»」』）】*]*(?=\s)|[，；、：]")
_CUT_AT_SPACE = re.compile(r"(?<=\S)\s")
_WORD = re.compile(r"\S+")
_DOTTED_ACRONYM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # "U.S", "Ph.D", "a.m" (before the final period)


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of the input to synthesize as a single utterance."""

    text: str
    """The original slice of input, trailing whitespace included."""
    index: int
    """Position of this segment in its text: 0, 1, 2, ..."""

    @property
    def spoken(self) -> str:
        """The text to synthesize: ``text`` without surrounding whitespace."""
        return self.text.strip()


@dataclass(frozen=True, slots=True)
class ChunkSchedule:
    """How big segments are: a short first one for early audio, then growing ones for prosody and speed."""

    first_clause_min_chars: int = 10
    """The first segment may end at a clause mark once it holds this many characters; 0 disables."""
    min_chars: tuple[int, ...] = (0, 40, 80, 120)
    """Segment ``i`` takes whole pieces until it holds ``min_chars[min(i, len - 1)]`` characters."""
    max_chars: int = 300
    """A sentence longer than this is cut at a clause mark, else at a space: synthesis cost stays bounded."""
    first_words: int = 0
    """If > 0, the first segment may end after this many words even without punctuation (off: it hurts VITS
    prosody, see reference/latency.md)."""

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {self.max_chars}")
        if min(self.min_chars, default=0) < 0 or self.first_clause_min_chars < 0 or self.first_words < 0:
            raise ValueError("ChunkSchedule sizes must not be negative")

    def min_chars_for(self, index: int) -> int:
        """The minimum size of segment ``index``: the last ``min_chars`` value repeats."""
        if not self.min_chars:
            return 0
        return self.min_chars[min(index, len(self.min_chars) - 1)]


@dataclass(frozen=True, slots=True)
class _Decision:
    """What the scanner concluded about one punctuation event."""

    kind: Literal["end", "skip", "wait"]
    at: int
    """``end``: where the piece ends; ``skip``: where scanning goes on; ``wait``: where to resume later."""


class Segmenter:
    """Cuts text fed in arbitrary pieces into segments, each emitted once no future text can change it."""

    def __init__(self, granularity: Granularity = "sentence", schedule: ChunkSchedule | None = None) -> None:
        if granularity not in ("none", "sentence", "clause"):
            raise ValueError(f"granularity must be 'none', 'sentence' or 'clause', got {granularity!r}")
        self.granularity: Granularity = granularity
        self.schedule = schedule if schedule is not None else ChunkSchedule()
        self._reset()

    def _reset(self) -> None:
        # Text not yet emitted; it starts with the segment being built.
        self._buffer = ""
        # End of the pieces already taken into the segment being built (still below its min_chars).
        self._group_end = 0
        # Where the search for the next piece's end resumes: the text before it holds no boundary.
        self._scan = 0
        self._index = 0
        # Whether the buffer starts a line, for "1." list markers.
        self._after_newline = True
        # "none" granularity only collects; joining once at flush keeps feeding linear.
        self._none_parts: list[str] = []
        self._ready: list[Segment] = []

    @property
    def pending(self) -> str:
        """Text fed but not yet emitted in a segment."""
        return "".join(self._none_parts) if self.granularity == "none" else self._buffer

    def feed(self, text: str) -> list[Segment]:
        """Add text and return the segments it completed.

        Args:
            text: The next piece of input, of any length (an LLM token, a word, a whole paragraph).

        Returns:
            The segments no future text can change, in order; often none.
        """
        if not text:
            return []
        if self.granularity == "none":
            self._none_parts.append(text)
            return []
        self._buffer += text
        self._drain(final=False)
        return self._take_ready()

    def flush(self) -> list[Segment]:
        """End of input: return the remaining segments and make the segmenter as good as new.

        Returns:
            Everything still pending, cut by the same rules with "end of input" as the lookahead. Input
            with no non-space character yields no segment; otherwise the texts of all segments returned by
            ``feed`` and ``flush`` join back to the input exactly.
        """
        if self.granularity == "none":
            self._buffer = "".join(self._none_parts)
            self._none_parts = []
        else:
            self._drain(final=True)
        if self._buffer.strip():
            self._emit(len(self._buffer))
        ready = self._take_ready()
        self._reset()
        return ready

    # ----- grouping pieces into segments ----------------------------------------------

    def _drain(self, *, final: bool) -> None:
        while (end := self._find_piece_end(final=final)) is not None:
            self._take_piece(end)

    def _take_piece(self, end: int) -> None:
        group = self._buffer[: self._group_end]
        piece = self._buffer[self._group_end : end]
        if group.strip() and len(group.strip()) + len(piece.strip()) > self.schedule.max_chars:
            end -= self._emit(self._group_end)
        self._group_end = self._scan = end
        spoken = self._buffer[:end].strip()
        if spoken and len(spoken) >= self.schedule.min_chars_for(self._index):
            self._emit(end)

    def _emit(self, end: int) -> int:
        """Emit ``buffer[:end]`` as the next segment; return how far the buffer moved."""
        text = self._buffer[:end]
        self._ready.append(Segment(text, self._index))
        self._index += 1
        self._buffer = self._buffer[end:]
        self._group_end = max(0, self._group_end - end)
        self._scan = max(0, self._scan - end)
        last_visible = text.rstrip(" \t")
        if last_visible:
            self._after_newline = last_visible[-1] in "\n\r"
        return end

    def _take_ready(self) -> list[Segment]:
        ready, self._ready = self._ready, []
        return ready

    # ----- finding where the next piece ends -------------------------------------------

    def _find_piece_end(self, *, final: bool) -> int | None:
        """End of the piece starting at the group end, or None until more text decides it."""
        buffer = self._buffer
        start = self._group_end
        if start >= len(buffer):
            return None
        limit = start + self.schedule.max_chars
        events = _CLAUSE_EVENTS if self._clause_marks_count_now() else _SENTENCE_EVENTS
        position = max(self._scan, start)
        word_cut = self._first_words_cut(start) if self._index == 0 and self.schedule.first_words else None
        if word_cut is not None and word_cut > limit:
            word_cut = None  # the max_chars cut comes first, as it must when the word is still being typed
        while True:
            match = events.search(buffer, position)
            event_at = match.start() if match else len(buffer)
            if word_cut is not None and event_at >= word_cut:
                end = _skip_whitespace(buffer, word_cut)
                return end if end < len(buffer) or final else None
            if event_at >= limit and len(buffer) > limit:
                return self._cut_long_piece(start, limit, final=final)
            if match is None:
                self._scan = len(buffer)
                return len(buffer) if final else None
            decision = self._decide(event_at, final=final)
            if decision.kind == "wait":
                self._scan = event_at
                return None
            if decision.kind == "end" and _has_two_word_chars(buffer, start, decision.at):
                return decision.at
            position = decision.at

    def _clause_marks_count_now(self) -> bool:
        first_clause = self._index == 0 and self.schedule.first_clause_min_chars > 0
        return self.granularity == "clause" or first_clause

    def _decide(self, at: int, *, final: bool) -> _Decision:
        mark = self._buffer[at]
        if mark == "\n":
            return self._decide_paragraph(at, final=final)
        if mark in _SENTENCE_MARKS:
            return self._decide_sentence(at, final=final)
        if mark in _CJK_SENTENCE_MARKS:
            return self._decide_immediate(at, final=final, counts=True)
        if mark in _CJK_CLAUSE_MARKS:
            return self._decide_immediate(at, final=final, counts=self._clause_counts(at))
        return self._decide_clause(at, final=final)

    def _decide_paragraph(self, at: int, *, final: bool) -> _Decision:
        space_end = _skip_whitespace(self._buffer, at)
        if space_end == len(self._buffer) and not final:
            return _Decision("wait", at)
        is_break = self._buffer.count("\n", at, space_end) >= 2
        return _Decision("end" if is_break else "skip", space_end)

    def _decide_immediate(self, at: int, *, final: bool, counts: bool) -> _Decision:
        """CJK punctuation: a boundary right after the marks, closers and any spaces that follow."""
        buffer = self._buffer
        end = _skip_chars(buffer, at, _CJK_SENTENCE_MARKS + _SENTENCE_MARKS + _CJK_CLAUSE_MARKS)
        end = _skip_whitespace(buffer, _skip_chars(buffer, end, _CLOSERS))
        if end == len(buffer) and not final:
            return _Decision("wait", at)
        counts = counts or buffer.count("\n", at, end) >= 2
        return _Decision("end" if counts else "skip", end)

    def _decide_clause(self, at: int, *, final: bool) -> _Decision:
        buffer = self._buffer
        closers_end = _skip_chars(buffer, at + 1, _CLOSERS)
        space_end = _skip_whitespace(buffer, closers_end)
        if space_end == len(buffer) and not final:
            return _Decision("wait", at)
        if space_end == closers_end:  # "22,1", "3:30", "word—word", or the end of input
            return _Decision("end" if space_end == len(buffer) else "skip", space_end)
        counts = self._clause_counts(at) or buffer.count("\n", closers_end, space_end) >= 2
        return _Decision("end" if counts else "skip", space_end)

    def _clause_counts(self, at: int) -> bool:
        """Whether a clause mark at ``at`` may end the piece (given it is followed as the mark requires)."""
        if self._index == 0 and self.schedule.first_clause_min_chars > 0:
            return len(self._buffer[: at + 1].strip()) >= self.schedule.first_clause_min_chars
        return self.granularity == "clause"

    def _decide_sentence(self, at: int, *, final: bool) -> _Decision:
        buffer = self._buffer
        run_end = _skip_chars(buffer, at, _SENTENCE_MARKS)
        closers_end = _skip_chars(buffer, run_end, _CLOSERS)
        space_end = _skip_whitespace(buffer, closers_end)
        next_at = _skip_chars(buffer, space_end, _OPENERS)
        if next_at == len(buffer) and not final:
            return _Decision("wait", at)
        if space_end == closers_end:  # "3.14", "example.com", "v1.2", or the end of input
            return _Decision("end" if space_end == len(buffer) else "skip", space_end)
        if buffer.count("\n", closers_end, space_end) >= 2:
            return _Decision("end", space_end)
        next_char = buffer[next_at] if next_at < len(buffer) else ""
        ends = self._ends_sentence(buffer[at:run_end], at, next_char)
        return _Decision("end" if ends else "skip", space_end)

    def _ends_sentence(self, run: str, run_at: int, next_char: str) -> bool:
        """Whether a run of sentence marks at ``run_at``, then space, then ``next_char`` ends a sentence."""
        if not next_char:
            return True
        if next_char.islower():
            return False
        if "…" in run or ".." in run:
            return next_char.isalpha()
        if run != ".":
            return True
        word_at = self._word_start(run_at)
        word = self._buffer[word_at:run_at]
        if _is_title_or_initial(word):
            return False
        if word.isdigit() and len(word) <= 3 and self._starts_line(word_at):
            return False
        if word.lower() in _END_BEFORE_CAPITAL or _DOTTED_ACRONYM.fullmatch(word):
            return next_char.isalpha()
        return True

    def _word_start(self, end: int) -> int:
        """Start of the word before ``end``, without leading quotes or brackets."""
        buffer = self._buffer
        start = end
        floor = max(0, end - _WORD_LOOKBACK)
        while start > floor and not buffer[start - 1].isspace():
            start -= 1
        return _skip_chars(buffer, start, _OPENERS, stop=end)

    def _starts_line(self, at: int) -> bool:
        before = self._buffer[:at].rstrip(" \t")
        if not before:
            return self._after_newline
        return before[-1] in "\n\r"

    def _cut_long_piece(self, start: int, limit: int, *, final: bool) -> int | None:
        """Where to cut a piece with no boundary in its first ``max_chars`` characters (None: need more)."""
        buffer = self._buffer
        clause_marks = list(_CUT_AT_CLAUSE.finditer(buffer, start, limit))
        if clause_marks:
            end = _skip_whitespace(buffer, _skip_chars(buffer, clause_marks[-1].end(), _CLOSERS))
            return end if end < len(buffer) or final else None
        for space in reversed(list(_CUT_AT_SPACE.finditer(buffer, start + 1, limit))):
            if _is_title_or_initial_with_period(buffer[self._word_start(space.start()) : space.start()]):
                continue  # keep "Dr. Smith" and "J. Smith" together
            end = _skip_whitespace(buffer, space.start())
            return end if end < len(buffer) or final else None
        end = _skip_whitespace(buffer, limit)  # a hard cut; spaces after it still belong to this piece
        return end if end < len(buffer) or final else None

    def _first_words_cut(self, start: int) -> int | None:
        """Where the space after the first segment's ``first_words``-th word begins, once it is buffered."""
        buffer = self._buffer
        for count, word in enumerate(_WORD.finditer(buffer), start=1):
            if word.end() == len(buffer):
                return None  # the word may go on
            if (
                word.end() > start
                and count >= self.schedule.first_words
                and not _is_title_or_initial_with_period(word.group())
            ):
                return word.end()
        return None


def split_text(
    text: str, granularity: Granularity = "sentence", schedule: ChunkSchedule | None = None
) -> list[Segment]:
    """Segment a whole text at once: ``feed(text)`` then ``flush()``.

    Args:
        text: The whole input.
        granularity: Where segments may end; see the module docstring.
        schedule: Segment sizes; the default schedule when None.

    Returns:
        The segments, in order.
    """
    segmenter = Segmenter(granularity, schedule)
    return segmenter.feed(text) + segmenter.flush()


def _skip_whitespace(text: str, at: int) -> int:
    match = _WHITESPACE_RUN.match(text, at)
    return match.end() if match else at


def _skip_chars(text: str, at: int, chars: str, stop: int | None = None) -> int:
    stop = len(text) if stop is None else stop
    while at < stop and text[at] in chars:
        at += 1
    return at


def _is_title_or_initial(word: str) -> bool:
    """Words whose period never ends a sentence and after which no cut should fall: "Dr", "vs", "J"."""
    return word.lower() in _NEVER_END or (len(word) == 1 and word.isalpha())


def _is_title_or_initial_with_period(word: str) -> bool:
    """Whether a word like "Dr." or "J." binds to the name after it, so no cut may fall between them."""
    return word.endswith(".") and _is_title_or_initial(word[:-1])


def _has_two_word_chars(text: str, start: int, end: int) -> bool:
    found = 0
    for char in text[start:end]:
        if char.isalnum():
            found += 1
            if found == 2:
                return True
    return False
