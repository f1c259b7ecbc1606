"""The runaway guard's frame budget: generous for real reading speeds, bounded, and capped by the request."""

from __future__ import annotations

import math

from speakwire.engines.qwen3.frame_budget import FRAMES_PER_SECOND, MAX_FRAMES, frame_budget


def seconds(frames: int) -> float:
    return frames / FRAMES_PER_SECOND


def test_an_english_sentence_gets_about_twice_a_fast_readers_time_plus_two_seconds() -> None:
    text = "The quick brown fox jumps over the lazy dog."  # 44 characters, ~3 s read aloud
    assert frame_budget(text) == math.ceil(12.5 * (2.0 + 0.15 * 44))
    assert 6.0 < seconds(frame_budget(text)) < 10.0


def test_chinese_characters_get_more_time_each_than_latin_letters() -> None:
    chinese = "今天天气真好，我们去公园散步吧。"  # 14 ideographs + 2 punctuation marks, ~4 s read aloud
    assert frame_budget(chinese) == math.ceil(12.5 * (2.0 + 0.5 * 14 + 0.15 * 2))
    assert seconds(frame_budget(chinese)) > 8.0


def test_japanese_kana_and_korean_hangul_count_as_wide() -> None:
    assert frame_budget("こんにちは") == frame_budget("안녕하세요") == math.ceil(12.5 * (2.0 + 0.5 * 5))


def test_a_single_word_still_gets_two_seconds_of_headroom() -> None:
    assert seconds(frame_budget("Hi")) >= 2.0


def test_very_long_text_is_bounded_by_the_package_default() -> None:
    assert frame_budget("word " * 5000) == MAX_FRAMES == 2048


def test_the_requests_max_new_tokens_lowers_but_never_raises_the_budget() -> None:
    assert frame_budget("Hello there, how are you today?", max_new_tokens=10) == 10
    assert frame_budget("Hi", max_new_tokens=4000) == frame_budget("Hi")
