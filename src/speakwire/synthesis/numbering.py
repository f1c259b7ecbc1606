"""The segmenter as an utterance sees it: segments numbered across flushes and placed in the text fed."""

from __future__ import annotations

from speakwire.text.segmenter import ChunkSchedule, Granularity, Segment, Segmenter


class UtteranceSegmenter:
    """``text.segmenter.Segmenter`` with per-utterance numbers and each segment's offset in the text fed."""

    def __init__(self, granularity: Granularity, schedule: ChunkSchedule | None) -> None:
        self._segmenter = Segmenter(granularity, schedule)
        self._seen = 0
        self._chars = 0
        self._offsets: dict[int, int] = {}
        """Segment index → where its text starts in the text the segmenter was fed."""
        self._texts: dict[int, str] = {}

    def feed(self, text: str) -> list[Segment]:
        """The segments ``text`` completes."""
        return self._numbered(self._segmenter.feed(text))

    def flush(self) -> list[Segment]:
        """The rest of the buffer, as the last segment(s)."""
        return self._numbered(self._segmenter.flush())

    def offset(self, index: int) -> int:
        """Where segment ``index`` starts in the text fed."""
        return self._offsets.get(index, 0)

    def text(self, index: int) -> str | None:
        """Segment ``index``'s text once the segmenter has decided it, else None."""
        return self._texts.get(index)

    def _numbered(self, segments: list[Segment]) -> list[Segment]:
        # Number segments per utterance (the segmenter restarts its count after a flush).
        numbered = [Segment(segment.text, self._seen + i) for i, segment in enumerate(segments)]
        self._seen += len(numbered)
        for segment in numbered:  # segments tile the text fed, so each starts where the last one ended
            self._offsets[segment.index] = self._chars
            self._texts[segment.index] = segment.text
            self._chars += len(segment.text)
        return numbered
