"""POST /v1/audio/speech behaves as OpenAI's does for the clients built on it (pipecat, LiveKit, RealtimeTTS)."""

from __future__ import annotations

import httpx
import openai

from speakwire.engines.base import EngineInfo
from speakwire.engines.piper import PiperEngine
from speakwire.server.state import ServerState
from speakwire.settings import PRESET_SPEAKER_ALIASES, Settings
from support.live_server import LiveServer, start_server

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. "
    "Is there anything else I can help you with today? We can also change the delivery address, "
    "set up a pickup at the store, or send you updates by text message as the parcel moves. "
    "Just say the word and I will take care of it right away."
)


def test_pcm_without_stream_format_streams_while_it_is_synthesized(server: LiveServer) -> None:
    """pipecat's request: the openai SDK's streaming response, response_format pcm, no stream_format."""
    client = openai.OpenAI(api_key="local", base_url=f"{server.url}/v1")
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input=PARAGRAPH, response_format="pcm", extra_body={"seed": 5}
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert "content-length" not in response.headers  # chunked: sent as produced, not after the whole synthesis
        chunks = response.iter_bytes(4800)
        first = next(chunks)
        # The first audio is in the client's hands while the paragraph is still being synthesized.
        still_synthesizing = server.state.pipeline.active
        rest = b"".join(chunks)
    assert len(first) == 4800
    assert still_synthesizing == 1
    body = {"input": PARAGRAPH, "response_format": "pcm", "stream_format": "audio", "seed": 5}
    whole = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60).content
    assert first + rest == whole


def test_unknown_fields_and_nulls_are_accepted_and_named(server: LiveServer) -> None:
    """RealtimeTTS sends temperature and top_p, and "instructions": null."""
    body = {"input": "Hello there.", "model": "tts-1", "voice": "nova", "response_format": "pcm",
            "instructions": None, "speed": None, "temperature": 0.8, "top_p": 0.9, "stream": True}  # fmt: skip
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["x-ignored-fields"] == "temperature, top_p"
    assert response.headers["content-type"] == "audio/pcm"  # stream: true from a raw-audio client stays raw
    assert len(response.content) > 0 and len(response.content) % 2 == 0


def test_stream_true_is_sse_for_a_client_that_accepts_event_streams(server: LiveServer) -> None:
    body = {"input": "Hello there.", "response_format": "pcm", "stream": True}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60,
                          headers={"accept": "text/event-stream"})  # fmt: skip
    assert response.headers["content-type"].startswith("text/event-stream")
    assert '"speech.audio.done"' in response.text


def test_wav_without_stream_format_is_a_whole_file_with_real_sizes(server: LiveServer) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Hi.", "response_format": "wav"}, timeout=60)
    assert int(response.headers["content-length"]) == len(response.content)


def test_qwen3_preset_speakers_speak_with_the_default_voice_on_piper(server: LiveServer) -> None:
    """The AWS sample's client sends voice "Vivian"; a laptop's Piper server answers it with its own voice."""
    default = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                         json={"input": "Hello there.", "response_format": "pcm", "seed": 1}).content  # fmt: skip
    for voice in ("Vivian", "ryan", "Ono_Anna"):
        body = {"input": "Hello there.", "voice": voice, "response_format": "pcm", "seed": 1}
        response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
        assert response.status_code == 200, (voice, response.text)
        assert response.content == default


def test_preset_aliases_can_be_turned_off(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(preset_voice_aliases=False), engine=piper_engine)
    try:
        response = httpx.post(f"{live.url}/v1/audio/speech", timeout=60,
                              json={"input": "Hi.", "voice": "Vivian", "response_format": "pcm"})  # fmt: skip
        assert response.status_code == 404
        assert "Vivian" in response.json()["error"]["message"]
    finally:
        live.stop()


def test_an_alias_never_hides_a_voice_the_engine_has() -> None:
    state = ServerState(Settings())
    info = EngineInfo(name="qwen3", model="m", sample_rate=24000, voices=("Vivian", "Ryan"))
    aliases = state.voice_aliases(info)
    assert "vivian" not in aliases and "ryan" not in aliases
    assert aliases["alloy"] == "Vivian" and aliases["serena"] == "Vivian"
    assert {name.lower() for name in PRESET_SPEAKER_ALIASES} - {"vivian", "ryan"} <= set(aliases)
