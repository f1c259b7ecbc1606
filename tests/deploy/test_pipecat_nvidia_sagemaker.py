"""pipecat's NVIDIA SageMaker services (Magpie), unchanged, speaking to us through SageMaker's two doors.

``NvidiaSageMakerTTSService`` opens the bidirectional stream with no invocation path (the container's default
path) and speaks NIM's realtime protocol (``synthesize_session.update``, ``input_text.append``/``commit``, on a
barge-in ``input_text.done`` then ``session.end`` and a new stream). Only the AWS SDK client under its
``SageMakerBidiClient`` is replaced, by ``LoopbackSageMaker`` (tests/support), as in ``test_pipecat_sagemaker.py``.
``NvidiaSageMakerHTTPTTSService`` calls InvokeEndpoint with its own aiobotocore client, unchanged:
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` points it at the local SageMaker runtime, which forwards to our
``/invocations`` as SageMaker does. A seeded server makes each sentence's audio equal, sample for sample, to the
same text from ``/v1/audio/speech``. Python >= 3.12 (the SDK's requirement).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from speakwire.deploy.sagemaker.local_runtime import LocalRuntime, LocalRuntimeConfig
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12), reason="pipecat's SageMaker client needs Python 3.12")

if sys.version_info >= (3, 12):
    from pipecat.frames.frames import (
        EndFrame,
        ErrorFrame,
        Frame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.aws.sagemaker import bidi_client
    from pipecat.services.nvidia.sagemaker.tts import NvidiaSageMakerHTTPTTSService, NvidiaSageMakerTTSService
    from pipecat.services.tts_service import TTSService
    from pipecat.workers.runner import WorkerRunner

    from support.sagemaker_loopback import LoopbackSageMaker

SEED = 7
REPLY = ["Hello from pipecat on SageMaker. ", "This is the second sentence of the reply."]
LONG_REPLY = [f"This is sentence number {n} of a long answer that keeps going. " for n in range(1, 7)]
AFTER = ["Sure, I will stop there. ", "What would you like instead?"]
PIPECAT_VOICE = "Magpie-Multilingual.EN-US.Aria"


if sys.version_info >= (3, 12):  # FrameProcessor comes with the guarded imports above

    class Sink(FrameProcessor):  # type: ignore[misc]
        """The end of the pipeline: keeps the audio, counts each reply's end, notes interruptions and errors."""

        def __init__(self) -> None:
            super().__init__()
            self.audio = bytearray()
            self.rates: set[int] = set()
            self.stops = 0
            self.interrupted_at: int | None = None
            """Bytes of audio received when the interruption came through."""
            self.errors: list[str] = []

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                self.audio += frame.audio
                self.rates.add(frame.sample_rate)
            elif isinstance(frame, TTSStoppedFrame):
                self.stops += 1
            elif isinstance(frame, InterruptionFrame):
                self.interrupted_at = len(self.audio)
            elif isinstance(frame, ErrorFrame):
                self.errors.append(frame.error)
            await self.push_frame(frame, direction)


@pytest.fixture(scope="module")
def seeded(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(default_seed=SEED), engine=piper_engine)
    yield live
    live.stop()


@pytest.fixture
def sagemaker(seeded: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LoopbackSageMaker:
    """Replace only the SDK client pipecat's SageMakerBidiClient makes (its Config is still built as usual)."""
    client = LoopbackSageMaker(seeded.settings.port)
    monkeypatch.setattr(bidi_client, "SageMakerRuntimeHTTP2Client", lambda *, config: client)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOOPBACK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "loopback")
    return client


@pytest.fixture
def runtime(seeded: LiveServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    """The local SageMaker runtime in front of the server; botocore's own endpoint variable points at it."""
    with LocalRuntime(LocalRuntimeConfig(container_url=seeded.url, endpoint_name="speakwire")) as local:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", local.url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOOPBACK")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "loopback")
        yield local


def http_pcm(server: LiveServer, text: str, rate: int) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": rate, "stream_format": "audio"}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return float(np.sqrt(np.mean(samples**2))) if len(samples) else 0.0


def reply_frames(sentences: list[str]) -> list[Frame]:
    """What an agent's LLM gives its TTS: a response's text in pieces, then its end."""
    return [LLMFullResponseStartFrame(), *(LLMTextFrame(s) for s in sentences), LLMFullResponseEndFrame()]


async def until(condition: Callable[[], bool], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def run_agent(tts: TTSService, sink: Sink, rate: int,
                    script: Callable[[PipelineWorker], Awaitable[None]]) -> None:  # fmt: skip
    """Run ``tts`` → ``sink`` at ``rate``, drive it with ``script``, then end the pipeline."""
    worker = PipelineWorker(Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=rate))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await script(worker)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, timeout=30)


def sent_events(stream: Any) -> list[dict[str, Any]]:
    assert all(part.data_type == "UTF8" for part in stream.input_stream.sent)
    return [json.loads(part.bytes_) for part in stream.input_stream.sent]


def received_events(stream: Any) -> list[dict[str, Any]]:
    assert all(isinstance(frame, str) for frame in stream.receiver.received)  # NIM's events are JSON text
    return [json.loads(frame) for frame in stream.receiver.received]


def committed_texts(events: list[dict[str, Any]]) -> list[str]:
    """The text of each commit, from the appends before it."""
    texts, pending = [], ""
    for event in events:
        if event["type"] == "input_text.append":
            pending += event["text"]
        elif event["type"] == "input_text.commit":
            texts.append(pending)
            pending = ""
    return texts


