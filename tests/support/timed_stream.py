"""The vLLM-Omni WebSocket with ``word_timestamps: true``, read as a client that matches each sentence's words to
the sentence they name (``sentence_index``), never to the sentence that began last.

A sentence's words ride on one more ``audio.chunk`` with empty audio. An engine's (Piper's) come before the
sentence's ``audio.done``; an aligner's after it, possibly after later sentences' audio: audio never waits for an
aligner (issue 29). ``TimedStream`` checks the frame fields as it reads (chunk times, byte counts, one trailing chunk
per sentence, after all of its audio) and records the order in which things arrived.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RATE = 24000


@dataclass
class TimedSentence:
    index: int
    text: str
    audio: bytes = b""
    words: list[dict[str, Any]] | None = None
    """Its trailing ``audio.chunk``'s ``timestamps`` (None: null, or none came)."""
    events: list[str] = field(default_factory=list)
    """``audio.start``, ``audio`` (a chunk with audio), ``audio.done`` and ``words`` (its trailing chunk), in order."""

    @property
    def audio_ms(self) -> float:
        return len(self.audio) / 2 / RATE * 1000


@dataclass
class TimedStream:
    sentences: dict[int, TimedSentence] = field(default_factory=dict)
    order: list[tuple[str, int]] = field(default_factory=list)
    """(what, sentence index) as it arrived: what is ``audio.start``, ``audio``, ``audio.done`` or ``words``."""
    last: dict[str, Any] = field(default_factory=dict)
    """The last event read (``session.done``, ``input.cancelled``, ...)."""

    @property
    def done(self) -> bool:
        return self.last.get("type") == "session.done"

    def in_order(self) -> list[TimedSentence]:
        return [self.sentences[i] for i in sorted(self.sentences)]

    async def read(self, ws: Any, until: Callable[[TimedStream], bool] | None = None, timeout_s: float = 120) -> None:
        """Read events (``websockets`` client) until ``until`` holds (default: ``session.done``)."""
        stop = until or (lambda stream: stream.done)
        async with asyncio.timeout(timeout_s):
            while not stop(self):
                message = await ws.recv()
                assert isinstance(message, str), "with word_timestamps all audio is JSON audio.chunk"
                self.take(json.loads(message))

    def take(self, event: dict[str, Any]) -> None:
        self.last = event
        kind = event["type"]
        assert kind != "error", event
        if kind == "audio.start":
            assert event["sentence_index"] not in self.sentences and event["word_timestamps"] is True
            sentence = self.sentences[event["sentence_index"]] = TimedSentence(event["sentence_index"],
                                                                                event["sentence_text"])  # fmt: skip
            self._note(sentence, "audio.start")
        elif kind == "audio.chunk":
            sentence = self.sentences[event["sentence_index"]]
            chunk = base64.b64decode(event["audio_b64"])
            if chunk:
                assert "audio.done" not in sentence.events and "words" not in sentence.events
                assert event["timestamps"] is None
                assert event["chunk_start_ms"] == round(sentence.audio_ms)
                sentence.audio += chunk
                self._note(sentence, "audio")
            else:
                assert "words" not in sentence.events  # one trailing chunk per sentence, after all of its audio
                assert event["chunk_end_ms"] == round(sentence.audio_ms)
                sentence.words = event["timestamps"]
                self._note(sentence, "words")
        elif kind == "audio.done":
            sentence = self.sentences[event["sentence_index"]]
            assert event["total_bytes"] == len(sentence.audio)
            self._note(sentence, "audio.done")

    def _note(self, sentence: TimedSentence, what: str) -> None:
        sentence.events.append(what)
        self.order.append((what, sentence.index))

    def first(self, what: str, sentence: int) -> int:
        """Where in ``order`` the first ``what`` of ``sentence`` arrived."""
        return self.order.index((what, sentence))

    def utterance_words(self) -> list[dict[str, Any]]:
        """Every sentence's words placed on the utterance: offsets into its text, ms from its first sample."""
        words: list[dict[str, Any]] = []
        char_offset, time_offset_ms = 0, 0.0
        for sentence in self.in_order():
            at_ms = round(time_offset_ms)
            for item in sentence.words or []:
                assert sentence.text[item["char_start"] : item["char_end"]] == item["word"]
                assert 0 <= item["start_ms"] <= item["end_ms"] <= sentence.audio_ms + 1
                words.append({**item, "char_start": char_offset + item["char_start"],
                              "char_end": char_offset + item["char_end"], "start_ms": at_ms + item["start_ms"],
                              "end_ms": at_ms + item["end_ms"]})  # fmt: skip
            char_offset += len(sentence.text)
            time_offset_ms += sentence.audio_ms
        return words
