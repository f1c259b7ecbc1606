"""The SageMaker container contract, over a real loopback server: /ping, /invocations routing, bidi WebSockets."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import soundfile as sf
import websockets.exceptions
from websockets.asyncio.client import connect

from speakwire.engines.piper import PiperEngine
from speakwire.server.sagemaker.config import resolve_sagemaker_settings
from speakwire.server.sagemaker.routing import route_from_attributes
from speakwire.settings import Settings
from support.live_server import LiveServer, free_port, start_server
from support.speech_stream import StreamedSpeech, speak_once

ATTRS = "X-Amzn-SageMaker-Custom-Attributes"


def invoke(server: LiveServer, body: object, attributes: str | None = None, **kwargs: object) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if attributes is not None:
        headers[ATTRS] = attributes
    return httpx.post(f"{server.url}/invocations", content=json.dumps(body), headers=headers, timeout=60, **kwargs)  # type: ignore[arg-type]


def test_ping_answers_get_and_post(server: LiveServer) -> None:
    assert httpx.get(f"{server.url}/ping").status_code == 200
    assert httpx.post(f"{server.url}/ping").status_code == 200


def test_routed_invocation_speaks(server: LiveServer) -> None:
    response = invoke(server, {"input": "Routed through invocations.", "response_format": "wav"},
                      "route=/v1/audio/speech")  # fmt: skip
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    audio, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24000 and len(audio) > rate


def test_route_is_found_among_other_attributes(server: LiveServer) -> None:
    response = invoke(server, {"input": "Hi.", "response_format": "wav"}, "adapter=x,route=/v1/audio/speech,trace=1")
    assert response.status_code == 200


def test_unrouted_speech_body_uses_the_default_route(server: LiveServer) -> None:
    response = invoke(server, {"input": "No route attribute.", "response_format": "wav"})
    assert response.status_code == 200 and response.content[:4] == b"RIFF"


def test_read_only_routes_work_through_invocations(server: LiveServer) -> None:
    voices = invoke(server, {}, "route=/v1/audio/voices")
    assert voices.status_code == 200 and voices.json()["voices"] == ["en_US-joe-medium"]
    models = invoke(server, {}, "route=/v1/models")
    assert models.status_code == 200 and models.json()["object"] == "list"


def test_unknown_route_is_a_clear_404(server: LiveServer) -> None:
    response = invoke(server, {"input": "Hi."}, "route=/v1/chat/completions")
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert "/v1/chat/completions" in message and "/v1/audio/speech" in message


def test_streamed_invocation_is_chunked_audio(server: LiveServer) -> None:
    body = {"input": "Streaming through invocations. Two sentences.", "response_format": "pcm",
            "stream_format": "audio"}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/invocations", json=body, headers={ATTRS: "route=/v1/audio/speech"}) as r:
        assert r.status_code == 200
        assert r.headers.get("transfer-encoding") == "chunked"
        chunks = [c for c in r.iter_raw() if c]
    assert len(chunks) > 1 and sum(map(len, chunks)) > 24000


def test_errors_through_invocations_keep_their_status(server: LiveServer) -> None:
    response = invoke(server, {"input": "Hi.", "voice": "nobody"}, "route=/v1/audio/speech")
    assert response.status_code == 404 and "nobody" in response.json()["error"]["message"]


def test_a_body_near_the_sagemaker_limit_is_read(server: LiveServer) -> None:
    # 6 MiB is SageMaker's request limit; the server must read such a body and answer it properly.
    body = {"input": "Big body.", "response_format": "wav", "padding_for_size": "x" * (5 * 1024 * 1024)}
    response = invoke(server, body, "route=/v1/audio/speech")
    assert response.status_code == 200 and response.content[:4] == b"RIFF"
    assert response.headers["x-ignored-fields"] == "padding_for_size"  # unknown fields are ignored, and named


@pytest.mark.parametrize("path", ["/invocations-bidirectional-stream", "/v1/audio/speech/stream"])
async def test_both_bidirectional_paths_stream_speech(server: LiveServer, path: str) -> None:
    url = f"ws://127.0.0.1:{server.settings.port}{path}?foo=bar"
    async with connect(url) as ws:
        speech = await speak_once(ws, "Bidirectional streaming on SageMaker.")
        pong = await ws.ping()
        await pong
    assert "audio.start" in speech.kinds and "audio.done" in speech.kinds and speech.pcm_bytes > 2000


def test_api_key_does_not_block_iam_authenticated_invocations(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(api_key="k", sagemaker=True), engine=piper_engine)
    try:
        assert invoke(live, {"input": "Hi.", "response_format": "wav"}).status_code == 200
        # The bidirectional path is IAM-authenticated too: the speech stream asks no key there (nor does Magpie's).
        speech = asyncio.run(speak_on(f"ws://127.0.0.1:{live.settings.port}/invocations-bidirectional-stream"))
        assert "audio.done" in speech.kinds and "error" not in speech.kinds and speech.pcm_bytes > 2000
        # Other routes still need the key, the speech stream's own path included.
        assert httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Hi."}).status_code == 401
        refused = asyncio.run(speak_on(f"ws://127.0.0.1:{live.settings.port}/v1/audio/speech/stream"))
        assert refused.kinds == ["closed 1008"] and refused.pcm_bytes == 0
    finally:
        live.stop()


async def speak_on(url: str) -> StreamedSpeech:
    """``speak_once`` on a new connection; a refused one gives its close code."""
    speech = StreamedSpeech()
    async with connect(url) as ws:
        try:
            return await speak_once(ws, "Authenticated by SageMaker.")
        except websockets.exceptions.ConnectionClosed:
            speech.kinds.append(f"closed {ws.close_code}")
            return speech


def test_route_attribute_parsing() -> None:
    assert route_from_attributes("route=/v1/audio/speech") == "/v1/audio/speech"
    assert route_from_attributes("a=1, route=/v1/models,route=/x") == "/v1/models"
    assert route_from_attributes("adapter=abc") is None
    assert route_from_attributes(None) is None


def test_environment_configuration_follows_the_vllm_omni_container(tmp_path: Path) -> None:
    chosen = resolve_sagemaker_settings({"SM_VLLM_MODEL": "Qwen/Qwen3-TTS-12Hz-1.7B-Base",
                                         "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.45"}, model_dir=tmp_path)  # fmt: skip
    s = chosen.settings
    assert (s.engine, s.model, s.gpu_memory_utilization, s.host, s.port) == (
        "qwen3", "Qwen/Qwen3-TTS-12Hz-1.7B-Base", 0.45, "0.0.0.0", 8080)  # fmt: skip
    assert any("SM_VLLM_MODEL" in reason for reason in chosen.reasons)

    (tmp_path / "config.json").write_text("{}")
    mounted = resolve_sagemaker_settings({}, model_dir=tmp_path)
    assert (mounted.settings.engine, mounted.settings.model) == ("qwen3", str(tmp_path))

    (tmp_path / "config.json").unlink()
    (tmp_path / "voice.onnx").write_bytes(b"")
    piper_voice = resolve_sagemaker_settings({}, model_dir=tmp_path)
    assert (piper_voice.settings.engine, piper_voice.settings.model) == ("piper", str(tmp_path / "voice.onnx"))

    embedded = resolve_sagemaker_settings({"SPEAKWIRE_PORT": "9999"}, model_dir=tmp_path / "missing")
    assert (embedded.settings.engine, embedded.settings.model, embedded.settings.port) == ("piper", None, 9999)
    assert "embedded" in embedded.reasons[0]


def test_the_served_model_answers_to_the_names_sagemaker_clients_send(tmp_path: Path) -> None:
    # The JumpStart cloning call names "/opt/ml/model"; `deploy --model-id` sets SM_VLLM_MODEL to a hub id.
    hub_id = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
    from_env = resolve_sagemaker_settings({"SM_VLLM_MODEL": hub_id}, model_dir=tmp_path)
    assert from_env.settings.model == hub_id and set(from_env.settings.model_aliases) == {"/opt/ml/model"}
    assert any("also answers to /opt/ml/model" in reason for reason in from_env.reasons)

    flagged = resolve_sagemaker_settings({"SM_VLLM_MODEL": hub_id}, model_dir=tmp_path, model="/checkpoints/mine",
                                         model_aliases={"house": "x"})  # fmt: skip
    assert flagged.settings.model == "/checkpoints/mine"
    assert set(flagged.settings.model_aliases) == {"/opt/ml/model", hub_id, "house"}

    (tmp_path / "config.json").write_text("{}")
    mounted = resolve_sagemaker_settings({}, model_dir=tmp_path)
    assert mounted.settings.model == str(tmp_path) and set(mounted.settings.model_aliases) == {"/opt/ml/model"}

    embedded = resolve_sagemaker_settings({}, model_dir=tmp_path / "missing")
    assert set(embedded.settings.model_aliases) == {"/opt/ml/model"}
    assert Settings.from_env({}).model_aliases == {}  # outside SageMaker mode nothing changes


def test_a_sagemaker_mode_server_speaks_for_opt_ml_model(piper_engine: PiperEngine, server: LiveServer,
                                                        tmp_path: Path) -> None:  # fmt: skip
    body = {"model": "/opt/ml/model", "input": "Named as JumpStart names it.", "response_format": "wav"}
    settings = resolve_sagemaker_settings({}, model_dir=tmp_path / "missing").settings
    live = start_server(settings, engine=piper_engine)
    try:
        response = invoke(live, body, "route=/v1/audio/speech")
        assert response.status_code == 200 and response.content[:4] == b"RIFF"
        listed = [m["id"] for m in invoke(live, {}, "route=/v1/models").json()["data"]]
        assert "/opt/ml/model" in listed and len(listed) == len(set(listed))
    finally:
        live.stop()
    outside = invoke(server, body, "route=/v1/audio/speech")  # a server not in SageMaker mode
    assert outside.status_code == 404 and "/opt/ml/model" in outside.json()["error"]["message"]


def test_serve_sagemaker_mode_listens_and_pings() -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "speakwire", "serve", "--sagemaker", "--host", "127.0.0.1",
                                "--port", str(port), "--log-level", "info", "--model-alias", "house=joe"],
                               stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline, status = time.monotonic() + 60, None
        while time.monotonic() < deadline and status != 200:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code
            except httpx.HTTPError:
                time.sleep(0.1)
        assert status == 200
        for model in (None, "/opt/ml/model", "house"):  # a flag's alias counts in SageMaker mode too
            body = {"input": "Container mode.", "response_format": "wav", "model": model}
            assert httpx.post(f"http://127.0.0.1:{port}/invocations", json=body, timeout=30).content[:4] == b"RIFF"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert b"sagemaker: engine piper with the embedded voice" in stderr
    ready_line = next(line for line in stderr.decode().splitlines() if "ready: engine piper" in line)
    assert "/opt/ml/model" in ready_line and "house" in ready_line


def test_seed_payload_shape_reaches_the_engine_check(server: LiveServer) -> None:
    # The seed-004 payload on the CPU voice: every field is understood; the engine says it cannot clone.
    wav = base64.b64encode(b"RIFF0000WAVE").decode()
    body = {"model": "piper/en_US-joe-medium", "input": "Clone me.", "task_type": "Base",
            "ref_audio": f"data:audio/wav;base64,{wav}", "ref_text": "Hello.", "language": "English",
            "response_format": "wav"}  # fmt: skip
    response = invoke(server, body, "route=/v1/audio/speech")
    assert response.status_code == 400 and "clone" in response.json()["error"]["message"]
