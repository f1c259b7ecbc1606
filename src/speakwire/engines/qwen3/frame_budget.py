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

from speakwire.text.widths import is_wide

FRAMES_PER_SECOND = 12.5
MAX_FRAMES = 2048
BASE_SECONDS = 2.0
WIDE_CHAR_SECONDS = 0.5
OTHER_CHAR_SECONDS = 0.15


def frame_budget(text: str, max_new_tokens: int | None = None) -> int:
    """The most frames ``text`` may produce; see the module docstring for the formula."""
    text = text.strip()
    return budget_for(len(text), wide_chars(text), max_new_tokens)


def wide_chars(text: str) -> int:
    """How many of ``text``'s characters count as wide (never whitespace, so stripping does not change it)."""
    return sum(1 for char in text if is_wide(char))


def budget_for(chars: int, wide: int, max_new_tokens: int | None = None) -> int:
    """``frame_budget`` of a stripped text of ``chars`` characters, ``wide`` of them wide: a text that grows
    piece by piece counts only its new piece (``Row.feed``)."""
    seconds = BASE_SECONDS + WIDE_CHAR_SECONDS * wide + OTHER_CHAR_SECONDS * (chars - wide)
    budget = min(math.ceil(FRAMES_PER_SECOND * seconds), MAX_FRAMES)
    if max_new_tokens is not None:
        budget = min(budget, max_new_tokens)
    return max(budget, 1)
