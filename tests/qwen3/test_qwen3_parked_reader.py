"""Code2wav is told only of chunks a consumer can ask for now: not those of a stream parked at its lead.

An utterance at its lead (``synthesis.utterance``) parks its consumer, which holds the chunk it took and
reads no frame until its listener catches up, while its row keeps generating in step with the others.
Announced to code2wav (``DecodeBatcher.expect``), such a row's chunk ends made code2wav wait for a request
that could not come, on every chunk due while any stream was parked. The loop, the model, the text stream
and code2wav all run for real; the test only listens to what the loop announces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from loop_rows import prepared
from qwen3_testing import steer_eos

from speakwire.engines.qwen3.generation_loop import Frame, Row, RowEnd

pytestmark = pytest.mark.qwen

SCHEDULE = (2, 4, 8, 16, 25)
SENTENCE = "hello world, this is a tiny test of a long answer. "
FRAME = 1920


def announcements(engine: Any, monkeypatch: pytest.MonkeyPatch, *, decode: bool) -> list[tuple[int, int]]:
    """Every ``(step, count)`` the loop announces from now on (passed on to code2wav when ``decode``). Rows
    far ahead of their listener do not sit out: every row of the test steps every step."""
    told: list[tuple[int, int]] = []
    expect = engine.decoding.expect

    def announce(step: int, count: int) -> None:
        told.append((step, count))
        if decode:
            expect(step, count)

    monkeypatch.setattr(engine.loop, "on_chunk_ends", announce)
    monkeypatch.setattr(engine.loop, "max_lead_s", 0.0)
    return told


def frames_to_end(row: Row) -> list[Frame]:
    frames = []
    while not isinstance(event := row.events.get(timeout=60), RowEnd):
        frames.append(event)
    assert event.error is None, event.error
    return frames


def test_a_row_whose_consumer_is_away_is_not_announced_with_the_row_it_is_in_step_with(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = custom_voice_engine
    told = announcements(engine, monkeypatch, decode=False)
    with steer_eos(engine, after=None):  # both rows make their whole budget: every chunk end in step
        req = prepared(engine, voice="ryan", language="english", seed=3, max_new_tokens=40)
        reading = engine.open_row(req, chunks=SCHEDULE, stream=object())
        parked = engine.open_row(req, chunks=SCHEDULE, stream=object())
        parked.consumer_away = True  # as ``Qwen3TextStream`` sets it while its consumer holds a chunk
        for row in (reading, parked):
            row.feed(SENTENCE)
            row.finish()
        read, held = frames_to_end(reading), frames_to_end(parked)

    read_ends = [f.step for f in read if f.chunk_end]
    assert set(read_ends) & {f.step for f in held if f.chunk_end}  # the two rows ended chunks together
    assert told == [(step, 1) for step in read_ends]  # the reading row's ends, one each: never the parked one's
    assert [f.announced for f in read] == [f.chunk_end for f in read]
    assert not any(f.announced for f in held)  # its requests, when it comes back, are untagged


def test_a_parked_stream_is_not_waited_for_while_another_stream_is_read_in_step_with_it(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = custom_voice_engine
    told = announcements(engine, monkeypatch, decode=True)
    parked = engine.open_text_stream(prepared(engine, voice="ryan", language="english", seed=5))
    reading = engine.open_text_stream(prepared(engine, voice="ryan", language="english", seed=6, max_new_tokens=40))
    try:
        with steer_eos(engine, after=None):
            parked.feed(SENTENCE * 4)  # a budget that outlasts the other stream (one row: under the rollover)
            parked.finish()
            parked_chunks = parked.chunks()
            next(parked_chunks)  # its consumer takes one chunk and holds it, as a driver waiting for its listener
            row = parked._pieces[0].row
            assert row is not None and row.consumer_away
            # The row read from here on ends some chunks in a step with the parked one (at least two in 40 frames
            # at any phase: test_a_row_admitted_at_any_phase_of_another_shares_chunk_ends_with_it).
            reading.feed(SENTENCE)  # its row starts only now: no step of it saw the parked consumer reading
            reading.finish()
            audio = [chunk.samples for chunk, _ in reading.chunks()]
            rest = [chunk.samples for chunk, _ in parked_chunks]  # back: the chunks it missed, untagged
    finally:
        parked.cancel()  # a failed test leaves no row generating in the session's engine
        reading.cancel()

    assert sum(len(a) for a in audio) == 40 * FRAME
    assert all(count == 1 for _, count in told)  # the reading stream's chunks alone (the parked one's before)
    assert len(told) >= len(audio) + 1  # every chunk of the reading stream was announced, and waited for
    assert rest and not row.consumer_away and len(np.concatenate(rest)) % FRAME == 0
    assert engine.loop.free_slots == engine.loop.slots


def test_the_next_row_of_a_long_text_is_not_announced_while_its_consumer_is_on_the_previous_one(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long text is several rows; the next opens while the consumer still speaks the previous one's last
    words, and generates while that consumer reads the previous row's backlog or is parked with it. Once the
    previous row has left the loop, the next is its stream's oldest row there, yet nobody reads it yet."""
    engine = custom_voice_engine
    told = announcements(engine, monkeypatch, decode=False)
    stream = engine.open_text_stream(prepared(engine, voice="ryan", language="english", seed=5, max_new_tokens=40))
    try:
        with steer_eos(engine, after=None):
            stream.feed(SENTENCE * 20)  # over the rollover: two rows
            stream.finish()
            assert len(stream._pieces) == 2
            stream._next_piece(0)  # the first row opens with 40 frames to make
            # The tiny model reads a row's text in a few steps; a second row with a longer budget (its request
            # is a copy made when it opens) outlives the first, as a real model's next row does.
            stream._request.max_new_tokens = 200
            chunks = stream.chunks()
            while stream._pieces[1].row is None:
                next(chunks)  # read until only the first row's last words are left: the second opens
            first, second = stream._pieces[0].row, stream._pieces[1].row
            assert first is not None and second is not None
            second_frames = frames_to_end(second)  # the loop makes all of it; the consumer reads none
            first_left = frames_to_end(first)
    finally:
        stream.cancel()

    assert first_left and second_frames[-1].step > first_left[-1].step  # it outlived the first row in the loop
    assert [f.step for f in second_frames if f.chunk_end]  # it ended chunks...
    assert not any(f.announced for f in second_frames)  # ...none announced: nobody was there to ask
    assert not any(step >= second_frames[0].step and step > first_left[-1].step for step, _ in told)
    assert engine.loop.free_slots == engine.loop.slots
