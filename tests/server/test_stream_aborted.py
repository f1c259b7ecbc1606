"""Over a real server: a sentence that fails after audio has gone out ends the streamed HTTP body short.

A client must not take the audio it got for the whole utterance: the body is cut (no last chunk), the slot is
given back, a log line says why, and the next request is served whole. The failure is injected into the real
Piper engine's ``synthesize`` for one sentence (a full disk or a lost GPU cannot be had here on demand).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

FAILS = "Nobody hears this sentence."
TEXT = f"The first sentence is heard. {FAILS} Nor this one."


@pytest.fixture
def server(piper_engine: PiperEngine, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    real = piper_engine.synthesize

    def synthesize(text: str, *args: Any, **kwargs: Any) -> Any:
        if "Nobody" in text:
            raise RuntimeError("the engine failed (injected)")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(piper_engine, "synthesize", synthesize)
    live = start_server(Settings(), engine=piper_engine)
    yield live
    live.stop()


def active_streams(live: LiveServer) -> int:
    active: int = httpx.get(f"{live.url}/ready").json()["load"]["active_streams"]
    return active


ROUTES = [
    ("/v1/audio/speech", {"input": TEXT, "response_format": "pcm", "stream_format": "audio"}),
    ("/v1/text-to-speech/en_US-joe-medium/stream", {"text": TEXT}),
    ("/tts/bytes", {"model_id": "sonic-3", "transcript": TEXT, "voice": {"mode": "id", "id": "alloy"},
                    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["openai", "elevenlabs", "cartesia"])
def test_a_sentence_failing_mid_stream_cuts_the_body_and_the_server_goes_on(
    server: LiveServer, path: str, body: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    received = bytearray()
    headers = {"Cartesia-Version": "2025-04-16"}
    with (
        caplog.at_level(logging.ERROR, logger="speakwire.server.audio_response"),
        pytest.raises(httpx.RemoteProtocolError),  # the body ends without its last chunk
        httpx.stream("POST", f"{server.url}{path}", json=body, headers=headers, timeout=60) as response,
    ):
        assert response.status_code == 200, response.read()
        for data in response.iter_bytes():
            received += data
    assert len(received) > 0, "the first sentence's audio went out before the failure"
    assert any("aborting the" in r.getMessage() and "injected" in r.getMessage() for r in caplog.records)
    assert active_streams(server) == 0

    whole = httpx.post(f"{server.url}{path}", json={**body, **_spoken(path, "The first sentence is heard.")},
                       headers=headers, timeout=60)  # fmt: skip
    assert whole.status_code == 200 and len(whole.content) > 0
    assert active_streams(server) == 0


def _spoken(path: str, text: str) -> dict[str, object]:
    """The body's text field for ``path`` set to ``text``."""
    field = {"/v1/audio/speech": "input", "/tts/bytes": "transcript"}.get(path, "text")
    return {field: text}
