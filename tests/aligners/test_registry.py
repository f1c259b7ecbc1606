"""Aligners by name, and what ``auto`` chooses for an engine."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from speakwire.aligners.registry import NAMES, load_aligner, resolve_auto, speaks
from speakwire.errors import MissingExtraError


def test_none_loads_no_aligner() -> None:
    assert load_aligner("none") is None


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="pocketsphinx"):
        load_aligner("whisper")
    assert {"auto", "none", "pocketsphinx"} <= set(NAMES)


def test_pocketsphinx_loads_by_name() -> None:
    pytest.importorskip("pocketsphinx")
    aligner = load_aligner("pocketsphinx")
    assert aligner is not None and aligner.name == "pocketsphinx"
    aligner.close()


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def without_pocketsphinx(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pocketsphinx":
            raise ImportError("No module named 'pocketsphinx'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_pocketsphinx)
    with pytest.raises(MissingExtraError, match=r'pip install "speakwire\[align\]"'):
        load_aligner("pocketsphinx")


def test_auto_keeps_an_engines_own_timings() -> None:
    assert resolve_auto(engine_has_timings=True, language="English") == "none"


def test_auto_aligns_english_with_pocketsphinx_and_nothing_else() -> None:
    pytest.importorskip("pocketsphinx")
    assert resolve_auto(engine_has_timings=False, language="English") == "pocketsphinx"
    assert resolve_auto(engine_has_timings=False, language="en-US") == "pocketsphinx"
    assert resolve_auto(engine_has_timings=False, language="Chinese") == "none"
    assert resolve_auto(engine_has_timings=False, language=None) == "none"


def test_language_names_and_codes_match_alike() -> None:
    english = frozenset({"english"})
    assert speaks(english, "English") and speaks(english, "en") and speaks(english, "en_GB")
    assert not speaks(english, "German") and not speaks(english, "")
