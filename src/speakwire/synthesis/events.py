"""What an utterance hands its protocol: segment starts, audio, segment ends, aligned words, and the final usage.

Events carry float32 PCM at the requested output rate; encoding is the protocol's business (one file per
utterance over HTTP, one per sentence on the WebSocket when not streaming).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speakwire.audio.chunk import Float32Array
from speakwire.errors import SpeakwireError
from speakwire.text.alignment import WordTiming


@dataclass(frozen=True, slots=True)
class SegmentStarted:
    index: int
    text: str
    """The segment's original text (not normalized), so clients can caption it."""


@dataclass(frozen=True, slots=True)
class AudioReady:
    index: int
    samples: Float32Array
    """Mono float32 at the utterance's output rate."""
    words: tuple[WordTiming, ...] = ()
    """Words whose audio starts in these samples, when the engine can align (see ``text.alignment``). On the
    segment's last audio also any word starting at its very end; should an engine time a word only after its
    start was handed over, the word rides on the next audio (and, in the unlikely case that nothing follows,
    on an ``AudioReady`` with no samples)."""
    s16le: bytes | None = field(default=None, repr=False, compare=False)
    """``samples`` as signed 16-bit little-endian PCM (``float_to_int16_bytes``), made on the worker thread that
    made the samples, so the event loop writes PCM and WAV without a numpy cast of its own (each cast there
    also hands the GIL to the workers and back). None where nobody made it: the output casts ``samples``."""
    audible_from: int | None = field(default=None, repr=False, compare=False)
    """Index of the first sample loud enough to end the utterance's leading silence (``audio.leading_silence``;
    ``len(samples)`` when none is), found on the worker thread while the utterance still trims, so the event
    loop does not scan audio. None where nobody looked: the trimmer scans itself."""


@dataclass(frozen=True, slots=True)
class SegmentFinished:
    index: int
    audio_s: float
    error: SpeakwireError | None = None


@dataclass(frozen=True, slots=True)
class SegmentWords:
    """A segment's words from an aligner (``synthesis.aligning``), once aligned.

    It comes after the segment's ``SegmentFinished`` and may come after later segments' audio: audio never waits
    for an aligner. With an aligner, every ``SegmentFinished`` is followed by exactly one, in segment order and
    before ``UtteranceFinished`` (unless the utterance is cancelled); ``words`` is empty for a segment the aligner
    could not time (silence, a failed segment, a call past its bound). Times and offsets are the utterance's, as
    ``AudioReady.words``.
    """

    index: int
    words: tuple[WordTiming, ...]


@dataclass(slots=True)
class Usage:
    characters: int = 0
    segments: int = 0
    audio_s: float = 0.0
    time_to_first_audio_s: float | None = None
    capped: bool = False

    def to_dict(self) -> dict[str, object]:
        ttfa = self.time_to_first_audio_s
        return {
            "characters": self.characters,
            "segments": self.segments,
            "audio_seconds": round(self.audio_s, 3),
            "time_to_first_audio_ms": None if ttfa is None else round(ttfa * 1000, 1),
            "capped": self.capped,
        }


@dataclass(frozen=True, slots=True)
class UtteranceFinished:
    usage: Usage
    cancelled: bool = False


UtteranceEvent = SegmentStarted | AudioReady | SegmentFinished | SegmentWords | UtteranceFinished
