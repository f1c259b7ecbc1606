"""Text committed piece by piece gives exactly the tokens of the whole text, with real BPE tokenizers.

Two pre-tokenizers are checked: the tiny checkpoints' (GPT-2's byte-level split) and Qwen2's own split
pattern (from Qwen's ``tokenizer.json``), each over a BPE trained here, so no vocabulary is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speakwire.engines.qwen3.text_track import TextTrack, stable_cut

pytestmark = pytest.mark.qwen

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SAMPLES = [
    "Hello there, how are you today? I'm fine — thanks!",
    "It costs $3.50, or 1,000 yen; call 555-0199 at 3:30 p.m.",
    "Dr. Smith's well-known paper (2019) says: \"don't panic\"...",
    "Line one.\nLine two.\n\nA new paragraph   with  odd   spacing.",
    "你好，世界。今天天气很好！",
    "こんにちは、世界。Ça va très bien, merci.",
]


def _bpe(split: str | None) -> Callable[[str], list[int]]:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE())
    if split is None:
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        bpe.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    bpe.normalizer = tokenizers.normalizers.NFC()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(SAMPLES * 20, trainer)

    def tokenize(text: str) -> list[int]:
        return list(bpe.encode(text).ids)

    return tokenize


@pytest.fixture(scope="module", params=[None, QWEN2_SPLIT], ids=["gpt2-split", "qwen2-split"])
def tokenize(request: Any) -> Callable[[str], list[int]]:
    return _bpe(request.param)


def _fed(tokenize: Callable[[str], list[int]], pieces: list[str]) -> TextTrack:
    track = TextTrack(tokenize)
    for piece in pieces:
        track.feed(piece)
    track.finish()
    return track


@pytest.mark.parametrize("text", SAMPLES)
def test_word_by_word_and_char_by_char_give_the_tokens_of_the_whole_text(
    tokenize: Callable[[str], list[int]], text: str
) -> None:
    whole = tokenize(text)
    assert _fed(tokenize, [text]).ids == whole
    assert _fed(tokenize, list(text)).ids == whole
    assert _fed(tokenize, [w + " " for w in text.split(" ")]).ids == tokenize(text.rstrip() if text else text)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_split_of_the_text_gives_the_tokens_of_the_whole_text(data: st.DataObject) -> None:
    tokenize = _TOKENIZERS.setdefault("qwen2", _bpe(QWEN2_SPLIT))
    text = data.draw(st.sampled_from(SAMPLES))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert _fed(tokenize, pieces).ids == tokenize(text)


_TOKENIZERS: dict[str, Callable[[str], list[int]]] = {}


def test_tokens_are_committed_only_up_to_the_unfinished_word(tokenize: Callable[[str], list[int]]) -> None:
    track = TextTrack(tokenize)
    track.feed("Hello wor")
    assert track.ids == tokenize("Hello")  # "wor" may still become "world"
    track.feed("ld, and")
    assert track.ids == tokenize("Hello world,")
    track.finish()
    assert track.ids == tokenize("Hello world, and")
    assert track.char_position(len(tokenize("Hello"))) == len("Hello")


def test_leading_whitespace_is_not_part_of_the_track(tokenize: Callable[[str], list[int]]) -> None:
    assert _fed(tokenize, ["  ", " Hi there"]).ids == tokenize("Hi there")


def test_a_cut_is_never_inside_a_word_or_a_contraction() -> None:
    assert stable_cut("Hello wor") == len("Hello")
    assert stable_cut("don't") == 0
    assert stable_cut("well-kno") == len("well")
    assert stable_cut("3.14") == 1
    assert stable_cut("你好，世") == 2
    assert stable_cut("Hello.\nWor") == len("Hello")
