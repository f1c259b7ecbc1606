"""Our CPU image, built here by ``deploy/sagemaker/build-local.sh`` and run as SageMaker runs it, keeps the contract.

``deploy/sagemaker/run-local.sh`` starts the image's ENTRYPOINT ``serve`` as its USER (chroot into the
image's filesystem, new mount and PID namespaces: the server is PID 1) on a free loopback port. Against
it: ``/ping`` (GET and POST), ``/invocations`` routed to speech (and named as the JumpStart body names
the model), the bidirectional stream on both paths, the AWS sample's own client and pipecat's
DeepgramSageMakerTTSService through the loopback relay SageMaker stands in for (both Python ≥ 3.12),
and SIGTERM draining a stream in flight before a clean exit. Skipped where the image was not built
(no buildah); in CI (``scripts/test`` builds it) a missing image fails.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import soundfile
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from support.live_server import free_port
from support.speech_stream import speak_once

REPO = Path(__file__).resolve().parents[2]
RUN_LOCAL = REPO / "deploy" / "sagemaker" / "run-local.sh"
IMAGE = os.environ.get("SPEAKWIRE_LOCAL_IMAGE", "localhost/speakwire:cpu")
ROUTE = {"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/speech"}


def _image_exists() -> bool:
    try:
        found = subprocess.run(["buildah", "--storage-driver", "vfs", "inspect", "--type", "image", IMAGE],
                               capture_output=True, timeout=60)  # fmt: skip
    except FileNotFoundError:
        return False
    return found.returncode == 0


@dataclass
class RunningImage:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def image() -> Iterator[RunningImage]:
    if not _image_exists():
        message = f"{IMAGE} is not built here: bash deploy/sagemaker/build-local.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    env = {**os.environ, "SPEAKWIRE_HOST": "127.0.0.1", "SPEAKWIRE_PORT": str(port)}
    process = subprocess.Popen(["bash", str(RUN_LOCAL), IMAGE], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)  # fmt: skip
    running = RunningImage(process, port)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{running.url}/ping", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"the image never answered /ping: {process.communicate()[0].decode(errors='replace')[-2000:]}")
    yield running
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


def test_ping_answers_get_and_post(image: RunningImage) -> None:
    assert httpx.get(f"{image.url}/ping").json() == {"status": "healthy"}
    assert httpx.post(f"{image.url}/ping").status_code == 200


def test_invocations_speak_for_the_jumpstart_model_name(image: RunningImage) -> None:
    body = {"model": "/opt/ml/model", "input": "Spoken by the image itself.", "response_format": "wav"}
    response = httpx.post(f"{image.url}/invocations", json=body, headers=ROUTE, timeout=60)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    audio, rate = soundfile.read(io.BytesIO(response.content))
    assert rate == 24000 and audio.ndim == 1 and len(audio) > rate


def test_an_unknown_route_is_a_clear_404(image: RunningImage) -> None:
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/chat/completions"}
    response = httpx.post(f"{image.url}/invocations", json={"input": "Hi."}, headers=headers, timeout=60)
    assert response.status_code == 404 and "/v1/audio/speech" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", ["invocations-bidirectional-stream", "v1/audio/speech/stream"])
async def test_the_bidirectional_stream_speaks_on_both_paths(image: RunningImage, path: str) -> None:
    async with connect(f"ws://127.0.0.1:{image.port}/{path}") as ws:
        speech = await speak_once(ws, "Streaming from the image.")
    kinds = speech.kinds
    assert kinds.index("audio.start") < kinds.index("audio.done") < kinds.index("session.done")
    assert speech.pcm_bytes > 2000


@pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12")
async def test_the_aws_samples_client_speaks_through_the_relay(
    image: RunningImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_aws_sample_client import ENDPOINT, SAMPLE, TEXT, load_sample

    from support.sagemaker_loopback import LoopbackSageMaker

    if not SAMPLE.exists():
        pytest.skip("../shared/reference/clients is not checked out")
    sample = load_sample()
    relay = LoopbackSageMaker(image.port, close_as="event")
    monkeypatch.setattr(sample, "make_bidi_client", lambda region: relay)
    result = await sample.collect_pcm(ENDPOINT, TEXT)  # raises on any `error` event
    assert result["saw_start"] and result["saw_done"] and result["sample_rate"] == 24000
    assert len(result["audio"]) / 2 / 24000 > 1.5


@pytest.mark.skipif(sys.version_info < (3, 12), reason="pipecat's SageMaker services need Python 3.12")
async def test_pipecats_deepgram_sagemaker_service_speaks_through_the_image(
    image: RunningImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipecat.services.aws.sagemaker import bidi_client
    from test_pipecat_sagemaker import RATE, SENTENCES, Sink, run_agent_turn

    from support.sagemaker_loopback import LoopbackSageMaker

    relay = LoopbackSageMaker(image.port)
    monkeypatch.setattr(bidi_client, "SageMakerRuntimeHTTP2Client", lambda *, config: relay)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOOPBACK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "loopback")
    sink = Sink()
    await run_agent_turn(sink)

    [request] = relay.requests
    assert request.model_invocation_path == "v1/speak" and relay.streams[0].url.endswith(request.model_query_string)
    assert not sink.errors and sink.rates == {RATE}
    body = {"input": "".join(SENTENCES), "response_format": "pcm", "stream_format": "audio"}
    async with httpx.AsyncClient(timeout=60) as http:
        expected = len((await http.post(f"{image.url}/v1/audio/speech", json=body)).content)
    assert abs(len(sink.audio) - expected) < 0.1 * expected  # the whole reply (Piper's unseeded lengths vary)


async def test_sigterm_drains_a_stream_in_flight_then_exits_cleanly(image: RunningImage) -> None:
    """Last in this module: SageMaker stops a container with SIGTERM to PID 1 (SIGKILL 30 s later)."""
    async with connect(f"ws://127.0.0.1:{image.port}/invocations-bidirectional-stream") as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": "Scale-in must not cut this sentence. "}))
        await ws.send(json.dumps({"type": "input.text", "text": "Nor this one."}))
        kinds: list[str] = []
        while "audio.start" not in kinds:
            message = await ws.recv()
            if isinstance(message, str):
                kinds.append(json.loads(message)["type"])
        image.process.send_signal(signal.SIGTERM)  # to run-local.sh, which hands it to the server
        async with httpx.AsyncClient(timeout=10) as http:
            while (await http.get(f"{image.url}/ping")).status_code == 200:
                await asyncio.sleep(0.05)
            assert (await http.get(f"{image.url}/ping")).json()["status"] == "draining"
        await ws.send(json.dumps({"type": "input.done"}))
        events = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    events.append(json.loads(message))
    kinds += [event["type"] for event in events]
    assert kinds.count("audio.done") == 2 and "session.done" in kinds  # both sentences, whole
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    output, _ = await asyncio.to_thread(image.process.communicate, timeout=60)
    assert image.process.returncode == 0
    lines = output.decode(errors="replace").splitlines()
    assert any("Finished server process [1]" in line for line in lines)  # it was PID 1, and it shut down
    assert any("drain done: 1 session(s) closed after their final event, 0 utterance(s) cut" in line for line in lines)
