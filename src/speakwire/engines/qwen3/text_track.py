"""The target text of one utterance as talker tokens, committed while the text is still arriving.

The talker reads its text track one token per frame, so tokens can be handed to a
running generation as the client sends text. A token may only be handed over once
no later text can change it: the unfinished last word is held back. Qwen's
pre-tokenizer never lets a token cross from a word into a following space, nor
from a letter into following punctuation, so the tokens of the text up to such a
cut are exactly the first tokens of the whole text (``stable_cut``). At the end
(``finish``) the whole text is tokenized once more and must extend what was
committed; the test suite checks that incremental commits equal one-shot
tokenization.

No torch here: ``tokenize`` maps a text to its token ids (the package's own
tokenization of ``<|im_start|>assistant\\n{text}<|im_end|>...``, sliced to the text).
"""

from __future__ import annotations

import bisect
import logging
import unicodedata
from collections.abc import Callable

logger = logging.getLogger(__name__)

_SPACES = " \t\u00a0\u3000"


def stable_cut(text: str) -> int:
    """Length of the longest prefix of ``text`` whose tokens no later text can change."""
    for i in range(len(text) - 1, 0, -1):
        here, before = text[i], text[i - 1]
        if before.isspace():
            continue
        if here in _SPACES:
            return i
        if before.isalnum() and _is_punctuation(here):
            return i
    return 0


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P") and char not in "'’"


class TextTrack:
    """Committed target-text tokens of one utterance, with the character each token ends at."""

    def __init__(self, tokenize: Callable[[str], list[int]]) -> None:
        self._tokenize = tokenize
        self._text = ""
        self.ids: list[int] = []
        self.done = False
        self._checkpoints: list[tuple[int, int]] = []
        """(tokens committed, characters they cover), one per commit, for ``char_position``."""

    @property
    def text(self) -> str:
        return self._text

    def feed(self, text: str) -> int:
        """Add text; returns how many tokens became committed."""
        if self.done:
            raise RuntimeError("text track is finished")
        if not self._text:
            text = text.lstrip()
        self._text += text
        return self._commit(stable_cut(self._text))

    def finish(self) -> int:
        """No more text: commit the rest. Returns how many tokens that added."""
        if self.done:
            return 0
        self._text = self._text.rstrip()
        added = self._commit(len(self._text))
        self.done = True
        return added

    def char_position(self, tokens_read: int) -> int:
        """Characters of the text covered once ``tokens_read`` tokens have been read."""
        counts = [count for count, _ in self._checkpoints]
        index = bisect.bisect_left(counts, tokens_read)
        if index >= len(self._checkpoints):
            return len(self._text)
        return self._checkpoints[index][1]

    def _commit(self, cut: int) -> int:
        if cut == 0 or (self._checkpoints and cut <= self._checkpoints[-1][1]):
            return 0
        ids = self._tokenize(self._text[:cut])
        committed = len(self.ids)
        if ids[:committed] != self.ids:
            # Should not happen with Qwen's pre-tokenizer; keep what the model already read.
            logger.warning("qwen3: tokens changed under already-committed text at %d chars; keeping them", cut)
            return 0
        self.ids.extend(ids[committed:])
        self._checkpoints.append((len(self.ids), cut))
        return len(self.ids) - committed
