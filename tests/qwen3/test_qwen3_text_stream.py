"""Long utterances roll over to new generations at sentence ends, with the same audio however the text arrives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qwen3_testing import steer_eos

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.qwen3 import text_stream
from speakwire.engines.qwen3.text_stream import ROLLOVER_CHARS

pytestmark = pytest.mark.qwen

SENTENCE = "hello world, this is a tiny test of a long answer. "
LONG = (SENTENCE * 30).strip()  # ~1,500 characters: three rows


def request(engine: Any) -> SynthesisRequest:
    req = SynthesisRequest(voice="ryan", language="english", seed=9, max_new_tokens=6)
    return engine.prepare(engine.validate(req))


def speak(engine: Any, pieces: list[str]) -> tuple[Any, list[tuple[np.ndarray, int]]]:
    stream = engine.open_text_stream(request(engine))
    for piece in pieces:
        stream.feed(piece)
    stream.finish()
    return stream, [(chunk.samples, read) for chunk, read in stream.chunks()]


def test_a_long_text_rolls_over_to_new_generations_at_sentence_ends(custom_voice_engine: Any) -> None:
    stream, chunks = speak(custom_voice_engine, [LONG])
    pieces = [piece.text for piece in stream._pieces]
    assert "".join(pieces) == LONG and len(pieces) == stream.rows >= 3
    for piece in pieces[:-1]:
        assert ROLLOVER_CHARS < len(piece) <= ROLLOVER_CHARS + len(SENTENCE) and piece.endswith(". ")
    reads = [read for _, read in chunks]
    assert reads == sorted(reads) and reads[-1] > len(LONG) - len(pieces[-1])  # the last row's text was read
    assert custom_voice_engine.loop.free_slots == custom_voice_engine.loop.slots


def test_a_rolled_over_text_sounds_the_same_sent_word_by_word(custom_voice_engine: Any) -> None:
    words = [word + " " for word in LONG.split(" ")]
    words[-1] = words[-1].rstrip()
    _, whole = speak(custom_voice_engine, [LONG])
    stream, by_word = speak(custom_voice_engine, words)
    assert stream.rows >= 3
    np.testing.assert_array_equal(np.concatenate([s for s, _ in by_word]), np.concatenate([s for s, _ in whole]))


def test_a_short_text_is_one_generation(custom_voice_engine: Any) -> None:
    stream, chunks = speak(custom_voice_engine, [SENTENCE * 3])
    assert stream.rows == 1 and chunks


def test_the_next_generation_opens_while_the_previous_one_speaks_its_last_words(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Opened only at the previous row's end, every rollover left a prefill and a step of silence.
    monkeypatch.setattr(text_stream, "ROLLOVER_CHARS", 40)  # rows of one short sentence, for a fast test
    text = "the first row reads this sentence to its end. and the second row takes over from here."
    with steer_eos(custom_voice_engine, after=None):  # no random early EOS: each row reads all its text
        stream = custom_voice_engine.open_text_stream(request_without_cap(custom_voice_engine))
        stream.feed(text)
        stream.finish()
        first_row_chars = len(stream._pieces[0].text)
        overlapped = False
        for _, read in stream.chunks():
            if read < first_row_chars and stream.rows == 2:
                overlapped = True  # a chunk of the first row, with the second row already generating
    assert stream.rows == 2 and overlapped
    assert custom_voice_engine.loop.free_slots == custom_voice_engine.loop.slots


def request_without_cap(engine: Any) -> SynthesisRequest:
    return engine.prepare(engine.validate(SynthesisRequest(voice="ryan", language="english", seed=9)))
