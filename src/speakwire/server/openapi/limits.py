"""What a request schema can only state once the server runs: the text limit and what the engine does.

A route's schema is fixed when its module is imported. Fields that hold text to speak are declared with
``speech_text()``, and the document a server serves states that field's real ``maxLength``
(``set_text_limits``: the operator's ``--max-input-chars``), so a client or a fuzzer that keeps to the
document is not refused for length. Language fields are declared with ``spoken_language()`` and get the pattern
of what the loaded engine speaks; fields only some engines take (``engine_capability()``: reference audio to clone
from, style instructions) are documented as ``null``-only (a switch: ``false`` or ``null``) when the loaded engine
cannot use them (``set_engine_fields``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from speakwire.engines.base import EngineInfo
from speakwire.languages import accepted_pattern

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


LANGUAGE_FIELD = "x-speakwire-language"
"""Marks a language field; ``set_engine_fields`` replaces it with the engine's ``pattern``."""


def spoken_language(description: str = "") -> dict[str, Any]:
    """Marks a language field (a string: a name such as ``English``, an ISO 639-1 code, or a tag such as ``en-US``)."""
    text = "A language the engine speaks: its name, ISO 639-1 code or a tag such as en-US; Auto to let it tell."
    return {LANGUAGE_FIELD: True, "description": f"{description} {text}".strip()}


CAPABILITY_FIELD = "x-speakwire-engine-capability"
"""Marks a field only engines with a capability take (its value: the ``EngineInfo`` flag, e.g. ``supports_cloning``)."""


def engine_capability(flag: str) -> dict[str, Any]:
    """Marks a field that only an engine with ``EngineInfo.<flag>`` takes."""
    return {CAPABILITY_FIELD: flag}


def set_engine_fields(node: Any, info: EngineInfo | None) -> None:
    """Complete ``node`` (a document, in place) for the engine ``info`` describes: language fields get the pattern
    of its languages, and fields it cannot use become ``null``-only (sending one is a 400). With None (no engine
    loaded yet) the marks are dropped and the fields stay as declared."""
    pattern = None if info is None else accepted_pattern(info.languages)
    for schema in _schemas(node):
        if schema.pop(LANGUAGE_FIELD, False) and pattern is not None:
            schema["pattern"] = pattern
        flag = schema.pop(CAPABILITY_FIELD, None)
        if flag is not None and info is not None and not getattr(info, flag):
            description = f"Not taken by this server's engine ({info.name}): leave it out."
            anyof = schema.get("anyOf", ())
            switch = schema.get("type") == "boolean" or any(b.get("type") == "boolean" for b in anyof)
            schema.clear()  # a switch may still be sent off
            schema.update({"enum": [False, None]} if switch else {"type": "null"}, description=description)


def set_text_limits(node: Any, max_chars: int) -> None:
    """Give every field marked by ``speech_text()`` in ``node`` (a document, in place) ``maxLength: max_chars``."""
    for schema in _schemas(node):
        if schema.pop(TEXT_LIMIT, False):
            schema["maxLength"] = max_chars


def _schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every object in ``node`` (a document), each before what it holds, so a caller may rewrite it in place."""
    if isinstance(node, dict):
        yield node
        for value in list(node.values()):
            yield from _schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schemas(value)
