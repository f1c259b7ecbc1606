"""boto3's real ``sagemaker-runtime`` client → the local SageMaker runtime → a real speakwire server in SageMaker mode.

Nothing here is stubbed: botocore signs the calls, sends them over loopback sockets and parses
the replies (event-stream frames included) with its own code; the runtime forwards to a real
server's ``/invocations``. The cloning tests send the JumpStart write-up's body exactly as printed
to servers configured the three ways an endpoint gets its model (``SM_VLLM_MODEL``, a model in
``/opt/ml/model``, ``--model``), on tiny random Qwen3 checkpoints; a seeded server makes the bytes
comparable across InvokeEndpoint, the response stream and our ``invoke`` command.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import soundfile as sf
import uvicorn
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from speakwire.cli.main import main as speakwire_main
from speakwire.deploy.sagemaker.local_runtime import LocalRuntime, LocalRuntimeConfig
from speakwire.engines.piper import PiperEngine
from speakwire.server.sagemaker.config import resolve_sagemaker_settings
from support.live_server import LiveServer, free_port, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "qwen3"))  # the Qwen3 tests' checkpoint builder and helpers
from qwen3_testing import noise_clip, require_qwen_tts

REGION = "us-west-2"
ENDPOINT = "clone-ep"
SEED = 11
HUB_ID = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
SPEECH_ROUTE = "route=/v1/audio/speech"
PART_BYTES = 1000  # responses are tens of kB: many parts, cut mid-header and mid-sample


def runtime_client(url: str) -> Any:
    """A real boto3 client pointed at ``url``, with fake credentials and no retries to hide a failure."""
    session = boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.client("sagemaker-runtime", endpoint_url=url, config=Config(retries={"total_max_attempts": 1}))


def reference_24k_mono_wav() -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, noise_clip(2.0).samples, 24000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_up_body(reference: bytes) -> dict[str, str]:
    """The JumpStart voice-cloning write-up's body, field for field."""
    ref_audio = "data:audio/wav;base64," + base64.b64encode(reference).decode()
    return {
        "input": "Hello, this is my cloned voice.",
        "ref_audio": ref_audio,
        "ref_text": "What I say in the clip.",
        "model": "/opt/ml/model",
        "task_type": "Base",
        "language": "English",
        "response_format": "wav",
    }


def invoke(client: Any, body: object, *, attributes: str | None = SPEECH_ROUTE, name: str = ENDPOINT) -> Any:
    extra = {} if attributes is None else {"CustomAttributes": attributes}
    return client.invoke_endpoint(EndpointName=name, ContentType="application/json", Body=json.dumps(body), **extra)


def invoke_streaming(client: Any, body: object, *, attributes: str = SPEECH_ROUTE) -> tuple[Any, list[bytes]]:
    response = client.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, ContentType="application/json", CustomAttributes=attributes, Body=json.dumps(body)
    )
    return response, [event["PayloadPart"]["Bytes"] for event in response["Body"]]


def wav_format(data: bytes) -> tuple[int, int, int]:
    """(sample rate, channels, frames) as a player reads the file."""
    info = sf.info(io.BytesIO(data))
    return info.samplerate, info.channels, info.frames


@contextlib.contextmanager
def runtime_in_front_of(url: str, **config: Any) -> Iterator[LocalRuntime]:
    with LocalRuntime(LocalRuntimeConfig(container_url=url, **config)) as runtime:
        yield runtime


# --- The write-up's call on Qwen3 Base, however the endpoint got its model -------------------------------------------


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_qwen_tts()
    import torch

    torch.set_num_threads(1)  # as the Qwen3 tests do: a tiny model gains nothing from more
    from tiny_checkpoint import build_tiny_checkpoints

    return build_tiny_checkpoints(tmp_path_factory.mktemp("qwen3-tiny"))["base"]


def _settings_for(source: str, checkpoint: Path, scratch: Path) -> Any:
    nothing_mounted = scratch / "empty-opt-ml-model"
    nothing_mounted.mkdir()
    if source == "SM_VLLM_MODEL":
        return resolve_sagemaker_settings({"SM_VLLM_MODEL": str(checkpoint)}, model_dir=nothing_mounted,
                                          default_seed=SEED)  # fmt: skip
    if source == "/opt/ml/model":
        mounted = scratch / "opt-ml-model"
        shutil.copytree(checkpoint, mounted)
        return resolve_sagemaker_settings({}, model_dir=mounted, default_seed=SEED)
    # `deploy --model-id` sets SM_VLLM_MODEL to a hub id; --model serves a local checkpoint instead.
    return resolve_sagemaker_settings({"SM_VLLM_MODEL": HUB_ID}, model_dir=nothing_mounted, model=str(checkpoint),
                                      default_seed=SEED)  # fmt: skip


