"""Aligners chosen by name: ``none``, ``pocketsphinx``, ``qwen3:<model>``, and what ``auto`` resolves to.

``auto`` is the default of ``--aligner``: an engine's own timings where it has them (Piper's are exact), else
PocketSphinx for English when the ``[align]`` extra is installed, else none (``auto`` never picks Qwen3-ForcedAligner:
it needs a model the operator names). A name given explicitly wins over the engine's own timings, so the two can
be compared. ``qwen3:`` takes a local directory or a hub id after the colon, spelled as given (paths and hub ids
are case-sensitive); the rest of a name is read in lowercase.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from speakwire.aligners.base import Aligner, AlignerOptions

NONE = "none"
AUTO = "auto"
QWEN3 = "qwen3:"
"""The prefix of ``qwen3:<model>``: Qwen3-ForcedAligner from a local directory or a hub id."""


def _pocketsphinx() -> Aligner:
    from speakwire.aligners.pocketsphinx import PocketSphinxAligner

    return PocketSphinxAligner.load()


_LOADERS: dict[str, Callable[[], Aligner]] = {"pocketsphinx": _pocketsphinx}
_LANGUAGES: dict[str, frozenset[str]] = {"pocketsphinx": frozenset({"english"})}
_ISO_639_1 = {
    "english": "en", "chinese": "zh", "japanese": "ja", "korean": "ko", "german": "de", "french": "fr",
    "spanish": "es", "portuguese": "pt", "italian": "it", "russian": "ru", "arabic": "ar", "indonesian": "id",
}  # fmt: skip
NAMES = (AUTO, NONE, *_LOADERS)
"""The plain names ``load_aligner`` and ``resolve_auto`` know (besides ``qwen3:<model>``), for help and errors."""


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


def canonical_name(raw: str) -> str:
    """``raw`` as the registry knows it (``" PocketSphinx "`` → ``pocketsphinx``; ``qwen3:`` keeps its model's case).

    Raises:
        ValueError: an unknown name, or ``qwen3:`` without a model (the message lists the known ones).
    """
    name = raw.strip()
    if name[: len(QWEN3)].lower() == QWEN3:
        model = name[len(QWEN3) :].strip()
        if not model:
            raise ValueError(f"aligner {raw!r} names no model: qwen3:<local directory or hub id>")
        return QWEN3 + model
    name = name.lower()
    if name not in NAMES:
        raise ValueError(f"unknown aligner {raw!r}; choose one of: {', '.join(NAMES)}, {QWEN3}<model>")
    return name


def load_aligner(name: str, options: AlignerOptions | None = None) -> Aligner | None:
    """Load the aligner called ``name``; ``none`` gives None (resolve ``auto`` first with ``resolve_auto``).

    Args:
        name: a plain name (``pocketsphinx``, a registered one) or ``qwen3:<local directory or hub id>``.
        options: where a model aligner runs and whether it may download (``AlignerOptions``).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        MissingExtraError: the aligner's extra is not installed (the message has the pip command).
        FileNotFoundError: ``qwen3:`` names a directory that does not exist, or a hub id that is not downloaded.
    """
    name = canonical_name(name)
    if name == NONE:
        return None
    if name.startswith(QWEN3):
        from speakwire.aligners.qwen3 import Qwen3Aligner

        return Qwen3Aligner.load(name[len(QWEN3) :], options or AlignerOptions())
    loader = _LOADERS.get(name)
    if loader is None:
        raise ValueError(f"unknown aligner {name!r}; choose one of: {', '.join(NAMES)}, {QWEN3}<model>")
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
