"""Aliases: the voice names stock clients send by default (OpenAI's, and ElevenLabs', Cartesia's and Deepgram's ids,
``speakwire.voice_presets``) mean the default voice on every route; --voice-alias and --model-alias add more."""

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


# ----- the voice ids other vendors' stock clients send (speakwire.voice_presets) ------------------------

ELEVENLABS_BODY = {"text": "Hi.", "model_id": "eleven_flash_v2_5"}


def cartesia_body(voice: str) -> dict[str, object]:
    return {"model_id": "sonic-3", "transcript": "Hi.", "voice": {"mode": "id", "id": voice},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}  # fmt: skip


def elevenlabs_speech(server: LiveServer, voice: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/text-to-speech/{voice}?output_format=pcm_24000", json=ELEVENLABS_BODY,
                      timeout=60)  # fmt: skip


def cartesia_speech(server: LiveServer, voice: str) -> httpx.Response:
    return httpx.post(f"{server.url}/tts/bytes", json=cartesia_body(voice), timeout=60,
                      headers={"Cartesia-Version": "2026-08-14"})  # fmt: skip


def deepgram_speech(server: LiveServer, model: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/speak?model={model}&encoding=linear16", json={"text": "Hi."}, timeout=60)


def test_the_stock_plugins_defaults_are_in_the_tables() -> None:
    """Read from the installed plugins themselves, so a new default fails here instead of in a user's agent."""
    import inspect
    import typing

    from livekit.plugins import cartesia, deepgram, elevenlabs

    from speakwire.voice_presets import CARTESIA_VOICE_IDS, DEEPGRAM_AURA_VOICES, ELEVENLABS_VOICE_IDS

    assert elevenlabs.DEFAULT_VOICE_ID in ELEVENLABS_VOICE_IDS
    assert cartesia.models.TTSDefaultVoiceId in CARTESIA_VOICE_IDS
    aura = [name for name in typing.get_args(deepgram.models.TTSModels) if name.startswith("aura")]
    assert aura and set(aura) <= set(DEEPGRAM_AURA_VOICES)
    assert inspect.signature(deepgram.TTS).parameters["model"].default in DEEPGRAM_AURA_VOICES


def test_each_vendors_stock_voice_ids_speak_with_the_default_voice(server: LiveServer) -> None:
    reference = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                           json={"input": "Hi.", "response_format": "pcm", "seed": 1})  # fmt: skip
    for voice in ("hpp4J3VqNfWAUOO0d1Us", "21m00Tcm4TlvDq8ikWAM", "JBFqnCBsd6RMkjVDRZzb", "pNInz6obpgDQGcFmaJgB"):
        response = elevenlabs_speech(server, voice)
        assert response.status_code == 200 and response.content, (voice, response.text)
    for voice in ("f786b574-daa5-4673-aa0c-cbe3e8534c02", "71a7ad14-091c-4e8e-a314-022ece01c121"):
        response = cartesia_speech(server, voice)
        assert response.status_code == 200 and response.content, (voice, response.text)
    for model in ("aura-2-andromeda-en", "aura-2-helena-en", "aura-asteria-en", "aura-2-celeste-es"):
        response = deepgram_speech(server, model)  # the last is in no table: any Aura name is Deepgram's
        assert response.status_code == 200 and response.content, (model, response.text)
    # One table for every route, as OpenAI's names are: the same seeded audio as the default voice's.
    body = {"input": "Hi.", "response_format": "pcm", "seed": 1, "voice": "hpp4J3VqNfWAUOO0d1Us"}
    same = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert same.status_code == 200 and same.content == reference.content


def test_vendor_ids_are_listed_as_aliases_of_the_default_voice(server: LiveServer) -> None:
    from speakwire.voice_presets import CARTESIA_VOICE_IDS, DEEPGRAM_AURA_VOICES, ELEVENLABS_VOICE_IDS

    voices = httpx.get(f"{server.url}/v1/audio/voices").json()
    aliases, default = voices["aliases"], voices["default_voice"]
    for name in (*ELEVENLABS_VOICE_IDS, *CARTESIA_VOICE_IDS, *DEEPGRAM_AURA_VOICES):
        assert aliases[name.lower()] == default, name
    assert not set(voices["voices"]) & set(aliases)


def test_an_unknown_id_is_refused_in_the_vendors_shape_naming_the_voices(server: LiveServer) -> None:
    voices = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    eleven = elevenlabs_speech(server, "AAAAAAAAAAAAAAAAAAAA")
    assert eleven.status_code == 404 and eleven.json()["detail"]["status"] == "voice_not_found"
    assert all(v in eleven.json()["detail"]["message"] for v in voices)
    cartesia = cartesia_speech(server, "00000000-0000-0000-0000-000000000000")
    assert cartesia.status_code == 404 and cartesia.json()["error_code"] == "voice_not_found"
    assert all(v in cartesia.json()["message"] for v in voices)
    deepgram = deepgram_speech(server, "nobody")  # Deepgram answers an unknown model as a bad parameter
    assert deepgram.status_code == 400 and deepgram.json()["err_code"] == "INVALID_QUERY_PARAMETER"
    assert all(v in deepgram.json()["err_msg"] for v in voices)


def test_no_preset_voice_aliases_refuses_the_vendor_ids(piper_engine: PiperEngine) -> None:
    settings = build_settings(build_parser().parse_args(["serve", "--no-preset-voice-aliases"]))
    live = start_server(settings, engine=piper_engine)
    try:
        assert elevenlabs_speech(live, "hpp4J3VqNfWAUOO0d1Us").json()["detail"]["status"] == "voice_not_found"
        cartesia = cartesia_speech(live, "f786b574-daa5-4673-aa0c-cbe3e8534c02")
        assert cartesia.status_code == 404 and cartesia.json()["error_code"] == "voice_not_found"
        for model in ("aura-2-andromeda-en", "aura-2-celeste-es"):
            deepgram = deepgram_speech(live, model)
            assert deepgram.status_code == 400 and model in deepgram.json()["err_msg"]
        aliases = httpx.get(f"{live.url}/v1/audio/voices").json()["aliases"]
        assert "hpp4j3vqnfwauoo0d1us" not in aliases and "aura-2-andromeda-en" not in aliases
        # The engine's own voices are untouched.
        assert deepgram_speech(live, "en_US-joe-medium").status_code == 200
    finally:
        live.stop()


def test_a_vendor_id_never_hides_a_voice_the_engine_has() -> None:
    from speakwire.engines.base import EngineInfo
    from speakwire.server.state import ServerState
    from speakwire.settings import Settings
    from speakwire.voice_presets import is_preset_voice

    state = ServerState(Settings())
    info = EngineInfo(name="qwen3", model="m", sample_rate=24000, voices=("Rachel", "21m00Tcm4TlvDq8ikWAM"))
    aliases = state.voice_aliases(info)
    assert "21m00tcm4tlvdq8ikwam" not in aliases and aliases["hpp4j3vqnfwauoo0d1us"] == "Rachel"
    assert is_preset_voice("AURA-2-THALIA-EN") and is_preset_voice("aura-2-celeste-es")
    assert not is_preset_voice("aura") and not is_preset_voice("Rachel")
