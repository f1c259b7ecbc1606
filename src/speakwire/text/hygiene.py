"""Text fit for an engine: no control characters, lone surrogates, zero-width or bidi controls.

Text comes from JSON, multipart forms and LLM streams, and may carry bytes no engine should see: a NUL
makes phonemizers raise ("embedded null character"), a lone surrogate (JSON ``"\\ud800"``) cannot be
encoded as UTF-8 at all, and zero-width and bidirectional controls are invisible but still reach the
tokenizer. ``clean_text`` removes them (control whitespace, carriage returns included, becomes a space)
and keeps everything else as it is. Every rule looks at one character, so it is safe to apply to each
piece of a stream: the pieces of a text cleaned one by one join to the whole text cleaned at once.
"""

from __future__ import annotations

import re

_DROP = re.compile(
    "["
    "\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f"  # C0/C1 controls (tab, newlines, NEL handled below)
    "\u200b-\u200f"  # zero-width space/joiners, LRM/RLM
    "\u202a-\u202e"  # bidi embeddings and overrides
    "\u2060-\u2064\u2066-\u2069"  # word joiner, invisible operators, bidi isolates
    "\ufeff"  # zero-width no-break space (BOM)
    "\ufff9-\ufffb"  # interlinear annotation controls
    "\ud800-\udfff"  # lone surrogates
    "]"
)
_SPACE = re.compile("[\r\x0b\x0c\x85\u2028\u2029]")


def clean_text(text: str) -> str:
    """``text`` without characters an engine must not see (see the module docstring)."""
    return _SPACE.sub(" ", _DROP.sub("", text))


def is_speakable(text: str) -> bool:
    """Whether ``text`` holds anything to say: a letter or a digit (any script)."""
    return any(char.isalnum() for char in text)
