"""For a wire shape that binds a sentence's words to its end: an aligner's words moved back before their ``SegmentEnd``.

An aligner's words come after their segment's end, possibly after later segments' audio (``WordsPart``), so
audio never waits for them. Baseten's ``timestamp_transport_strategy: "sync"`` puts a sentence's words in its
``audio.done``, and its clients place them on the sentence that began last: LiveKit's Baseten plugin adds them to
the audio it had received at the latest ``audio.start`` (``qwen3_tts.py``: "sync lands in audio.done, after that
sentence's audio, so its offset is known exactly"). So for that shape, and only there, a segment's end and all
that follows it wait for its words: ``words_at_segment_end`` holds them, and gives the ``WordsPart`` just before
its ``SegmentEnd``. The wait is bounded by the aligner's (``synthesis.aligning``: every segment's words come,
empty if its bound passes). What it holds was not sent, so a barge-in meanwhile does not count it heard.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator

from speakwire.output.parts import OutputPart, SegmentEnd, UtteranceEnd, WordsPart


async def words_at_segment_end(parts: AsyncIterator[OutputPart]) -> AsyncIterator[OutputPart]:
    """``parts`` with each ``WordsPart`` just before its ``SegmentEnd``, what follows that end held until then."""
    held: deque[OutputPart] = deque()
    """From the ``SegmentEnd`` whose words are awaited (first) on, in order."""
    async for part in parts:
        if isinstance(part, UtteranceEnd) and part.cancelled:
            yield part  # what was held was never sent: dropped with the utterance
            return
        if not held:
            if isinstance(part, SegmentEnd) and part.words_follow:
                held.append(part)
            else:
                yield part
            continue
        awaited = held[0]
        assert isinstance(awaited, SegmentEnd)
        if not (isinstance(part, WordsPart) and part.segment == awaited.index):
            held.append(part)
            continue
        yield part
        held.popleft()
        yield awaited
        while held:  # what came meanwhile, up to the next end whose words are still awaited
            if isinstance(held[0], SegmentEnd) and held[0].words_follow:
                break
            yield held.popleft()
    while held:  # only if the stage ended without a segment's words (it gives them all before the end)
        yield held.popleft()
