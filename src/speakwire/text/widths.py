"""Wide (CJK, kana, hangul) characters: a reader spends about three times as long on each."""

from __future__ import annotations

_WIDE_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x2FA1F),  # CJK Extensions B–F, Compatibility Supplement
)


def is_wide(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _WIDE_RANGES)