@pytest.fixture(scope="module", params=["SM_VLLM_MODEL", "/opt/ml/model", "--model"])
def clone_endpoint(
    request: pytest.FixtureRequest, base_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRuntime]:
    """A seeded Qwen3 Base server in SageMaker mode (its engine loaded from the settings), behind the runtime."""
    resolution = _settings_for(request.param, base_checkpoint, tmp_path_factory.mktemp("sagemaker"))
    assert resolution.settings.engine == "qwen3", resolution.reasons
    live = start_server(resolution.settings)
    try:
        with runtime_in_front_of(live.url, max_part_bytes=PART_BYTES) as runtime:
            yield runtime
    finally:
        live.stop()


@pytest.mark.qwen
def test_the_write_ups_call_gives_24khz_mono_wav_through_invoke_and_the_response_stream(
    clone_endpoint: LocalRuntime,
) -> None:
    client = runtime_client(clone_endpoint.url)
    body = write_up_body(reference_24k_mono_wav())

    response = invoke(client, body)
    whole = response["Body"].read()
    streamed_response, parts = invoke_streaming(client, body)
    streamed = b"".join(parts)

    assert (response["ContentType"], response["InvokedProductionVariant"]) == ("audio/wav", "AllTraffic")
    rate, channels, frames = wav_format(whole)
    assert (rate, channels) == (24000, 1) and frames > 0
    assert streamed_response["ContentType"] == "audio/wav"
    assert len(parts) > 1 and max(map(len, parts)) <= PART_BYTES
    assert streamed == whole  # the same seeded request: the same bytes, however they travelled


@pytest.mark.qwen
def test_our_invoke_command_works_through_the_runtime_with_and_without_stream(
    clone_endpoint: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_aws_environment(monkeypatch, tmp_path)
    reference = tmp_path / "me.wav"
    reference.write_bytes(reference_24k_mono_wav())
    common = ["sagemaker", "invoke", "--endpoint-name", ENDPOINT, "--region", REGION,
              "--text", "Hello, this is my cloned voice.",
              "--ref-audio", str(reference), "--ref-text", "What I say in the clip."]  # fmt: skip

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", clone_endpoint.url)  # boto3's own variable
    plain = speakwire_main([*common, "--output", str(tmp_path / "plain.wav")])
    monkeypatch.delenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME")
    streamed = speakwire_main([*common, "--stream", "--endpoint-url", clone_endpoint.url,
                               "--output", str(tmp_path / "streamed.wav")])  # fmt: skip

    assert (plain, streamed) == (0, 0)
    assert wav_format((tmp_path / "plain.wav").read_bytes())[:2] == (24000, 1)
    assert (tmp_path / "plain.wav").read_bytes() == (tmp_path / "streamed.wav").read_bytes()


@pytest.mark.qwen
def test_errors_come_back_as_the_runtime_returns_them_with_our_message_inside(clone_endpoint: LocalRuntime) -> None:
    client = runtime_client(clone_endpoint.url)
    body = write_up_body(reference_24k_mono_wav())

    with pytest.raises(ClientError) as unknown_route:
        invoke(client, body, attributes="route=/v1/chat/completions")
    with pytest.raises(ClientError) as unknown_route_streaming:
        invoke_streaming(client, body, attributes="route=/v1/chat/completions")
    with pytest.raises(ClientError) as bad_reference:
        invoke(client, {**body, "ref_audio": "data:audio/wav;base64," + base64.b64encode(b"RIFF-not-a-wav").decode()})
    with pytest.raises(ClientError) as unknown_model:
        invoke(client, {**body, "model": "someone-elses-model"})

    for raised, status, words in [
        (unknown_route, 404, "Unknown route '/v1/chat/completions'"),
        (unknown_route_streaming, 404, "Unknown route '/v1/chat/completions'"),
        (bad_reference, 400, "ref_audio"),
        (unknown_model, 404, "/opt/ml/model"),  # the 404 lists the names the model answers to
    ]:
        error = raised.value.response
        assert error["Error"]["Code"] == "ModelError" and error["ResponseMetadata"]["HTTPStatusCode"] == 424
        assert error["OriginalStatusCode"] == status
        assert words in error["OriginalMessage"] and words in error["Error"]["Message"]
        assert error["Error"]["Message"].startswith(f"Received client error ({status}) from primary with message")
        log_group = f"/aws/sagemaker/Endpoints/{ENDPOINT}"
        assert error["LogStreamArn"] == f"arn:aws:logs:{REGION}:000000000000:log-group:{log_group}"


@pytest.mark.qwen
def test_a_missing_route_is_our_default_speech_route(clone_endpoint: LocalRuntime) -> None:
    # The vLLM-Omni container sends an unrouted body to its completions handler, which rejects it; ours
    # speaks it on /v1/audio/speech, so the reply is the routed one, byte for byte (seeded).
    client = runtime_client(clone_endpoint.url)
    body = write_up_body(reference_24k_mono_wav())

    unrouted = invoke(client, body, attributes=None)["Body"].read()

    assert unrouted == invoke(client, body)["Body"].read()


def _fake_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, and no ~/.aws files or profile to change what boto3 does."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
                        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials")}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"):
        monkeypatch.delenv(name, raising=False)


