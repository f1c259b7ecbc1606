"""Parsing a client's JSON: the one ``json.loads`` every protocol's messages go through.

CPython's JSON decoder recurses once per nested array or object and raises ``RecursionError`` past the
interpreter's recursion limit, not ``json.JSONDecodeError``: a few kilobytes of ``[`` slipped past every dialect's
bad-JSON answer and ended the session as an internal error (a traceback in the log, close 1011, Wyoming's
``internal_error``). Found by the dialect fuzzers (tests/fuzz); here such a message is bad JSON like any other.
"""

from __future__ import annotations

import json
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``; raises ``json.JSONDecodeError`` for anything that is not JSON, too deep nesting included.

    Bytes that are not UTF-8 still raise ``UnicodeDecodeError``, as from ``json.loads``.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("Nesting too deep", "", 0) from None
