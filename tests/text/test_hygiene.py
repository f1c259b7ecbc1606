"""Text hygiene: what no engine may see is removed, everything else is kept, piece by piece as at once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speakwire.text.hygiene import clean_text, is_speakable

CASES = [
    ("NUL", "Hello\x00 world", "Hello world"),
    ("other C0 controls", "a\x01b\x07c\x1bd", "abcd"),
    ("DEL and C1 controls", "a\x7fb\x9bc", "abc"),
    ("lone high surrogate", "Hi \ud800there", "Hi there"),
    ("lone low surrogate", "Hi \udfffthere", "Hi there"),
    ("zero-width space and joiners", "zero\u200bwidth\u200c\u200d", "zerowidth"),
    ("byte order mark", "\ufeffStart", "Start"),
    ("bidi override and isolates", "\u202eevil\u202c \u2066iso\u2069", "evil iso"),
    ("left-to-right and right-to-left marks", "a\u200eb\u200fc", "abc"),
    ("carriage return", "one\r\ntwo\rthree", "one \ntwo three"),
    ("vertical tab, form feed, line separators", "a\x0bb\x0cc\u2028d\u2029e\x85f", "a b c d e f"),
    ("tabs and newlines stay", "a\tb\nc\n\nd", "a\tb\nc\n\nd"),
    ("everything printable stays", "Ça coûte 3,50 € — 你好！ 😀", "Ça coûte 3,50 € — 你好！ 😀"),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_clean_text(text: str, expected: str) -> None:
    assert clean_text(text) == expected


@given(st.text(), st.lists(st.integers(min_value=0), max_size=8))
def test_cleaning_pieces_equals_cleaning_the_whole(text: str, cuts: list[int]) -> None:
    points = sorted({cut % (len(text) + 1) for cut in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert "".join(clean_text(piece) for piece in pieces) == clean_text(text)


@given(st.text())
def test_clean_text_is_always_utf8_encodable_and_idempotent(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert clean_text(cleaned) == cleaned


@pytest.mark.parametrize(("text", "speakable"), [("\x00\u200b \ud800", False), ("...", False), ("a", True),
                                                  ("٣", True), ("你", True)])  # fmt: skip
def test_speakable_means_a_letter_or_a_digit(text: str, speakable: bool) -> None:
    assert is_speakable(clean_text(text)) is speakable
