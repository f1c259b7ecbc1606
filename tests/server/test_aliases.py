"""Configured aliases: --voice-alias and --model-alias extend the OpenAI names."""

from __future__ import annotations

import httpx

from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from speakwire.engines.piper import PiperEngine
from support.live_server import start_server


def test_alias_flags_reach_the_server(piper_engine: PiperEngine) -> None:
    args = build_parser().parse_args(
        ["serve", "--voice-alias", "Narrator=en_US-joe-medium", "--model-alias", "my-tts=x"]
    )
    settings = build_settings(args)
    assert settings.voice_aliases == {"Narrator": "en_US-joe-medium"}
    live = start_server(settings, engine=piper_engine)
    try:
        body = {"input": "Hi.", "voice": "narrator", "model": "my-tts", "response_format": "pcm"}
        ok = httpx.post(f"{live.url}/v1/audio/speech", json=body)
        assert ok.status_code == 200, ok.text
        voices = httpx.get(f"{live.url}/v1/audio/voices").json()
        assert voices["aliases"]["narrator"] == "en_US-joe-medium"
    finally:
        live.stop()
