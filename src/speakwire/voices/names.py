"""Voice names: what a saved voice may be called, and how two spellings of one name compare.

A name travels in URLs (``DELETE /v1/audio/voices/{name}``), in JSON ``voice``
fields, in shell commands and in export file names, so it is kept to a plain
ASCII token: 1–64 letters, digits, ``-``, ``_`` and ``.``, starting with a letter
or digit (so never ``.``/``..``, a hidden file, or something a shell reads as a
flag). Names never become paths — voices live in directories named by a random
id — so these rules are about being unambiguous everywhere, not the only guard
against path tricks. Names compare case-insensitively, like built-in voices.
"""

from __future__ import annotations

import re

from speakwire.errors import BadRequestError

MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_PATTERN = rf"^\s*[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}\s*$"
"""``validate_name``'s rule as a JSON Schema pattern (surrounding spaces are stripped)."""
_RULE = (
    f"1–{MAX_NAME_LENGTH} characters: letters A–Z, digits, '-', '_' and '.', starting with a letter or digit "
    "(e.g. 'jane-doe' or 'narrator_v2')"
)


def validate_name(value: object, *, param: str = "name") -> str:
    """The name as given (case kept for display), stripped of surrounding spaces.

    Raises:
        BadRequestError: Missing, empty, too long, or with a character outside the rule above.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadRequestError(f"A voice needs a name: {_RULE}.", param=param)
    if not isinstance(value, str):
        raise BadRequestError(f"The voice name must be a string: {_RULE}.", param=param)
    name = value.strip()
    if len(name) > MAX_NAME_LENGTH:
        raise BadRequestError(
            f"Voice name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}. Names are {_RULE}.",
            param=param,
        )
    if not _NAME.fullmatch(name):
        raise BadRequestError(f"Invalid voice name {name!r}. Names are {_RULE}.", param=param)
    return name


def is_valid_name(value: str) -> bool:
    """Whether ``value`` could be a saved voice's name (``validate_name`` would take it): a name that cannot be saved
    cannot exist, so a lookup of anything else needs no library (nor, when the library is S3's, a request)."""
    name = value.strip()
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def name_key(name: str) -> str:
    """The form names are compared and stored unique by: ``Jane`` and ``jane`` are one voice."""
    return name.strip().lower()
