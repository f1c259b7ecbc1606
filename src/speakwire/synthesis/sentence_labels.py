"""Sentences placed on one continuous stream of audio, for engines that take text while they generate."""

from __future__ import annotations

from collections.abc import Callable

from speakwire.audio.chunk import Float32Array
from speakwire.errors import SpeakwireError
from speakwire.synthesis.events import AudioReady, SegmentFinished, SegmentStarted, UtteranceEvent
from speakwire.text.segmenter import Segment
from speakwire.text.widths import is_wide


class SentenceLabels:
    """Places the segmenter's sentences on one continuous stream of audio (``stream_driver``).

    The talker reads text ahead of the speech it makes, so a chunk's sentence is chosen by an estimate
    of the characters already *spoken*: those read, but no more than a brisk reader (``CHAR_S`` per
    character, ``WIDE_CHAR_S`` per CJK character) gets through in the audio so far. A sentence starts
    with the first chunk past its first character; a sentence still arriving starts with the text known
    so far. Sentences the estimate never reached are announced with no audio at the end, so every
    sentence gets its start and its done.
    """

    CHAR_S = 0.07
    WIDE_CHAR_S = 0.25

    def __init__(self, segments: list[Segment], received: Callable[[], str], rate: int) -> None:
        self._segments = segments  # shared with the event loop, which appends as sentences are decided
        self._received = received
        self._rate = rate
        self._current = -1
        self._samples = 0
        self._segment_samples = 0

    @property
    def audio_s(self) -> float:
        return self._samples / self._rate

    def spoken_chars(self, text_read: int) -> int:
        budget = self.audio_s
        spoken = 0
        for char in self._received()[:text_read]:
            budget -= self.WIDE_CHAR_S if is_wide(char) else self.CHAR_S
            if budget < 0:
                break
            spoken += 1
        return spoken

    def audio(self, spoken: int, samples: Float32Array, s16le: bytes | None = None) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        target = max(self._segment_at(spoken), 0)
        while self._current < target:
            events.extend(self._advance())
        self._samples += len(samples)
        self._segment_samples += len(samples)
        events.append(AudioReady(self._current, samples, s16le=s16le))
        return events

    def finish(self, error: SpeakwireError | None) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        if error is not None and self._current < 0:
            events.extend(self._advance())  # failed before any audio: the error still needs a segment to land on
        while self._current < len(self._segments) - 1:
            events.extend(self._advance())
        if self._current >= 0:
            events.append(SegmentFinished(self._current, self._segment_samples / self._rate, error))
        return events

    def _segment_at(self, spoken: int) -> int:
        """The sentence holding character ``spoken`` (the one still arriving, past the decided ones)."""
        offset = 0
        segments = list(self._segments)
        for segment in segments:
            offset += len(segment.text)
            if spoken < offset:
                return segment.index
        return len(segments) if len(self._received()) > offset else max(len(segments) - 1, 0)

    def _advance(self) -> list[UtteranceEvent]:
        events: list[UtteranceEvent] = []
        if self._current >= 0:
            events.append(SegmentFinished(self._current, self._segment_samples / self._rate))
        self._current += 1
        self._segment_samples = 0
        segments = list(self._segments)
        if self._current < len(segments):
            text = segments[self._current].text
        else:
            text = self._received()[sum(len(segment.text) for segment in segments) :]
        events.append(SegmentStarted(self._current, text))
        return events
