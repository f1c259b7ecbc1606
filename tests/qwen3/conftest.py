"""Fixtures for the Qwen3 engine: tiny random checkpoints, engines loaded from them, EOS control.

Tests that need the model skip (with the install command as reason) when the
``[qwen]`` extra is not installed; the pure-Python tests here (validation,
frame budget, prompt cache) run everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qwen3_testing import require_qwen_tts

from speakwire.settings import Settings
from support.aligners import register_spread
from support.live_server import LiveServer, start_server


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random checkpoints: base, custom_voice (0.6B), custom_voice_1b7, voice_design."""
    require_qwen_tts()
    import torch

    # A tiny model gains nothing from intra-op threads, and on a busy 2-core CI machine their OpenMP
    # barriers wait on descheduled threads: one thread keeps these tests fast and their timing steady.
    torch.set_num_threads(1)
    from tiny_checkpoint import build_tiny_checkpoints

    return build_tiny_checkpoints(tmp_path_factory.mktemp("qwen3-tiny"))


def _load(tiny_checkpoints: dict[str, Path], name: str) -> Any:
    from speakwire.engines.qwen3 import load_qwen3_engine

    return load_qwen3_engine(str(tiny_checkpoints[name]))


@pytest.fixture(scope="session")
def custom_voice_engine(tiny_checkpoints: dict[str, Path]) -> Any:
    return _load(tiny_checkpoints, "custom_voice")


@pytest.fixture(scope="session")
def custom_voice_1b7_engine(tiny_checkpoints: dict[str, Path]) -> Any:
    return _load(tiny_checkpoints, "custom_voice_1b7")


@pytest.fixture(scope="session")
def voice_design_engine(tiny_checkpoints: dict[str, Path]) -> Any:
    return _load(tiny_checkpoints, "voice_design")


@pytest.fixture(scope="session")
def base_engine(tiny_checkpoints: dict[str, Path]) -> Any:
    return _load(tiny_checkpoints, "base")


@pytest.fixture(scope="module")
def spread_server(tiny_checkpoints: dict[str, Path], custom_voice_engine: Any) -> Iterator[LiveServer]:
    """A server on the tiny custom-voice checkpoint whose words come from ``support.aligners.SpreadAligner``."""
    register_spread()
    settings = Settings(engine="qwen3", model=str(tiny_checkpoints["custom_voice"]), aligner="spread")
    live = start_server(settings, engine=custom_voice_engine)
    yield live
    live.stop()
