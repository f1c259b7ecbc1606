"""The clone-prompt LRU: equal input hits, anything that changes the prompt misses, size stays bounded."""

from __future__ import annotations

import numpy as np
import pytest

from speakwire.engines.qwen3.prompt_cache import PromptCache, prompt_key

CLIP = np.linspace(-0.5, 0.5, 24_000, dtype=np.float32)


def test_the_same_clip_transcript_mode_and_model_give_the_same_key() -> None:
    assert prompt_key(CLIP, "hello", False, "m") == prompt_key(CLIP.copy(), "hello", False, "m")


@pytest.mark.parametrize(
    "other",
    [
        (CLIP * 0.5, "hello", False, "m"),
        (CLIP, "hello!", False, "m"),
        (CLIP, "hello", True, "m"),
        (CLIP, "hello", False, "another-model"),
    ],
    ids=["audio", "transcript", "mode", "model"],
)
def test_anything_the_prompt_depends_on_changes_the_key(other: tuple[np.ndarray, str, bool, str]) -> None:
    assert prompt_key(*other) != prompt_key(CLIP, "hello", False, "m")


def test_the_transcript_does_not_matter_in_x_vector_only_mode() -> None:
    assert prompt_key(CLIP, "hello", True, "m") == prompt_key(CLIP, None, True, "m")


def test_a_second_lookup_is_a_hit_and_does_not_create_again() -> None:
    cache: PromptCache[str] = PromptCache(4)
    created: list[str] = []

    def create() -> str:
        created.append("x")
        return "prompt"

    assert cache.get_or_create("k", create) == cache.get_or_create("k", create) == "prompt"
    assert (cache.hits, cache.misses, len(created)) == (1, 1, 1)


def test_the_least_recently_used_prompt_is_evicted_at_capacity() -> None:
    cache: PromptCache[int] = PromptCache(2)
    cache.get_or_create("a", lambda: 1)
    cache.get_or_create("b", lambda: 2)
    cache.get_or_create("a", lambda: 1)  # a is now the most recent
    cache.get_or_create("c", lambda: 3)  # evicts b
    assert len(cache) == 2
    assert cache.get_or_create("a", lambda: -1) == 1
    assert cache.get_or_create("b", lambda: -2) == -2  # b was evicted and is created again


def test_capacity_zero_disables_caching() -> None:
    cache: PromptCache[int] = PromptCache(0)
    cache.get_or_create("a", lambda: 1)
    cache.get_or_create("a", lambda: 1)
    assert (cache.hits, cache.misses, len(cache)) == (0, 2, 0)
