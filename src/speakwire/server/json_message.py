"""Parsing a client's JSON: the one ``json.loads`` every protocol's messages go through, and its fields' kinds.

CPython's JSON decoder recurses once per nested array or object and raises ``RecursionError`` past the
interpreter's recursion limit, not ``json.JSONDecodeError``: a few kilobytes of ``[`` slipped past every dialect's
bad-JSON answer and ended the session as an internal error (a traceback in the log, close 1011, Wyoming's
``internal_error``). Found by the dialect fuzzers (tests/fuzz); here such a message is bad JSON like any other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from speakwire.errors import BadRequestError


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``; raises ``json.JSONDecodeError`` for anything that is not JSON, too deep nesting included.

    Bytes that are not UTF-8 still raise ``UnicodeDecodeError``, as from ``json.loads``.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("Nesting too deep", "", 0) from None


def json_int(value: Any) -> int | None:
    """``value`` as an int when JSON Schema calls it an integer (``20`` and ``20.0`` alike), else None.

    ``true``/``false`` are not integers here, though Python's ``bool`` is an ``int``: a client that sends one
    for a number has made a mistake worth a 400.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def not_bool(value: Any) -> Any:
    """A pydantic ``mode="before"`` check for integer fields: ``true``/``false`` are refused, which pydantic's lax
    ``int`` takes as 1 and 0 (``20.0`` it takes as 20, as JSON Schema does)."""
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true or false")
    return value


def json_bool(message: Mapping[str, Any], key: str, default: bool) -> bool:
    """``message[key]`` as a switch: ``true``/``false``, or ``default`` when absent or null; anything else (``1``,
    ``"yes"``) is a ``BadRequestError`` naming the field."""
    value = message.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequestError(f"{key} must be true or false.", param=key)
    return value
