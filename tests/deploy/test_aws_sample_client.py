"""The AWS sample's SageMaker bidirectional client, unchanged, against a real loopback speakwire.

``../shared/reference/clients/aws-sample/sagemaker_bidi_tts.py`` (aws-samples, commit e774e64c) is
imported from its path as it is. Only its SageMaker client is replaced: ``make_bidi_client`` returns
the loopback relay of ``tests/support/sagemaker_loopback.py``, which does what SageMaker does for a
bidirectional stream, with the container's Close frame reported as a ``ModelStreamError`` event
(``close_as="event"``, the form the sample checks for).
Everything else (``send_json``, ``stream_pcm_events``, ``collect_pcm``) is the sample's code: its
defaults (voice "Vivian", language "English", pcm, stream_audio), its handling of binary frames, and
its rule that any ``error`` event is fatal. The duration check runs on a second server whose Piper is
pinned noise-free (``NoiseFreePiper``), since the sample sends no seed. Python ≥ 3.12 only
(aws-sdk-sagemaker-runtime-http2).
"""

from __future__ import annotations

import dataclasses
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
from support.sagemaker_loopback import LoopbackSageMaker

SAMPLE = (Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "clients" / "aws-sample"
          / "sagemaker_bidi_tts.py")  # fmt: skip
ENDPOINT = "speakwire-loopback"
TEXT = "Hello from the AWS sample over the bidirectional stream."
SENTENCES = "The first sentence is here. Then comes a second one. And this is the third."

pytestmark = [
    pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12"),
    pytest.mark.skipif(not SAMPLE.exists(), reason="../shared/reference/clients is not checked out"),
]


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
        return request if request.seed is not None else dataclasses.replace(request, seed=0)


@pytest.fixture(scope="module")
def noise_free_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(engine=NoiseFreePiper(piper_engine))  # type: ignore[arg-type]
    yield live
    live.stop()


def replace_sagemaker(sample: ModuleType, server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LoopbackSageMaker:
    """Replace only the sample's ``make_bidi_client``, with SageMaker in front of ``server``."""
    client = LoopbackSageMaker(server.settings.port, close_as="event")

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
