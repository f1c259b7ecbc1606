"""Text to speak in a request schema: its limit is the operator's ``--max-input-chars``, known only at start-up.

A route's schema is fixed when its module is imported; fields that hold text to speak are declared with
``speech_text()``, and the document a server serves states that field's real ``maxLength``
(``set_text_limits``), so a client or a fuzzer that keeps to the document is not refused for length.
"""

from __future__ import annotations

from typing import Any

TEXT_LIMIT = "x-speakwire-max-input-chars"
"""Marks a text field whose ``maxLength`` is the server's ``max_input_chars``; ``set_text_limits`` replaces it."""
SPEAKABLE_PATTERN = r"[^\W_]"
"""At least one letter or digit (any script, as Python's ``re`` reads ``\\w``): every protocol refuses text with
nothing to speak (``speech/input_check.py``)."""


def speech_text(description: str) -> dict[str, Any]:
    """The JSON schema of a field holding text to speak: not blank, something to say, at most the server's limit."""
    return {
        "type": "string",
        "minLength": 1,
        "pattern": SPEAKABLE_PATTERN,
        TEXT_LIMIT: True,
        "description": f"{description} At least one letter or digit; at most the server's --max-input-chars.",
    }


def set_text_limits(node: Any, max_chars: int) -> None:
    """Give every field marked by ``speech_text()`` in ``node`` (a document, in place) ``maxLength: max_chars``."""
    if isinstance(node, dict):
        if node.pop(TEXT_LIMIT, False):
            node["maxLength"] = max_chars
        for value in node.values():
            set_text_limits(value, max_chars)
    elif isinstance(node, list):
        for value in node:
            set_text_limits(value, max_chars)