# --- What the runtime itself does (a Piper server, or a small container that shows what it received) ---------------


@pytest.fixture(scope="module")
def piper_container(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = resolve_sagemaker_settings({}, model_dir=tmp_path_factory.mktemp("nothing-mounted")).settings
    live = start_server(settings, engine=piper_engine)
    yield live
    live.stop()


async def _echo_invocations(request: Request) -> Response:
    """Answers with the headers it was sent, and names custom attributes of its own on the way back."""
    received = {name: request.headers.get(name) for name in ("content-type", "accept",
                                                              "x-amzn-sagemaker-custom-attributes")}  # fmt: skip
    attributes = request.headers.get("x-amzn-sagemaker-custom-attributes", "")
    if "break" in attributes:
        return StreamingResponse(_breaks_off(), media_type="audio/wav")
    if "gated" in attributes:
        return StreamingResponse(_waits_for_the_client(), media_type="audio/wav")
    if "fail" in attributes:
        return JSONResponse({"error": {"message": "the container refused this"}}, status_code=503)
    return JSONResponse(received, headers={"X-Amzn-SageMaker-Custom-Attributes": "trace=echo-1"})


SECOND_PART_GATE = threading.Event()
"""Set by the test once the first part reached it: the container sends its second part only then."""


async def _waits_for_the_client() -> AsyncIterator[bytes]:
    yield b"first"
    released = await asyncio.to_thread(SECOND_PART_GATE.wait, 20)
    yield b"second" if released else b"the first part never reached the client"


async def _breaks_off() -> AsyncIterator[bytes]:
    yield b"RIFF" + b"\x00" * 5000
    raise RuntimeError("the container died mid-response")  # uvicorn drops the connection: no final chunk


@pytest.fixture(scope="module")
def echo_container() -> Iterator[str]:
    port = free_port()
    app = Starlette(routes=[Route("/invocations", _echo_invocations, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)


def test_content_type_accept_and_custom_attributes_pass_both_ways(echo_container: str) -> None:
    with runtime_in_front_of(echo_container) as runtime:
        client = runtime_client(runtime.url)
        response = client.invoke_endpoint(
            EndpointName="any-name", Body=b"{}", ContentType="application/json", Accept="audio/wav",
            CustomAttributes="route=/v1/audio/speech,trace=1",
        )  # fmt: skip
        streamed = client.invoke_endpoint_with_response_stream(
            EndpointName="any-name", Body=b"{}", ContentType="application/json", Accept="audio/pcm",
            CustomAttributes="route=/x",
        )  # fmt: skip
        streamed_body = json.loads(b"".join(e["PayloadPart"]["Bytes"] for e in streamed["Body"]))

    assert json.loads(response["Body"].read()) == {
        "content-type": "application/json",
        "accept": "audio/wav",
        "x-amzn-sagemaker-custom-attributes": "route=/v1/audio/speech,trace=1",
    }
    assert (response["CustomAttributes"], response["ContentType"]) == ("trace=echo-1", "application/json")
    assert streamed_body["accept"] == "audio/pcm"  # X-Amzn-SageMaker-Accept reaches the container as Accept
    assert (streamed["CustomAttributes"], streamed["ContentType"]) == ("trace=echo-1", "application/json")
    assert response["ResponseMetadata"]["RequestId"]


def test_payload_parts_reach_the_client_while_the_container_is_still_producing(echo_container: str) -> None:
    SECOND_PART_GATE.clear()
    with runtime_in_front_of(echo_container) as runtime:
        response = runtime_client(runtime.url).invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT, Body=b"{}", ContentType="application/json", CustomAttributes="gated"
        )
        parts = []
        for event in response["Body"]:
            parts.append(event["PayloadPart"]["Bytes"])
            SECOND_PART_GATE.set()  # a runtime that buffered the body would not get here before the container gave up

    assert parts == [b"first", b"second"]


def test_a_stream_that_breaks_after_it_began_ends_in_a_model_stream_error(echo_container: str) -> None:
    with runtime_in_front_of(echo_container, max_part_bytes=999) as runtime:
        response = runtime_client(runtime.url).invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT, Body=b"{}", ContentType="application/json", CustomAttributes="break"
        )
        received = bytearray()
        with pytest.raises(EventStreamError) as broken:
            for event in response["Body"]:
                received.extend(event["PayloadPart"]["Bytes"])

    assert bytes(received) == b"RIFF" + b"\x00" * 5000  # everything sent before the break arrived
    assert broken.value.response["Error"]["Code"] == "ModelStreamError"
    assert "broke" in broken.value.response["Error"]["Message"]


def test_a_container_server_error_is_a_model_error_with_its_status(echo_container: str) -> None:
    with runtime_in_front_of(echo_container) as runtime, pytest.raises(ClientError) as raised:
        runtime_client(runtime.url).invoke_endpoint(EndpointName=ENDPOINT, Body=b"{}", CustomAttributes="fail")

    error = raised.value.response
    assert (error["Error"]["Code"], error["OriginalStatusCode"]) == ("ModelError", 503)
    assert error["Error"]["Message"].startswith("Received server error (503) from primary")
    assert "the container refused this" in error["OriginalMessage"]


def test_an_unknown_endpoint_name_is_a_validation_error(piper_container: LiveServer) -> None:
    with runtime_in_front_of(piper_container.url, endpoint_name=ENDPOINT) as runtime:
        client = runtime_client(runtime.url)
        with pytest.raises(ClientError) as raised:
            invoke(client, {"input": "Hi.", "response_format": "wav"}, name="someone-else")
        spoken = invoke(client, {"input": "Hi.", "response_format": "wav"})["Body"].read()

    error = raised.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("ValidationError", 400)
    assert error["Error"]["Message"] == "Endpoint someone-else of account 000000000000 not found."
    assert wav_format(spoken)[:2] == (24000, 1)  # the named endpoint answers


def test_an_unreachable_container_is_a_model_error_naming_it() -> None:
    # A port bound but not listening: connections are refused, and no server started meanwhile (the runtime
    # itself included) can be handed the same port, as a port picked and released could be.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        with runtime_in_front_of(url) as runtime, pytest.raises(ClientError) as raised:
            invoke(runtime_client(runtime.url), {"input": "Hi."})

    error = raised.value.response
    assert error["Error"]["Code"] == "ModelError" and "OriginalStatusCode" not in error
    assert f"{url}/invocations" in error["Error"]["Message"]


def test_the_bidirectional_smoke_test_refuses_the_plain_http_runtime(
    piper_container: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bidirectional client (awscrt) speaks HTTP/2 only over TLS: against http:// it could only hang.
    _fake_aws_environment(monkeypatch, tmp_path)
    with runtime_in_front_of(piper_container.url) as runtime:
        flagged = speakwire_main(["sagemaker", "smoke", "--endpoint-name", ENDPOINT, "--endpoint-url", runtime.url])
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", runtime.url)
        from_env = speakwire_main(["sagemaker", "smoke", "--endpoint-name", ENDPOINT])

    assert (flagged, from_env) == (2, 2)
    errors = capsys.readouterr().err
    assert "https://" in errors and "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME" in errors


def test_the_sagemaker_local_command_serves_boto3(piper_container: LiveServer) -> None:
    port = free_port()
    command = [sys.executable, "-m", "speakwire", "sagemaker", "local", "--container-url", piper_container.url,
               "--port", str(port), "--endpoint-name", ENDPOINT]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        banner = process.stdout.readline() + process.stdout.readline() + process.stdout.readline()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            time.sleep(0.05)
        spoken = invoke(runtime_client(f"http://127.0.0.1:{port}"), {"input": "Hi.", "response_format": "wav"})
        audio = spoken["Body"].read()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)

    assert f"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=http://127.0.0.1:{port}" in banner
    assert wav_format(audio)[:2] == (24000, 1)
    assert process.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the SIGTERM it handled
