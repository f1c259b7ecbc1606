"""Fixtures for the voice library: a real Piper server (store only: Piper cannot clone) on its own data dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def library_server(piper_engine: PiperEngine, data_dir: Path) -> Iterator[LiveServer]:
    """A server with an empty library of its own, per test (tests here count and crash voices)."""
    live = start_server(Settings(data_dir=str(data_dir)), engine=piper_engine)
    yield live
    live.stop()