# ----- the realtime service on the bidirectional stream ----------------------------------------------


async def test_pipecat_speaks_through_the_bidirectional_stream_to_our_magpie_session(
    seeded: LiveServer, sagemaker: LoopbackSageMaker
) -> None:
    rate = 24000
    sink = Sink()

    async def one_reply(worker: PipelineWorker) -> None:
        await worker.queue_frames(reply_frames(REPLY))
        await until(lambda: sink.stops == 1)  # pipecat's stop frame: no audio for its stop timeout

    await run_agent(NvidiaSageMakerTTSService(endpoint_name="speakwire", region="us-east-1"), sink, rate, one_reply)

    [request] = sagemaker.requests
    assert request.endpoint_name == "speakwire" and request.model_invocation_path is None
    [stream] = sagemaker.streams
    assert stream.url.endswith("/invocations-bidirectional-stream")  # the container's default path
    sent = sent_events(stream)
    assert sent[0]["type"] == "synthesize_session.update"
    assert sent[0]["session"]["input_text_synthesis"]["voice_name"] == PIPECAT_VOICE
    assert sent[0]["session"]["output_audio_params"]["sample_rate_hz"] == rate
    assert sent[-1] == {"type": "session.end"}
    texts = committed_texts(sent)
    assert texts == [sentence.strip() for sentence in REPLY]  # one commit per sentence pipecat aggregated

    received = received_events(stream)
    kinds = [event["type"] for event in received]
    assert kinds[:2] == ["conversation.created", "synthesize_session.updated"]
    assert kinds.count("input_text.committed") == len(texts) and "error" not in kinds
    assert not sink.errors and sink.rates == {rate}
    # Every commit's audio, in order, sample for sample the same text's from /v1/audio/speech at pipecat's rate.
    assert bytes(sink.audio) == b"".join(http_pcm(seeded, text, rate) for text in texts)
    assert rms(bytes(sink.audio)) > 0.02  # speech, not silence


async def test_a_barge_in_ends_the_reply_and_the_next_reply_speaks_on_a_new_stream(
    seeded: LiveServer, sagemaker: LoopbackSageMaker
) -> None:
    rate = 16000
    sink = Sink()
    whole_first = b"".join(http_pcm(seeded, sentence.strip(), rate) for sentence in LONG_REPLY)
    second_reply = b"".join(http_pcm(seeded, sentence.strip(), rate) for sentence in AFTER)

    async def interrupted_then_another_reply(worker: PipelineWorker) -> None:
        await worker.queue_frames(reply_frames(LONG_REPLY))
        await until(lambda: len(sink.audio) > 0)
        await worker.queue_frame(InterruptionFrame())  # the user talks over the reply
        await until(lambda: sink.interrupted_at is not None and len(sagemaker.streams) == 2)
        stops = sink.stops
        await worker.queue_frames(reply_frames(AFTER))
        await until(lambda: len(sink.audio) - (sink.interrupted_at or 0) >= len(second_reply) and sink.stops > stops)

    await run_agent(NvidiaSageMakerTTSService(endpoint_name="speakwire", region="us-east-1"), sink, rate,
                    interrupted_then_another_reply)  # fmt: skip

    first, second = sagemaker.streams
    sent = [event["type"] for event in sent_events(first)]
    # pipecat's barge-in: input_text.done, then (once any event came back) session.end, and a new stream.
    assert sent[-2:] == ["input_text.done", "session.end"] and sent.count("input_text.done") == 1
    received = [event["type"] for event in received_events(first)]
    if "conversation.item.speech.completed" in received:  # nothing of the turn after its speech.completed
        assert received.index("conversation.item.speech.completed") == len(received) - 1
    assert "error" not in received and not sink.errors
    assert sink.interrupted_at is not None and sink.interrupted_at < len(whole_first)  # the reply was cut short
    # The new stream is configured again and speaks the next reply; after the interruption the sink got that
    # reply's audio, sample for sample, and nothing of the interrupted one.
    assert sent_events(second)[0]["type"] == "synthesize_session.update"
    assert committed_texts(sent_events(second)) == [sentence.strip() for sentence in AFTER]
    assert bytes(sink.audio[sink.interrupted_at :]) == second_reply
    assert settles(seeded)  # nothing is left speaking once the streams are gone


def settles(server: LiveServer, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.state.pipeline.active == 0 and server.state.pipeline.scheduler.busy == 0:
            return True
        time.sleep(0.05)
    return False


# ----- the HTTP service on InvokeEndpoint --------------------------------------------------------


async def test_pipecat_http_service_gets_raw_pcm_at_its_rate_through_invoke_endpoint(
    seeded: LiveServer, runtime: LocalRuntime
) -> None:
    rate = 16000
    sink = Sink()

    async def one_reply(worker: PipelineWorker) -> None:
        await worker.queue_frames(reply_frames(REPLY))
        await until(lambda: sink.stops == 1)

    tts = NvidiaSageMakerHTTPTTSService(endpoint_name="speakwire", region="us-west-2")
    await run_agent(tts, sink, rate, one_reply)

    assert not sink.errors and sink.rates == {rate}
    # pipecat speaks each sentence with one InvokeEndpoint: {text, voice_name, language_code, sample_rate_hz}.
    expected = b"".join(http_pcm(seeded, sentence.strip(), rate) for sentence in REPLY)
    assert bytes(sink.audio) == expected
    assert rms(bytes(sink.audio)) > 0.02
