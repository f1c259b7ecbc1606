"""The AWS sample's SageMaker bidirectional client, unchanged, against a real loopback speakwire.

``../shared/reference/clients/aws-sample/sagemaker_bidi_tts.py`` (aws-samples, commit e774e64c) is
imported from its path as it is. Only its SageMaker client is replaced: ``make_bidi_client`` returns
``LoopbackSageMaker``, which does what SageMaker does for a bidirectional stream — open a WebSocket to
the container at the request's ``model_invocation_path``, relay each ``RequestPayloadPart`` as one
frame (UTF8 → text, otherwise binary) and each frame back as a ``ResponseStreamEventPayloadPart``, and
report the container's Close frame as a ``ModelStreamError`` event — using the SDK's own model classes.
Everything else (``send_json``, ``stream_pcm_events``, ``collect_pcm``) is the sample's code: its
defaults (voice "Vivian", language "English", pcm, stream_audio), its handling of binary frames, and
its rule that any ``error`` event is fatal. The duration check runs on a second server whose Piper is
pinned noise-free (``NoiseFreePiper``), since the sample sends no seed. Python ≥ 3.12 only
(aws-sdk-sagemaker-runtime-http2).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer, start_server

SAMPLE = (Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "clients" / "aws-sample"
          / "sagemaker_bidi_tts.py")  # fmt: skip
ENDPOINT = "speakwire-loopback"
TEXT = "Hello from the AWS sample over the bidirectional stream."
SENTENCES = "The first sentence is here. Then comes a second one. And this is the third."

pytestmark = [
    pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12"),
    pytest.mark.skipif(not SAMPLE.exists(), reason="../shared/reference/clients is not checked out"),
]


class _RelayInput:
    """The stream's ``input_stream``: each request payload part becomes one WebSocket frame to the container."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.sent: list[Any] = []

    async def send(self, event: Any) -> None:
        part = event.value
        self.sent.append(part)
        await self.ws.send(part.bytes_.decode("utf-8") if part.data_type == "UTF8" else part.bytes_)

    async def close(self) -> None:
        await self.ws.close()


class _RelayReceiver:
    """The receiver ``await_output`` returns: each container frame becomes one response payload part."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def receive(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2 import models
        from websockets.exceptions import ConnectionClosed

        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else 1006
            error = models.ModelStreamError(message=f"container closed the stream ({code})", error_code=str(code))
            return models.ResponseStreamEventModelStreamError(value=error)
        data, kind = (frame.encode("utf-8"), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
        part = models.ResponsePayloadPart(bytes_=data, data_type=kind, completion_state="COMPLETE")
        return models.ResponseStreamEventPayloadPart(value=part)

    async def close(self) -> None:
        await self.ws.close()


class _RelayStream:
    """What ``invoke_endpoint_with_bidirectional_stream`` returns: ``input_stream`` and ``await_output()``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.input_stream = _RelayInput(ws)
        self.receiver = _RelayReceiver(ws)

    async def await_output(self) -> tuple[Any, _RelayReceiver]:
        from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamOutput

        return InvokeEndpointWithBidirectionalStreamOutput(invoked_production_variant="AllTraffic"), self.receiver


