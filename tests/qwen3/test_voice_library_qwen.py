"""Saved voices spoken by the tiny Qwen3 Base model: by name over HTTP, WebSocket and SageMaker, with the
clone prompt computed once per model — not per request, not per restart, never reused for another model."""

from __future__ import annotations

import base64
import io
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf
from qwen3_testing import noise_clip
from websockets.asyncio.client import connect

from speakwire.settings import Settings
from speakwire.voices.prompts import dump_prompt
from speakwire.voices.store import PromptFile, VoiceStore
from support.live_server import LiveServer, start_server

pytestmark = pytest.mark.qwen

SHORT = {"max_new_tokens": 10, "seed": 3}
"""Random weights rarely stop on their own: cap frames so each request stays short."""


def wav_bytes(seconds: float = 2.0, seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, noise_clip(seconds, seed=seed).samples, 24_000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def serve(model: Path, data_dir: Path) -> LiveServer:
    """A server on a freshly loaded engine, as a new process would have (stopping a server closes its engine)."""
    from speakwire.engines.qwen3 import load_qwen3_engine

    settings = Settings(engine="qwen3", model=str(model), data_dir=str(data_dir))
    return start_server(settings, engine=load_qwen3_engine(str(model)))


def engine_of(server: LiveServer) -> Any:
    return server.state.engine


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(scope="module")
def base_model(tiny_checkpoints: dict[str, Path]) -> Path:
    return tiny_checkpoints["base"]


@pytest.fixture(scope="module")
def other_model(base_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights under another model id (another directory): its prompts must be its own."""
    copy = tmp_path_factory.mktemp("other-model") / "Qwen3-TTS-tiny-Base-copy"
    shutil.copytree(base_model, copy)
    return copy


@pytest.fixture
def base_server(base_model: Path, data_dir: Path) -> Iterator[LiveServer]:
    live = serve(base_model, data_dir)
    yield live
    live.stop()


def save_voice(
    server: LiveServer, name: str, *, ref_text: str | None = "Some reference words.", seed: int = 0
) -> dict[str, Any]:
    form = {"name": name, "consent": "Recorded by the tester, who agreed."}
    if ref_text is not None:
        form["ref_text"] = ref_text
    files = {"audio_sample": ("ref.wav", wav_bytes(seed=seed), "audio/wav")}
    response = httpx.post(f"{server.url}/v1/audio/voices", data=form, files=files, timeout=120)
    assert response.status_code == 200, response.text
    voice: dict[str, Any] = response.json()["voice"]
    return voice


def saved_prompt_models(server: LiveServer, name: str, *, expect: int, timeout_s: float = 10) -> list[str]:
    """Models with a stored prompt for the voice, once there are ``expect`` of them (a first use writes its
    prompt in the background, after the request got it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        voice = httpx.get(f"{server.url}/v1/audio/voices/{name}").json()["voice"]
        models = sorted(p["model"] for p in voice["compatibility"]["prompts"])
        if len(models) >= expect or time.monotonic() > deadline:
            return models
        time.sleep(0.05)


def speak(server: LiveServer, **body: Any) -> httpx.Response:
    payload = {"input": "Hello there.", "response_format": "pcm", **SHORT, **body}
    return httpx.post(f"{server.url}/v1/audio/speech", json=payload, timeout=120)


def test_a_voice_saved_on_a_base_server_gets_its_prompt_at_upload_and_no_request_encodes_again(
    base_server: LiveServer,
) -> None:
    base_engine = engine_of(base_server)
    encodes = base_engine.prompt_encodes
    voice = save_voice(base_server, "jane", seed=101)
    assert base_engine.prompt_encodes == encodes + 1  # computed once, at upload
    compatibility = voice["compatibility"]
    assert compatibility["usable_here"] is True and compatibility["prompt_cached_here"] is True
    assert [p["model"] for p in compatibility["prompts"]] == [base_engine.info.model]

    for voice_name in ("jane", "JANE"):
        response = speak(base_server, voice=voice_name)
        assert response.status_code == 200, response.text
        assert len(response.content) > 0
    assert base_engine.prompt_encodes == encodes + 1


async def test_a_saved_voice_is_used_by_name_over_the_websocket(base_server: LiveServer) -> None:
    save_voice(base_server, "ws-voice", seed=102)
    base_engine = engine_of(base_server)
    encodes = base_engine.prompt_encodes
    async with connect(base_server.ws_url) as ws:
        await ws.send(
            json.dumps(
                {"type": "session.config", "voice": "ws-voice", "response_format": "pcm", "stream_audio": True, **SHORT}
            )
        )
        await ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        await ws.send(json.dumps({"type": "input.done"}))
        audio, events = b"", []
        while not events or events[-1]["type"] != "session.done":
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message))
    assert not [e for e in events if e["type"] == "error"], events
    assert len(audio) > 0
    assert base_engine.prompt_encodes == encodes


def test_a_saved_voice_is_used_by_name_through_sagemaker_invocations(base_server: LiveServer) -> None:
    save_voice(base_server, "sm-voice", seed=103)
    body = {"input": "Hello there.", "voice": "sm-voice", "response_format": "wav", **SHORT}
    response = httpx.post(f"{base_server.url}/invocations", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.content[:4] == b"RIFF"


def test_after_a_restart_the_stored_prompt_is_loaded_not_encoded_again(base_model: Path, data_dir: Path) -> None:
    first = serve(base_model, data_dir)
    save_voice(first, "kept", seed=104)
    first.stop()

    second = serve(base_model, data_dir)  # a new engine: empty prompt cache, nothing in memory
    try:
        encodes = engine_of(second).prompt_encodes
        assert speak(second, voice="kept").status_code == 200
        assert speak(second, voice="kept").status_code == 200
        assert engine_of(second).prompt_encodes == encodes
    finally:
        second.stop()


def test_a_voice_saved_without_an_engine_is_encoded_on_first_use_only_and_kept_across_restarts(
    base_model: Path, data_dir: Path
) -> None:
    from speakwire.voices.audio import normalise_reference
    from speakwire.voices.fields import voice_fields

    with VoiceStore(data_dir) as store:  # as `speakwire voices add --data-dir` or a Piper server would
        store.add(voice_fields(name="offline", consent="Agreed."), normalise_reference(wav_bytes(seed=105)))
    server = serve(base_model, data_dir)
    try:
        engine = engine_of(server)
        encodes = engine.prompt_encodes
        assert speak(server, voice="offline").status_code == 200
        assert engine.prompt_encodes == encodes + 1
        assert speak(server, voice="offline").status_code == 200
        assert engine.prompt_encodes == encodes + 1
    finally:
        server.stop()  # waits for the prompt written after the first use

    again = serve(base_model, data_dir)
    try:
        assert saved_prompt_models(again, "offline", expect=1, timeout_s=0) == [str(base_model)]
        encodes = engine_of(again).prompt_encodes
        assert speak(again, voice="offline").status_code == 200
        assert engine_of(again).prompt_encodes == encodes
    finally:
        again.stop()


def test_another_model_computes_its_own_prompt_instead_of_reusing_one(
    base_model: Path, other_model: Path, data_dir: Path
) -> None:
    first = serve(base_model, data_dir)
    save_voice(first, "portable", seed=106)
    first.stop()

    other = serve(other_model, data_dir)
    try:
        engine = engine_of(other)
        encodes = engine.prompt_encodes
        assert speak(other, voice="portable").status_code == 200
        assert engine.prompt_encodes == encodes + 1
        assert speak(other, voice="portable").status_code == 200
        assert engine.prompt_encodes == encodes + 1
        assert saved_prompt_models(other, "portable", expect=2) == sorted([str(base_model), str(other_model)])
    finally:
        other.stop()


def test_a_prompt_file_that_belongs_to_another_model_is_recomputed_not_used(
    base_model: Path, other_model: Path, data_dir: Path
) -> None:
    first = serve(base_model, data_dir)
    save_voice(first, "mislabelled", seed=107)
    first.stop()
    with VoiceStore(data_dir) as store:  # a prompt filed under the other model, but computed by the first
        voice = store.get("mislabelled")
        data = store.read_prompt(voice, "qwen3", str(base_model))
        assert data is not None
        store.save_prompt(voice, PromptFile("qwen3", str(other_model), data))

    other = serve(other_model, data_dir)
    try:
        engine = engine_of(other)
        encodes = engine.prompt_encodes
        assert speak(other, voice="mislabelled").status_code == 200
        assert engine.prompt_encodes == encodes + 1
    finally:
        other.stop()


def test_an_x_vector_only_voice_needs_no_transcript(base_server: LiveServer) -> None:
    voice = save_voice(base_server, "no-text", ref_text=None, seed=108)
    assert voice["x_vector_only_mode"] is True
    assert speak(base_server, voice="no-text").status_code == 200


def test_a_saved_voice_with_inline_reference_fields_is_a_clear_400(base_server: LiveServer) -> None:
    save_voice(base_server, "mine", seed=109)
    ref = "data:audio/wav;base64," + base64.b64encode(wav_bytes()).decode()
    response = speak(base_server, voice="mine", ref_audio=ref, ref_text="Other words.")
    assert response.status_code == 400
    assert "saved voice" in response.json()["error"]["message"] and response.json()["error"]["param"] == "ref_audio"


def test_an_exported_voice_carries_its_prompt_so_the_importing_server_never_encodes(
    base_server: LiveServer, base_model: Path, tmp_path: Path
) -> None:
    save_voice(base_server, "travels", seed=110)
    archive = httpx.get(f"{base_server.url}/v1/audio/voices/travels/export").content
    target = serve(base_model, tmp_path / "elsewhere")
    try:
        files = {"file": ("travels.swv", archive, "application/zip")}
        imported = httpx.post(f"{target.url}/v1/audio/voices/import", files=files, timeout=60)
        assert imported.status_code == 200, imported.text
        assert imported.json()["voice"]["compatibility"]["prompt_cached_here"] is True
        encodes = engine_of(target).prompt_encodes
        assert speak(target, voice="travels").status_code == 200
        assert engine_of(target).prompt_encodes == encodes
    finally:
        target.stop()


def test_a_tampered_prompt_in_an_archive_is_refused(base_server: LiveServer) -> None:
    import zipfile

    base_engine = engine_of(base_server)
    save_voice(base_server, "tampered", seed=111)
    archive = httpx.get(f"{base_server.url}/v1/audio/voices/tampered/export").content
    source = zipfile.ZipFile(io.BytesIO(archive))
    metadata = json.loads(source.read("metadata.json"))
    member = metadata["prompts"][0]["file"]
    other_text = base_engine.prepare(base_engine.validate(_request(ref_text="Different words."))).extra
    forged = dump_prompt(other_text["voice_clone_prompt"], engine="qwen3", model=base_engine.info.model)
    metadata["prompts"][0]["sha256"] = None
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        target.writestr("metadata.json", json.dumps(metadata))
        target.writestr("audio.flac", source.read("audio.flac"))
        target.writestr(member, forged)
    files = {"file": ("t.swv", out.getvalue(), "application/zip")}
    response = httpx.post(f"{base_server.url}/v1/audio/voices/import", data={"name": "forged"}, files=files)
    assert response.status_code == 400
    assert "another model or transcript" in response.json()["error"]


def _request(**fields: Any) -> Any:
    from speakwire.engines.base import SynthesisRequest

    return SynthesisRequest(ref_audio=noise_clip(2.0, seed=112), **fields)
