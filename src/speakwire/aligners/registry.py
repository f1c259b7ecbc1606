"""Aligners chosen by name: ``none``, ``pocketsphinx`` (later ``qwen3:<model>``), and what ``auto`` resolves to.

``auto`` is the default of ``--aligner``: an engine's own timings where it has them (Piper's are exact), else
PocketSphinx for English when the ``[align]`` extra is installed, else none. A name given explicitly wins
over the engine's own timings, so the two can be compared.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from speakwire.aligners.base import Aligner

NONE = "none"
AUTO = "auto"


def _pocketsphinx() -> Aligner:
    from speakwire.aligners.pocketsphinx import PocketSphinxAligner

    return PocketSphinxAligner.load()


_LOADERS: dict[str, Callable[[], Aligner]] = {"pocketsphinx": _pocketsphinx}
_LANGUAGES: dict[str, frozenset[str]] = {"pocketsphinx": frozenset({"english"})}
_ISO_639_1 = {"english": "en"}
NAMES = (AUTO, NONE, *_LOADERS)
"""The names ``load_aligner`` and ``resolve_auto`` know, for help texts and error messages."""


def register_aligner(name: str, loader: Callable[[], Aligner], languages: frozenset[str]) -> None:
    """Make ``load_aligner(name)`` build an aligner with ``loader`` (a plugin's, a test's); ``NAMES`` lists it.

    Args:
        name: what ``--aligner`` calls it.
        loader: builds the aligner (raises ``MissingExtraError`` when its extra is missing).
        languages: the languages it aligns, lowercase English names (``"english"``).
    """
    global NAMES
    _LOADERS[name] = loader
    _LANGUAGES[name] = languages
    NAMES = (AUTO, NONE, *_LOADERS)


def load_aligner(name: str) -> Aligner | None:
    """Load the aligner called ``name``; ``none`` gives None (resolve ``auto`` first with ``resolve_auto``).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        MissingExtraError: the aligner's extra is not installed (the message has the pip command).
    """
    if name == NONE:
        return None
    loader = _LOADERS.get(name)
    if loader is None:
        raise ValueError(f"unknown aligner {name!r}; choose one of: {', '.join(NAMES)}")
    return loader()


def speaks(languages: frozenset[str], language: str | None) -> bool:
    """Whether an aligner for ``languages`` handles ``language`` ("English", "english", "en", "en-US" alike)."""
    if not language:
        return False
    wanted = language.strip().lower()
    code = wanted.replace("_", "-").split("-")[0]
    return wanted in languages or any(_ISO_639_1.get(name) == code for name in languages)


def resolve_auto(*, engine_has_timings: bool, language: str | None) -> str:
    """The aligner ``auto`` means for an engine: ``none`` when it times its own words, else the first that fits.

    Args:
        engine_has_timings: the engine reports word marks itself (Piper).
        language: the voice's language (a name or an ISO code); None when unknown.
    """
    if engine_has_timings:
        return NONE
    if speaks(_LANGUAGES["pocketsphinx"], language) and importlib.util.find_spec("pocketsphinx") is not None:
        return "pocketsphinx"
    return NONE