class LoopbackSageMaker:
    """A stand-in for ``SageMakerRuntimeHTTP2Client`` whose endpoint is a speakwire on loopback."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests: list[Any] = []
        self.streams: list[_RelayStream] = []

    async def invoke_endpoint_with_bidirectional_stream(self, input: Any) -> _RelayStream:
        from websockets.asyncio.client import connect

        self.requests.append(input)
        path = input.model_invocation_path.lstrip("/")
        stream = _RelayStream(await connect(f"ws://127.0.0.1:{self.port}/{path}", max_size=None))
        self.streams.append(stream)
        return stream


def load_sample() -> ModuleType:
    """The sample module, loaded from its file (not copied, not edited)."""
    spec = importlib.util.spec_from_file_location("aws_sample_sagemaker_bidi_tts", SAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sample() -> ModuleType:
    return load_sample()


class NoiseFreePiper:
    """Our Piper engine with every request in its noise-free mode (what ``seed`` selects on our routes).

    Piper samples duration noise: without a seed, two syntheses of one text differ in length by up to
    ~0.15 s, and the sample sends no seed. Pinned noise-free, the sample's stream and our HTTP route
    must give the same samples.
    """

    def __init__(self, engine: PiperEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        request = self._engine.validate(request)
        if request.seed is None:
            request.seed = 0
        return request


@pytest.fixture(scope="module")
def noise_free_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(engine=NoiseFreePiper(piper_engine))  # type: ignore[arg-type]
    yield live
    live.stop()


def replace_sagemaker(sample: ModuleType, server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LoopbackSageMaker:
    """Replace only the sample's ``make_bidi_client``, with SageMaker in front of ``server``."""
    client = LoopbackSageMaker(server.settings.port)

    def make_bidi_client(region: str) -> LoopbackSageMaker:
        assert region == "us-east-1"  # the sample's default
        return client

    monkeypatch.setattr(sample, "make_bidi_client", make_bidi_client)
    return client


@pytest.fixture
def sagemaker(sample: ModuleType, server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LoopbackSageMaker:
    return replace_sagemaker(sample, server, monkeypatch)


async def test_collect_pcm_with_the_samples_defaults(sample: ModuleType, sagemaker: LoopbackSageMaker) -> None:
    result = await sample.collect_pcm(ENDPOINT, TEXT)  # raises on any `error` event from us

    assert result["saw_start"] and result["saw_done"]
    assert result["sample_rate"] == 24000
    assert len(result["audio"]) > 2000  # the sample's own smoke threshold
    assert len(result["audio"]) % 2 == 0 and len(result["audio"]) / 2 / 24000 > 1.5

    [request] = sagemaker.requests
    assert request.endpoint_name == ENDPOINT
    assert request.model_invocation_path == "v1/audio/speech/stream"
    [stream] = sagemaker.streams
    parts = stream.input_stream.sent
    assert [(part.data_type, part.completion_state) for part in parts] == [("UTF8", "COMPLETE")] * 4
    messages = [json.loads(part.bytes_) for part in parts]
    assert [message["type"] for message in messages] == ["session.config", "input.text", "input.done", "session.close"]
    assert messages[0] == {"type": "session.config", "voice": "Vivian", "language": "English",
                           "response_format": "pcm", "stream_audio": True}  # fmt: skip


async def test_collect_pcm_lasts_as_long_as_our_http_speech(
    sample: ModuleType, noise_free_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_sagemaker(sample, noise_free_server, monkeypatch)
    result = await sample.collect_pcm(ENDPOINT, TEXT)

    body = {"input": TEXT, "voice": "Vivian", "response_format": "pcm"}
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(f"{noise_free_server.url}/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    assert result["sample_rate"] == 24000
    assert len(result["audio"]) == len(response.content)  # the same duration, to the sample
    assert result["audio"] == response.content  # and, noise-free, the same samples


async def test_stream_pcm_events_orders_each_sentence_and_ends_with_session_done(
    sample: ModuleType, sagemaker: LoopbackSageMaker
) -> None:
    events = [event async for event in sample.stream_pcm_events(ENDPOINT, SENTENCES)]

    kinds = " ".join(event["type"] for event in events)
    assert re.fullmatch(r"(audio\.start( audio\.chunk)+ audio\.done )+session\.done", kinds), kinds
    starts = [e for e in events if e["type"] == "audio.start"]
    dones = [e for e in events if e["type"] == "audio.done"]
    assert len(starts) >= 2  # several sentences, each its own audio.start … audio.done
    assert [e["sentence_index"] for e in starts] == [e["sentence_index"] for e in dones]
    assert [e["sentence_index"] for e in starts] == sorted({e["sentence_index"] for e in starts})
    assert all(e["sample_rate"] == 24000 for e in starts)
    chunks = [e for e in events if e["type"] == "audio.chunk"]
    assert all(e["sample_rate"] == 24000 and isinstance(e["audio"], bytes) and e["audio"] for e in chunks)
    assert sum(len(e["audio"]) for e in chunks) / 2 / 24000 > 2.0  # three sentences of 24 kHz speech
