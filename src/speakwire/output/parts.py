"""What the output stage hands a protocol: segment marks, encoded audio with its words, an aligner's words, the end.

Positions are samples of the output (``start``), counted from the first sample this ``AudioOut`` sent, so a
protocol that speaks several utterances on one stream (a Cartesia context) keeps one timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from speakwire.errors import SpeakwireError
from speakwire.synthesis.events import Usage
from speakwire.text.alignment import WordTiming


@dataclass(frozen=True, slots=True)
class SegmentStart:
    """A segment (sentence) begins; its audio follows."""

    index: int
    text: str
    """The segment's original text, for captions."""
    char_offset: int
    """Where ``text`` starts in the utterance's text (what ``WordTiming`` character offsets index)."""
    start: int
    """Output sample at which its audio starts."""


@dataclass(frozen=True, slots=True)
class AudioPart:
    """Audio as it is made: the encoded bytes it completed and the words that start in it."""

    segment: int
    data: bytes
    """Encoded bytes ready now (the stream's header or prefix rides on the first); may be empty: the codec
    holds them, or the framing sends files only (``segment_files``, ``file``)."""
    samples: int
    """Samples of audio this part stands for."""
    start: int
    """Output sample of its first sample."""
    words: tuple[WordTiming, ...] = ()
    """Words whose audio starts here, their times in seconds from the utterance's first sample (as the
    engine gave them: see ``OutputSpec``'s timeline note)."""


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """A segment's audio is all out (or its engine failed: ``error``)."""

    index: int
    samples: int
    """Samples of the segment."""
    words: tuple[WordTiming, ...]
    """The segment's words, in order (an engine's own; empty when ``words_follow``)."""
    error: SpeakwireError | None = None
    file: bytes = b""
    """With ``segment_files`` framing: the segment's audio as one complete file."""
    words_follow: bool = False
    """Its words come later, in a ``WordsPart`` (an aligner's: the utterance's ``aligned_words``)."""


@dataclass(frozen=True, slots=True)
class WordsPart:
    """An aligner's words for a segment whose ``SegmentEnd`` was already given.

    Audio never waits for an aligner, so this may come after later segments' audio; it refers back to its
    segment. Exactly one per ``SegmentEnd`` with ``words_follow``, in segment order, before ``UtteranceEnd``
    (``words`` empty when the aligner could not time the segment).
    """

    segment: int
    words: tuple[WordTiming, ...]
    """The segment's words, in order, timed and offset as ``AudioPart.words``."""
    start: int
    """Output sample at which the segment's audio starts."""
    samples: int
    """Samples of the segment."""
    char_offset: int
    """Where the segment's text starts in the utterance's text."""


@dataclass(frozen=True, slots=True)
class UtteranceEnd:
    """The utterance is over: its usage, and the stream's last bytes (the whole file with ``file`` framing)."""

    usage: Usage
    cancelled: bool = False
    data: bytes = b""
    samples: int = 0
    """Samples of the whole utterance."""


OutputPart = SegmentStart | AudioPart | SegmentEnd | WordsPart | UtteranceEnd
