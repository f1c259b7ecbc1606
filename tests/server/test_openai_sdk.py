"""The official openai SDK works against speakwire unchanged (the README's example)."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server


def client_for(server: LiveServer, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=api_key)


def test_streaming_pcm_with_the_sdk(server: LiveServer) -> None:
    client = client_for(server)
    pcm = bytearray()
    chunks = 0
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello from the OpenAI SDK. It just works.", response_format="pcm"
    ) as response:
        assert response.headers["x-audio-sample-rate"] == "24000"
        for chunk in response.iter_bytes(4096):
            pcm.extend(chunk)
            chunks += 1
    assert len(pcm) > 24000 * 2 and len(pcm) % 2 == 0
    assert chunks > 1


def test_sse_with_the_sdk_parameter_and_extra_body(server: LiveServer) -> None:
    client = client_for(server)
    for kwargs in ({"stream_format": "sse"}, {"extra_body": {"stream_format": "sse"}}):
        with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="coral", input="Server sent events.", response_format="pcm", **kwargs
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            body = response.read().decode()
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
        audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
        assert events[-1]["type"] == "speech.audio.done"
        assert len(audio) > 24000


def test_sdk_errors_are_typed(server: LiveServer) -> None:
    client = client_for(server)
    with pytest.raises(openai.NotFoundError) as missing:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hi")
    assert "en_US-joe-medium" in str(missing.value)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="alloy", input="Hi", speed=10)


def test_api_key_is_required_when_configured(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(api_key="k3y"), engine=piper_engine)
    try:
        with pytest.raises(openai.AuthenticationError):
            client_for(live, "wrong").audio.speech.create(model="tts-1", voice="alloy", input="Hi")
        audio = client_for(live, "k3y").audio.speech.create(
            model="tts-1", voice="alloy", input="Hi", response_format="wav"
        )
        assert audio.content[:4] == b"RIFF"
    finally:
        live.stop()
