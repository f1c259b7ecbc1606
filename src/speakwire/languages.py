"""Language names as our engines spell them: the ones Qwen3-TTS speaks (vLLM-Omni's spelling, matched
case-insensitively), and codes (``en-US``, ``en``) mapped to those names for protocols that send codes."""

from __future__ import annotations

import re
from collections.abc import Iterable

QWEN3_LANGUAGES = (
    "Auto",
    "Chinese",
    "English",
    "Japanese",
    "Korean",
    "German",
    "French",
    "Russian",
    "Portuguese",
    "Spanish",
    "Italian",
)

ISO_639_1_NAMES = {
    "en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "de": "German", "fr": "French",
    "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian",
}  # fmt: skip
"""Language codes in the spelling our engines use (``language`` names)."""


def language_name(code: str) -> str:
    """A BCP-47 tag (``en-US``) or ISO 639-1 code (``en``) as our engines name the language (``English``);
    a code not listed is returned as given, for the engine to accept or refuse."""
    code = code.strip()
    return ISO_639_1_NAMES.get(code.split("-")[0].split("_")[0].lower(), code)


def accepted_pattern(languages: Iterable[str]) -> str:
    """A JSON Schema (ECMA-262) pattern for exactly the strings ``language_name`` turns into one of ``languages``
    or ``Auto``, as engines compare them (any case, spaces around): ``en``, ``en-US``, ``EN_gb``, ``english``; and
    the empty string, which every protocol takes as "not sent".

    A request schema states it for its language field, so a client (or a fuzzer) keeping to the document is not
    refused for a language the engine does not speak.
    """
    names = {name.lower() for name in languages} | {"auto"}
    codes = sorted(code for code, name in ISO_639_1_NAMES.items() if name.lower() in names)
    spelled = sorted(name for name in names if name not in ISO_639_1_NAMES and not {"-", "_"} & set(name))
    coded = f"(?:{'|'.join(_any_case(code) for code in codes)})(?:[-_][\\s\\S]*)?" if codes else None
    alternatives = [part for part in (coded, *(_any_case(name) for name in spelled)) if part]
    return rf"^\s*(?:{'|'.join(alternatives)})?\s*$"


def names_pattern(names: Iterable[str]) -> str:
    """A JSON Schema pattern for exactly ``names``, any case, spaces around, or nothing (``language`` of a voice)."""
    return rf"^\s*(?:{'|'.join(_any_case(name) for name in sorted(names))})?\s*$"


def _any_case(word: str) -> str:
    """``word`` as a case-insensitive ECMA-262 pattern (``en`` → ``[Ee][Nn]``): JSON Schema has no ``i`` flag."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.lower() != c.upper() else re.escape(c) for c in word)
