"""Configured aliases: --voice-alias and --model-alias extend the OpenAI names."""

from __future__ import annotations

import httpx

from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer, start_server


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


def test_every_openai_voice_name_speaks_with_the_default_voice(server: LiveServer) -> None:
    from speakwire.settings import OPENAI_VOICE_ALIASES

    assert {"marin", "cedar"} <= set(OPENAI_VOICE_ALIASES) and len(OPENAI_VOICE_ALIASES) == 13
    for voice in OPENAI_VOICE_ALIASES:
        response = httpx.post(f"{server.url}/v1/audio/speech",
                              json={"input": "Hi.", "voice": voice, "response_format": "pcm"}, timeout=60)  # fmt: skip
        assert response.status_code == 200 and len(response.content) > 0, voice
