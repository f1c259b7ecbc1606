"""A row's text feed against the generation loop: tokenized outside the lock the loop reads under, in order.

The loop reads every row's text track each step; a feed that tokenized under that lock made the step wait
for the tokenizer. These tests hold a real feed inside the real tokenizer (the tiny checkpoint's, wrapped
to wait on a handshake) and check what the loop and other threads can do meanwhile. The text track's
incremental commits are also checked against the checkpoint's one-shot tokenization, and its
``char_position`` against the rebuild-per-call lookup it replaced.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_rows import collect, prepared

from speakwire.engines.qwen3.text_track import TextTrack, stable_cut

pytestmark = pytest.mark.qwen

WAIT_S = 30.0
"""Only a bound on a handshake that must happen (a failure, not a timing): never reached when it passes."""

SAMPLES = [
    "hello world, this is a tiny test. hello world, this is a tiny test.",
    "It costs $3.50, or 1,000 yen; call 555-0199 at 3:30 p.m.",
    "Dr. Smith's well-known paper (2019) says: \"don't panic\"...",
    "Line one.\nLine two.\n\nA new paragraph   with  odd   spacing.",
    "你好，世界。今天天气很好！",
    "こんにちは、世界。Ça va très bien, merci.",
]


class HeldTokenizer:
    """The checkpoint's own tokenizer; while ``hold`` is set, each call first runs ``while_held`` and counts."""

    def __init__(self, tokenize: Callable[[str], list[int]]) -> None:
        self._tokenize = tokenize
        self.hold = False
        self.while_held: Callable[[], None] = lambda: None
        self.held_calls = 0

    def __call__(self, text: str) -> list[int]:
        if self.hold:
            self.held_calls += 1
            self.while_held()
        return self._tokenize(text)


@pytest.fixture
def held(custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldTokenizer]:
    prompts = custom_voice_engine.loop.prompts
    wrapper = HeldTokenizer(prompts.tokenize)
    monkeypatch.setattr(prompts, "tokenize", wrapper)  # rows opened from here on tokenize through it
    yield wrapper


def state_from_another_thread(row: Any) -> Any:
    """``row.text_state()`` taken on another thread, or None if it could not be taken (the lock was held)."""
    return from_another_thread(row.text_state)


def from_another_thread(read: Callable[[], Any]) -> Any:
    """``read()`` run on another thread, or None if it did not return within ``WAIT_S`` (it waited on a lock)."""
    taken: list[Any] = []
    reader = threading.Thread(target=lambda: taken.append(read()), daemon=True)
    reader.start()
    reader.join(WAIT_S)
    return taken[0] if taken else None


def _request(engine: Any, frames: int) -> Any:
    return prepared(engine, greedy=True, seed=3, max_new_tokens=frames, voice="ryan", language="english")


def test_the_loop_keeps_stepping_and_reading_the_row_while_a_feed_tokenizes(
    custom_voice_engine: Any, held: HeldTokenizer
) -> None:
    loop = custom_voice_engine.loop
    busy = custom_voice_engine.open_row(_request(custom_voice_engine, 2000))  # keeps the loop stepping
    busy.feed(SAMPLES[0])
    busy.finish()
    row = custom_voice_engine.open_row(_request(custom_voice_engine, 2000))
    row.feed("hello world, ")
    before = row.text_state()[0]
    seen: dict[str, Any] = {}

    def while_held() -> None:
        # The loop reads this row's track on every pass (admit, or each step): it must get past it now.
        target = loop.stats.steps + 3
        deadline = time.monotonic() + WAIT_S
        while loop.stats.steps < target and time.monotonic() < deadline:
            time.sleep(0.002)
        seen["stepped"] = loop.stats.steps >= target
        seen["state"] = state_from_another_thread(row)
        seen["read"] = from_another_thread(lambda: row.text_read(len(before)))

    held.while_held = while_held
    held.hold = True
    row.feed("this is a tiny test. ")
    held.hold = False
    assert held.held_calls == 1
    assert seen["stepped"]
    assert seen["state"] == (before, False)  # the new tokens appear only once tokenized, all at once
    assert seen["read"] == len("hello world,")
    assert row.text_state()[0][: len(before)] == before and len(row.text_state()[0]) > len(before)
    row.cancel()
    busy.cancel()
    collect(row)
    collect(busy)


def test_a_finish_racing_a_feed_waits_for_it_and_the_track_is_the_whole_texts(
    custom_voice_engine: Any, held: HeldTokenizer
) -> None:
    row = custom_voice_engine.open_row(_request(custom_voice_engine, 20))
    finisher = threading.Thread(target=row.finish)
    done_during_tokenize: list[bool | None] = []

    def while_held() -> None:
        if threading.current_thread() is not finisher:
            finisher.start()
            finisher.join(0.2)  # a chance to run: it cannot end, it waits for this feed
        state = state_from_another_thread(row)
        done_during_tokenize.append(None if state is None else state[1])

    held.while_held = while_held
    held.hold = True
    row.feed("hello world, this is")
    finisher.join(WAIT_S)
    held.hold = False
    assert done_during_tokenize == [False, False]  # the feed's tokenization, then the finish's
    ids, done = row.text_state()
    assert done and ids == held("hello world, this is")
    collect(row)


def _split_sample(data: Any) -> tuple[str, list[str]]:
    """One of ``SAMPLES`` and the pieces it is fed in, cut at up to 16 drawn places."""
    text = data.draw(st.sampled_from(SAMPLES))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=16)))
    return text, [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_incremental_commits_give_the_checkpoints_one_shot_tokens(custom_voice_engine: Any, data: Any) -> None:
    tokenize = custom_voice_engine.loop.prompts.tokenize
    text, pieces = _split_sample(data)
    track = TextTrack(tokenize)
    for piece in pieces:
        track.feed(piece)
    track.finish()
    assert track.ids == tokenize(text)


def _old_char_position(checkpoints: list[tuple[int, int]], text: str, tokens_read: int) -> int:
    """``char_position`` as it was: the checkpoints' counts rebuilt on every call."""
    counts = [count for count, _ in checkpoints]
    index = bisect.bisect_left(counts, tokens_read)
    return len(text) if index >= len(checkpoints) else checkpoints[index][1]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_char_position_is_the_old_lookup_at_every_position(custom_voice_engine: Any, data: Any) -> None:
    tokenize = custom_voice_engine.loop.prompts.tokenize
    _, pieces = _split_sample(data)
    track = TextTrack(tokenize)
    checkpoints: list[tuple[int, int]] = []
    for index, piece in enumerate([*pieces, None]):
        if piece is None:
            track.finish()
            cut = len(track.text)
        else:
            track.feed(piece)
            cut = stable_cut(track.text)
        if cut and (not checkpoints or cut > checkpoints[-1][1]):
            checkpoints.append((len(track.ids), cut))
        for tokens_read in range(len(track.ids) + 3):
            assert track.char_position(tokens_read) == _old_char_position(checkpoints, track.text, tokens_read), (
                index,
                tokens_read,
            )


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from("ab 1.,'-\n\t你。")), prefix=st.integers(0, 40))
def test_a_cut_found_from_an_earlier_cut_is_the_cut_of_the_whole_text(text: str, prefix: int) -> None:
    floor = stable_cut(text[:prefix])
    assert stable_cut(text, floor) == stable_cut(text)
