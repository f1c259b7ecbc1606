"""Over a real server: a volume scales the 16-bit PCM that leaves, though the loop's PCM is usually cast upstream.

The output stage sends the s16le a synthesis worker made with each chunk (``AudioReady.s16le``) only when it
sends samples as they are; with Cartesia's ``generation_config.volume`` it must scale and cast them itself.
A seeded Piper server says the same text with the same samples, so the two answers differ by the volume alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

TEXT = "Half as loud, and otherwise the same."


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(default_seed=7), engine=piper_engine)
    yield live
    live.stop()


def pcm(server: LiveServer, volume: float | None) -> np.ndarray:
    body: dict[str, object] = {
        "model_id": "sonic-3", "transcript": TEXT, "voice": {"mode": "id", "id": "alloy"},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
    }  # fmt: skip
    if volume is not None:
        body["generation_config"] = {"volume": volume}
    response = httpx.post(f"{server.url}/tts/bytes", json=body, headers={"Cartesia-Version": "2025-04-16"},
                          timeout=60)  # fmt: skip
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.int32)


def test_half_volume_is_the_same_audio_at_half_the_amplitude(server: LiveServer) -> None:
    whole, again, half = pcm(server, None), pcm(server, 1.0), pcm(server, 0.5)
    assert np.array_equal(whole, again)  # seeded: the same samples each time
    assert len(half) == len(whole) and np.abs(whole).max() > 1000
    assert np.abs(half * 2 - whole).max() <= 2  # each side rounded to 16 bits once
    assert np.abs(half).max() < np.abs(whole).max() * 0.6
