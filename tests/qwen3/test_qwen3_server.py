"""Qwen3-TTS behind the real server: HTTP (JSON and multipart), WebSocket and SageMaker shapes, tiny checkpoints."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
import soundfile as sf
from qwen3_testing import noise_clip
from websockets.asyncio.client import connect

from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

SHORT = {"max_new_tokens": 10, "seed": 3}
"""Random weights rarely stop on their own: cap frames so each request stays short."""


def wav_bytes(seconds: float = 2.0) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, noise_clip(seconds).samples, 24000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def mp3_bytes(seconds: float = 2.0) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=24000, layout="mono")
        samples = (noise_clip(seconds).samples * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = 24000
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _serve(path: Path, engine: Any) -> Iterator[LiveServer]:
    live = start_server(Settings(engine="qwen3", model=str(path)), engine=engine)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def base_server(tiny_checkpoints: dict[str, Path], base_engine: Any) -> Iterator[LiveServer]:
    yield from _serve(tiny_checkpoints["base"], base_engine)


@pytest.fixture(scope="module")
def custom_server(tiny_checkpoints: dict[str, Path], custom_voice_engine: Any) -> Iterator[LiveServer]:
    yield from _serve(tiny_checkpoints["custom_voice"], custom_voice_engine)


@pytest.fixture(scope="module")
def design_server(tiny_checkpoints: dict[str, Path], voice_design_engine: Any) -> Iterator[LiveServer]:
    yield from _serve(tiny_checkpoints["voice_design"], voice_design_engine)


def speech(server: LiveServer, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Hello there.", **SHORT, **body}, timeout=120)


def test_preset_speaker_over_http_case_insensitive(custom_server: LiveServer) -> None:
    voices = httpx.get(f"{custom_server.url}/v1/audio/voices").json()
    assert voices["voices"] and voices["engine"] == "qwen3"
    speaker = voices["voices"][0]
    response = speech(custom_server, voice=speaker.upper(), response_format="wav", language="english")
    assert response.status_code == 200, response.text
    audio, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24000 and len(audio) > 0


def test_openai_voice_alias_maps_to_the_default_speaker(custom_server: LiveServer) -> None:
    assert speech(custom_server, model="tts-1", voice="alloy", response_format="pcm").status_code == 200


def test_unknown_speaker_and_language_list_valid_values(custom_server: LiveServer) -> None:
    voices = httpx.get(f"{custom_server.url}/v1/audio/voices").json()["voices"]
    unknown = speech(custom_server, voice="Nobody")
    assert unknown.status_code in (400, 404) and voices[0] in unknown.json()["error"]["message"]
    language = speech(custom_server, language="Klingon")
    assert language.status_code == 400 and "English" in language.json()["error"]["message"]
    cloning = speech(custom_server, task_type="Base", ref_audio=data_uri(wav_bytes(), "audio/wav"), ref_text="Hi.")
    assert cloning.status_code == 400


def test_voice_design_needs_instructions(design_server: LiveServer) -> None:
    missing = speech(design_server)
    assert missing.status_code == 400 and "instructions" in missing.json()["error"]["message"]
    designed = speech(design_server, instructions="A warm, low voice.", voice="alloy", response_format="pcm")
    assert designed.status_code == 200, designed.text


def test_clone_from_an_uploaded_wav_multipart(base_server: LiveServer) -> None:
    fields = {"input": "Cloned from an upload.", "ref_text": "Some reference words.", "response_format": "wav",
              "max_new_tokens": "10", "seed": "1"}  # fmt: skip
    files = {"ref_audio": ("ref.wav", wav_bytes(), "audio/wav")}
    response = httpx.post(f"{base_server.url}/v1/audio/speech", data=fields, files=files, timeout=120)
    assert response.status_code == 200, response.text
    assert response.content[:4] == b"RIFF"


def test_clone_from_an_mp3_data_uri_streamed_as_sse(base_server: LiveServer) -> None:
    response = speech(base_server, ref_audio=data_uri(mp3_bytes(), "audio/mpeg"), ref_text="Reference words.",
                      response_format="pcm", stream_format="sse")  # fmt: skip
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert sum(len(base64.b64decode(e["audio"])) for e in events if e["type"] == "speech.audio.delta") > 0


def test_base_model_without_reference_says_what_to_send(base_server: LiveServer) -> None:
    response = speech(base_server, voice="alloy")
    assert response.status_code == 400 and "ref_audio" in response.json()["error"]["message"]


def test_reference_audio_length_is_enforced(base_server: LiveServer) -> None:
    short = speech(base_server, ref_audio=data_uri(wav_bytes(0.3), "audio/wav"), ref_text="Hi.")
    assert short.status_code == 400 and "1" in short.json()["error"]["message"]
    garbage = speech(base_server, ref_audio=base64.b64encode(b"not audio at all" * 10).decode(), ref_text="Hi.")
    assert garbage.status_code == 400


def test_seed_payload_through_invocations(base_server: LiveServer) -> None:
    body = {"model": base_server.settings.model, "input": "Hello from the seed payload.", "task_type": "Base",
            "ref_audio": data_uri(wav_bytes(), "audio/wav"), "ref_text": "Reference words.", "language": "English",
            "response_format": "wav", "max_new_tokens": 10}  # fmt: skip
    response = httpx.post(f"{base_server.url}/invocations", json=body, timeout=120,
                          headers={"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/speech"})  # fmt: skip
    assert response.status_code == 200, response.text
    audio, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24000 and len(audio) > 0


async def test_cloning_over_the_websocket(base_server: LiveServer) -> None:
    config = {"type": "session.config", "task_type": "Base", "ref_audio": data_uri(wav_bytes(), "audio/wav"),
              "ref_text": "Reference words.", "response_format": "pcm", "stream_audio": True, **SHORT}  # fmt: skip
    async with connect(f"ws://127.0.0.1:{base_server.settings.port}/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": "First sentence here. "}))
        await ws.send(json.dumps({"type": "input.text", "text": "And a second one."}))
        await ws.send(json.dumps({"type": "input.done"}))
        pcm, events = 0, []
        while not events or events[-1]["type"] != "session.done":
            message = await ws.recv()
            if isinstance(message, bytes):
                pcm += len(message)
            else:
                events.append(json.loads(message))
    assert pcm > 0
    assert [e["type"] for e in events].count("audio.done") == 2
    assert not [e for e in events if e["type"] == "error"]


def test_ready_only_after_warm_up(tiny_checkpoints: dict[str, Path], base_engine: Any) -> None:
    before = base_engine.prompt_encodes
    live = start_server(Settings(engine="qwen3", model=str(tiny_checkpoints["base"])), engine=base_engine)
    try:
        # /ready turned 200 (start_server waited for it) only after a real synthesis with a reference.
        assert base_engine.prompt_encodes >= before
        assert httpx.get(f"{live.url}/ready").json()["status"] == "ready"
    finally:
        live.stop()


async def _speak_over_ws(server: LiveServer, pieces: list[str], *, wait_for_audio_after: int | None = None) -> Any:
    """Send ``pieces`` as input.text; optionally wait for audio after the first ``wait_for_audio_after``."""
    config = {"type": "session.config", "voice": "ryan", "language": "English", "response_format": "pcm",
              "stream_audio": True, "seed": 5, "max_new_tokens": 40}  # fmt: skip
    pcm, events, audio_before_done = b"", [], False
    async with connect(f"ws://127.0.0.1:{server.settings.port}/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps(config))
        for i, piece in enumerate(pieces):
            await ws.send(json.dumps({"type": "input.text", "text": piece}))
            if i + 1 == wait_for_audio_after:
                while not audio_before_done:
                    message = await ws.recv()
                    if isinstance(message, bytes):
                        pcm += message
                        audio_before_done = True
                    else:
                        events.append(json.loads(message))
        await ws.send(json.dumps({"type": "input.done"}))
        while not events or events[-1]["type"] != "session.done":
            message = await ws.recv()
            if isinstance(message, bytes):
                pcm += message
            else:
                events.append(json.loads(message))
    return pcm, events, audio_before_done


async def test_text_sent_word_by_word_over_the_websocket_gives_the_pcm_of_text_sent_at_once(
    custom_server: LiveServer,
) -> None:
    text = "hello world, this is a tiny test. this is a tiny test, hello world."
    words = [w + " " for w in text.split(" ")[:-1]] + [text.split(" ")[-1]]
    whole, whole_events, _ = await _speak_over_ws(custom_server, [text])
    by_word, events, early = await _speak_over_ws(custom_server, words, wait_for_audio_after=4)
    assert early  # audio came while most of the text was still unsent
    assert len(whole) > 0 and by_word == whole
    for got in (whole_events, events):
        starts = [e for e in got if e["type"] == "audio.start"]
        dones = [e for e in got if e["type"] == "audio.done"]
        assert [e["sentence_index"] for e in starts] == [e["sentence_index"] for e in dones] == [0, 1]
        assert got[-1]["total_sentences"] == 2 and not [e for e in got if e["type"] == "error"]
    assert sum(e["total_bytes"] for e in events if e["type"] == "audio.done") == len(by_word)


def test_admission_follows_the_engines_kv_slots(tiny_checkpoints: dict[str, Path]) -> None:
    from speakwire.engines.qwen3 import load_qwen3_engine

    engine = load_qwen3_engine(str(tiny_checkpoints["custom_voice"]), max_batch=2)
    live = start_server(Settings(engine="qwen3", model=str(tiny_checkpoints["custom_voice"])), engine=engine)
    try:
        assert engine.info.max_concurrent == 2
        assert live.state.pipeline is not None and live.state.pipeline.max_streams == 2
        assert live.state.pipeline.scheduler.workers == 2
    finally:
        live.stop()
        engine.close()


def test_metrics_show_the_generation_loop(custom_server: LiveServer) -> None:
    assert speech(custom_server, voice="ryan").status_code == 200
    text = httpx.get(f"{custom_server.url}/metrics", timeout=30).text
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("speakwire_engine_")
    }
    assert values["speakwire_engine_slots"] == custom_server.state.engine.info.max_concurrent
    assert values["speakwire_engine_steps_total"] > 0 and values["speakwire_engine_step_rows_total"] > 0
    assert values["speakwire_engine_code2wav_chunks_total"] >= values["speakwire_engine_code2wav_calls_total"] > 0


async def test_a_generation_failure_reaches_the_websocket_client_and_the_session_goes_on(
    custom_server: LiveServer, custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(hidden: Any) -> None:
        raise RuntimeError("CUDA error: device-side assert triggered")

    config = {"type": "session.config", "voice": "ryan", "response_format": "pcm", **SHORT}
    async with connect(f"ws://127.0.0.1:{custom_server.settings.port}/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps(config))

        async def utterance() -> list[dict[str, Any]]:
            await ws.send(json.dumps({"type": "input.text", "text": "Hello there, friend."}))
            await ws.send(json.dumps({"type": "input.done"}))
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] != "session.done":
                message = await ws.recv()
                if not isinstance(message, bytes):
                    events.append(json.loads(message))
            return events

        monkeypatch.setattr(custom_voice_engine.tts_model.model.talker.codec_head, "forward", broken)
        await ws.send(json.dumps({"type": "input.text", "text": "Hello there my friend "}))  # no segment decided yet
        early: list[dict[str, Any]] = []
        while not any(e["type"] == "error" for e in early):  # reported while the text is still open
            message = await asyncio.wait_for(ws.recv(), timeout=30)
            if not isinstance(message, bytes):
                early.append(json.loads(message))
        await ws.send(json.dumps({"type": "input.done"}))
        failed = early
        while failed[-1]["type"] != "session.done":
            message = await ws.recv()
            if not isinstance(message, bytes):
                failed.append(json.loads(message))
        monkeypatch.undo()
        assert any(e["type"] == "audio.done" and e["error"] for e in failed)
        assert any(e["type"] == "error" and "CUDA error" in e.get("message", "") for e in failed)
        again = await utterance()
        assert not [e for e in again if e["type"] == "error"] and any(e["type"] == "audio.done" for e in again)
