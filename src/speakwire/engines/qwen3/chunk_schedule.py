"""Where each row's code2wav chunks end, decided for all rows of a step at once, so chunks batch.

A row's chunks follow its stream schedule (2, 4, 8, 16, 25 frames on CPU: a small first chunk, then
larger ones). Followed per row, streams that started a step apart end their chunks a step apart for
good, and code2wav makes one call per phase instead of one per step: with a burst of 8 where the
first request was admitted one step before the other seven, every chunk cost two calls (one of 1
window, one of 7) and the seven first chunks waited behind the one.

So the generation loop ends chunks here, after each step: when a row's chunk is due, every other row
of the step that has at least ``JOIN_SHARE`` of its own next chunk ends its chunk too (a little early).
Their requests reach code2wav together and share a call (``decode_batcher.buckets`` pads what differs),
and from then on those rows are in step. A row alone follows its schedule exactly, and so do the rows
of one utterance among themselves (``CodecChunkSchedule.stream``: the row that takes over a long text
starts while the previous one speaks its last words), so one utterance's audio does not depend on
when its text arrived. Joining changes where a chunk ends, so the audio only to float rounding, as
batching itself does (a window decoded in a batch of 2 is not bit-identical to one decoded alone).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

JOIN_SHARE = 0.5
"""A row ends its chunk with a due one once it has this share of its own next chunk's frames."""


class CodecChunkSchedule:
    """One row's code2wav chunk sizes in codec frames (the last repeats) and the frames it made since its
    last chunk ended. (Not the segmenter's ``text.segmenter.ChunkSchedule``, which sizes text segments.)"""

    def __init__(self, sizes: Sequence[int], stream: object = None) -> None:
        if not sizes or any(int(size) < 1 for size in sizes):
            raise ValueError(f"chunk sizes must be positive frame counts, got {tuple(sizes)}")
        self._sizes = tuple(int(size) for size in sizes)
        self.stream = stream
        """What the row's audio belongs to (its utterance); rows of one stream do not join each other's
        chunks. None: a stream of its own."""
        self._chunk = 0
        self.pending = 0
        """Frames since the last chunk ended."""

    @property
    def want(self) -> int:
        """Frames in the row's next chunk by its schedule."""
        return self._sizes[min(self._chunk, len(self._sizes) - 1)]

    @property
    def due(self) -> bool:
        return self.pending >= self.want

    @property
    def can_join(self) -> bool:
        return self.pending >= max(1, math.ceil(self.want * JOIN_SHARE))

    def end_chunk(self) -> None:
        self.pending = 0
        self._chunk += 1


def end_chunks(schedules: Sequence[CodecChunkSchedule | None], last: Sequence[bool] | None = None) -> list[bool]:
    """After a step that made one frame for each row: whether that frame ends the row's chunk.

    None: a row nobody decodes in chunks (its frames are read raw); it never ends one. ``last``: rows whose
    frame of this step is their last; their chunk ends with it (as if due). Linear in the rows (it runs on
    the loop thread every step): a row that is not due joins when some due row is of another stream, i.e.
    when fewer of the due rows are of its own stream than are due in all.
    """
    final = list(last) if last is not None else [False] * len(schedules)
    for schedule in schedules:
        if schedule is not None:
            schedule.pending += 1
    due = [s for s, end in zip(schedules, final, strict=True) if s is not None and (s.due or end)]
    due_ids = {id(s) for s in due}
    due_of_stream = Counter(id(s.stream) for s in due if s.stream is not None)
    ends = [
        schedule is not None
        and (id(schedule) in due_ids or (schedule.can_join and _due_elsewhere(schedule, len(due), due_of_stream)))
        for schedule in schedules
    ]
    for schedule, end in zip(schedules, ends, strict=True):
        if end and schedule is not None:
            schedule.end_chunk()
    return ends


def _due_elsewhere(schedule: CodecChunkSchedule, due: int, due_of_stream: Counter[int]) -> bool:
    """Whether a due row (of ``due``; ``due_of_stream``: how many per stream) is of another stream than
    ``schedule``, which is not due itself (a stream of None is one of its own)."""
    own = due_of_stream[id(schedule.stream)] if schedule.stream is not None else 0
    return due > own
