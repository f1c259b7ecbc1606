"""The target text of one utterance as talker tokens, committed while the text is still arriving.

The talker reads its text track one token per frame, so tokens can be handed to a
running generation as the client sends text. A token may only be handed over once
no later text can change it: the unfinished last word is held back. Qwen's
pre-tokenizer never lets a token cross from a word into a following space, nor
from a letter into following punctuation, so the tokens of the text up to such a
cut are exactly the first tokens of the whole text (``stable_cut``), and the tokens
between two cuts are the tokens of that stretch alone: each commit tokenizes only
the text since the last cut. That holds because the split pattern has no lookbehind
(matching from a boundary does not see the text before it) and NFC never composes
a space or punctuation mark with the character before it; an added token (``<|…|>``)
written in the text and cut in two is the one case it does not cover, and there the
one-shot tokenization itself is not reachable by streaming. The test suite checks
that incremental commits equal one-shot tokenization.

A feed or finish is two steps so that its tokenization can run outside the lock the
generation loop reads the track under: ``prepare_feed`` / ``prepare_finish`` tokenize
and change nothing, ``apply`` swaps the result in (``Row.feed``).

No torch here: ``tokenize`` maps a text to its token ids (the package's own
tokenization of ``<|im_start|>assistant\\n{text}<|im_end|>...``, sliced to the text).
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

_SPACES = " \t\u00a0\u3000"


def stable_cut(text: str, floor: int = 0) -> int:
    """Length of the longest prefix of ``text`` whose tokens no later text can change.

    ``floor``: a cut already known (a stable cut of a prefix of ``text`` stays one); the scan stops there and
    returns it when there is none after it.
    """
    for i in range(len(text) - 1, max(floor, 0), -1):
        here, before = text[i], text[i - 1]
        if before.isspace():
            continue
        if here in _SPACES:
            return i
        if before.isalnum() and _is_punctuation(here):
            return i
    return floor


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P") and char not in "'’"


@dataclass(frozen=True, slots=True)
class Commit:
    """What one feed or finish adds to a track, computed without changing it (``TextTrack.apply``)."""

    base: int
    """Characters of the track's text it was computed from: it applies to that text only."""
    text: str
    """The whole text after it."""
    cut: int
    """Characters covered by the committed tokens after it."""
    ids: list[int]
    """Tokens it commits."""
    done: bool


class TextTrack:
    """Committed target-text tokens of one utterance, with the character each token ends at."""

    def __init__(self, tokenize: Callable[[str], list[int]]) -> None:
        self._tokenize = tokenize
        self._text = ""
        self.ids: list[int] = []
        self.done = False
        self._cut = 0
        self._counts: list[int] = []
        self._cuts: list[int] = []
        """Per commit, the tokens committed after it and the characters they cover, for ``char_position``."""

    @property
    def text(self) -> str:
        return self._text

    def feed(self, text: str) -> int:
        """Add text; returns how many tokens became committed."""
        return self.apply(self.prepare_feed(text))

    def finish(self) -> int:
        """No more text: commit the rest. Returns how many tokens that added."""
        return self.apply(self.prepare_finish())

    def prepare_feed(self, text: str) -> Commit:
        """What feeding ``text`` commits (tokenizes the text since the last cut; changes nothing)."""
        if self.done:
            raise RuntimeError("text track is finished")
        if not self._text:
            text = text.lstrip()
        whole = self._text + text
        return self._prepared(whole, stable_cut(whole, self._cut), done=False)

    def prepare_finish(self) -> Commit:
        """What finishing commits: the rest of the text (changes nothing)."""
        if self.done:
            return Commit(len(self._text), self._text, self._cut, [], True)
        whole = self._text.rstrip()
        return self._prepared(whole, len(whole), done=True)

    def apply(self, commit: Commit) -> int:
        """Take a prepared commit; returns how many tokens it added."""
        if commit.base != len(self._text) or self.done:
            raise RuntimeError("text track changed since the commit was prepared")
        self._text = commit.text
        self.done = commit.done
        if commit.cut > self._cut:
            self.ids.extend(commit.ids)
            self._cut = commit.cut
            self._counts.append(len(self.ids))
            self._cuts.append(commit.cut)
        return len(commit.ids)

    def char_position(self, tokens_read: int) -> int:
        """Characters of the text covered once ``tokens_read`` tokens have been read."""
        index = bisect.bisect_left(self._counts, tokens_read)
        if index >= len(self._cuts):
            return len(self._text)
        return self._cuts[index]

    def _prepared(self, whole: str, cut: int, *, done: bool) -> Commit:
        if cut <= self._cut:
            return Commit(len(self._text), whole, self._cut, [], done)
        return Commit(len(self._text), whole, cut, self._tokenize(whole[self._cut : cut]), done)
