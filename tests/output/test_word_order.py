"""``words_at_segment_end``: for Baseten's ``sync`` shape, an aligner's words moved back before their segment's end,
and what followed that end held until they come; everything else passes through untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator

from speakwire.output import AudioPart, OutputPart, SegmentEnd, SegmentStart, UtteranceEnd, WordsPart
from speakwire.output.word_order import words_at_segment_end
from speakwire.synthesis.events import Usage
from speakwire.text.alignment import WordTiming


def start(index: int) -> SegmentStart:
    return SegmentStart(index, f"Sentence {index}. ", 0, index * 100)


def audio(index: int) -> AudioPart:
    return AudioPart(index, b"\0\0", 100, index * 100)


def end(index: int, *, words_follow: bool = True) -> SegmentEnd:
    return SegmentEnd(index, 100, (), words_follow=words_follow)


def words(index: int) -> WordsPart:
    word = WordTiming("Sentence", 0, 8, index * 0.1, index * 0.1 + 0.05)
    return WordsPart(index, (word,), index * 100, 100, 0)


async def reorder(parts: list[OutputPart]) -> list[OutputPart]:
    async def given() -> AsyncIterator[OutputPart]:
        for part in parts:
            yield part

    return [part async for part in words_at_segment_end(given())]


async def test_each_segments_words_come_just_before_its_end_and_later_audio_after_it() -> None:
    as_made = [start(0), audio(0), end(0), start(1), audio(1), words(0), end(1), start(2), audio(2), words(1),
               end(2), words(2), UtteranceEnd(Usage())]  # fmt: skip
    assert await reorder(as_made) == [start(0), audio(0), words(0), end(0), start(1), audio(1), words(1), end(1),
                                      start(2), audio(2), words(2), end(2), UtteranceEnd(Usage())]  # fmt: skip


async def test_an_engines_own_words_pass_through_in_place() -> None:
    own = [start(0), audio(0), end(0, words_follow=False), start(1), audio(1), end(1, words_follow=False),
           UtteranceEnd(Usage())]  # fmt: skip
    assert await reorder(own) == own


async def test_a_cancel_drops_what_was_held_for_words() -> None:
    cancelled = UtteranceEnd(Usage(), cancelled=True)
    parts = await reorder([start(0), audio(0), end(0), start(1), audio(1), cancelled])
    assert parts == [start(0), audio(0), cancelled]  # never sent, so never counted heard
