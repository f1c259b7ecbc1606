"""How many codec frames an utterance may take before we call it a runaway.

Qwen3-TTS stops when the talker emits codec EOS, but on short or odd input it
can run on without one (babbling, or silence, for minutes). The budget is a
generous upper bound on how long a person takes to read the text aloud:

    seconds = 2 + 0.5 × (CJK / kana / hangul characters) + 0.15 × (other characters)
    frames  = ceil(12.5 × seconds), at most ``MAX_FRAMES`` (and at most ``max_new_tokens``
              when the request sets it)

A fast English reader does ~15 characters/s (0.07 s per character, spaces and
punctuation included) and a Chinese one ~4–5 characters/s (0.2–0.25 s each); the
per-character allowances are about twice those, and the 2 s floor covers a
one-word utterance spoken slowly. ``MAX_FRAMES`` (2048 frames ≈ 164 s) is the
package's own default ``max_new_tokens``: the pipeline cuts text into sentences
long before that.
"""

from __future__ import annotations

import math

FRAMES_PER_SECOND = 12.5
MAX_FRAMES = 2048
BASE_SECONDS = 2.0
WIDE_CHAR_SECONDS = 0.5
OTHER_CHAR_SECONDS = 0.15

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
    """Whether ``char`` is a CJK ideograph, kana or hangul (one spoken syllable or more each)."""
    code = ord(char)
    return any(low <= code <= high for low, high in _WIDE_RANGES)


def frame_budget(text: str, max_new_tokens: int | None = None) -> int:
    """The most frames ``text`` may produce; see the module docstring for the formula."""
    text = text.strip()
    wide = sum(1 for char in text if is_wide(char))
    seconds = BASE_SECONDS + WIDE_CHAR_SECONDS * wide + OTHER_CHAR_SECONDS * (len(text) - wide)
    budget = min(math.ceil(FRAMES_PER_SECOND * seconds), MAX_FRAMES)
    if max_new_tokens is not None:
        budget = min(budget, max_new_tokens)
    return max(budget, 1)
