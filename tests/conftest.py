"""Shared fixtures: the real embedded Piper voice, and real servers on loopback ports."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer, start_server


@pytest.fixture(scope="session")
def piper_engine() -> PiperEngine:
    return PiperEngine.load()


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(engine=piper_engine)
    yield live
    live.stop()
