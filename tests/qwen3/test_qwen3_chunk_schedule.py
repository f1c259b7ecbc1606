"""The loop ends code2wav chunks in step across streams, so streams a step apart share code2wav calls."""

from __future__ import annotations

import random

import pytest

from speakwire.engines.qwen3.chunk_schedule import JOIN_SHARE, CodecChunkSchedule, end_chunks

SCHEDULE = (2, 4, 8, 16, 25)


def chunk_sizes(rows: list[CodecChunkSchedule | None], steps: int, joins_at: dict[int, list[int]]) -> list[list[int]]:
    """Run ``steps`` loop steps; ``joins_at[step]`` are rows that make their first frame from that step on."""
    active: list[int] = []
    sizes: list[list[int]] = [[] for _ in rows]
    counts = [0] * len(rows)
    for step in range(steps):
        active += joins_at.get(step, [])
        ends = end_chunks([rows[i] for i in active])
        for i, end in zip(active, ends, strict=True):
            counts[i] += 1
            if end:
                sizes[i].append(counts[i])
                counts[i] = 0
    return sizes


def test_a_row_alone_follows_its_schedule_exactly() -> None:
    [sizes] = chunk_sizes([CodecChunkSchedule(SCHEDULE)], 80, {0: [0]})
    assert sizes == [2, 4, 8, 16, 25, 25]


def test_a_burst_admitted_a_step_apart_ends_every_chunk_in_the_same_step() -> None:
    rows = [CodecChunkSchedule(SCHEDULE, stream=i) for i in range(8)]
    sizes = chunk_sizes(rows, 81, {0: [0], 1: list(range(1, 8))})  # the first request got in a step early
    assert sizes[0] == [2, 4, 8, 16, 25, 25]
    for late in sizes[1:]:
        assert late == [1, 4, 8, 16, 25, 25]  # the first chunk ends with the early row's: one frame, sooner
    # every chunk end is at one step for all eight: one code2wav call per chunk instead of two


def test_rows_far_apart_fall_in_step_once_one_has_half_its_next_chunk() -> None:
    rows = [CodecChunkSchedule(SCHEDULE, stream="a"), CodecChunkSchedule(SCHEDULE, stream="b")]
    sizes = chunk_sizes(rows, 120, {0: [0], 5: [1]})
    ends = [[sum(s[: k + 1]) + start for k in range(len(s))] for s, start in zip(sizes, (0, 5), strict=True)]
    shared = set(ends[0]) & set(ends[1])
    assert len(shared) >= 4  # in step after the first chunks
    assert all(size >= 1 for s in sizes for size in s)
    assert min(sizes[1][1:]) >= 2  # never less than half of a chunk after the first


def test_a_row_admitted_at_any_phase_of_another_shares_chunk_ends_with_it() -> None:
    """Whatever chunk a long row is in when a new one starts, the new one's 40 frames end at least two chunks in
    a step with it (the last one with its last frame)."""
    for before in range(400):
        long = CodecChunkSchedule(SCHEDULE, stream="long")
        for _ in range(before):
            end_chunks([long])
        new = CodecChunkSchedule(SCHEDULE, stream="new")
        shared = sum(all(end_chunks([new, long], [frame == 39, False])) for frame in range(40))
        assert shared >= 2, before


def test_rows_of_one_utterance_do_not_join_each_other() -> None:
    utterance = object()
    rows = [CodecChunkSchedule(SCHEDULE, stream=utterance), CodecChunkSchedule(SCHEDULE, stream=utterance)]
    sizes = chunk_sizes(rows, 60, {0: [0], 3: [1]})
    assert sizes[0][:4] == [2, 4, 8, 16] and sizes[1][:3] == [2, 4, 8]


def test_rows_read_frame_by_frame_never_end_a_chunk_nor_make_others_end_one() -> None:
    row = CodecChunkSchedule(SCHEDULE)
    assert end_chunks([None, row]) == [False, False]
    assert end_chunks([None, row]) == [False, True]


def pairwise_ends(rows: list[CodecChunkSchedule | None], last: list[bool]) -> list[bool]:
    """The rule by its definition, row against row: a row ends its chunk when due (or last), or when it has
    ``JOIN_SHARE`` of its next chunk and some due row is of another stream (None: a stream of its own)."""

    def due(row: CodecChunkSchedule, end: bool) -> bool:
        return row.pending + 1 >= row.want or end

    def joins(row: CodecChunkSchedule) -> bool:
        return row.pending + 1 >= max(1, -(-row.want * JOIN_SHARE // 1))

    def other_stream(a: CodecChunkSchedule, b: CodecChunkSchedule) -> bool:
        return a is not b and (a.stream is None or a.stream is not b.stream)

    due_rows = [r for r, end in zip(rows, last, strict=True) if r is not None and due(r, end)]
    return [
        r is not None and (any(r is d for d in due_rows) or (joins(r) and any(other_stream(d, r) for d in due_rows)))
        for r in rows
    ]


def test_the_ends_of_a_step_are_the_pairwise_rule_for_mixed_rows() -> None:
    """64 rows of a few utterances, some read frame by frame, joining and ending at random: every step's ends
    are what comparing each row with every due row gives."""
    rng = random.Random(3)
    utterances = [object() for _ in range(6)]
    rows: list[CodecChunkSchedule | None] = []
    for _ in range(200):
        while len(rows) < 64:
            kind = rng.random()
            stream = None if kind < 0.3 else rng.choice(utterances)
            rows.append(None if kind > 0.9 else CodecChunkSchedule(SCHEDULE, stream=stream))
        last = [rng.random() < 0.02 for _ in rows]
        expected = pairwise_ends(rows, last)
        assert end_chunks(rows, last) == expected
        rows = [r for r, end in zip(rows, last, strict=True) if not end]


def test_a_schedule_of_no_frames_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        CodecChunkSchedule((2, 0))
    with pytest.raises(ValueError, match="positive"):
        CodecChunkSchedule(())
