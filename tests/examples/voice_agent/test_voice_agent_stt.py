"""The example's vLLM-realtime STT service, in a pipecat pipeline, against the Voxtral stand-in.

Questions are spoken by speakwire's own Piper voice (the ``server`` fixture, 16 kHz PCM from /v1/audio/speech),
played in real time by the example's scripted microphone through pipecat's Silero VAD. The service reaches the
stand-in at its ws:// URL and through SageMaker's bidirectional stream (the example's local relay in place of the
AWS SDK client under pipecat's ``SageMakerBidiClient``, as ``--local`` does).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
import pytest

from support.live_server import LiveServer

QUESTION = "What is the capital of France?"
SECOND = "What is the weather like today?"


def speak(server: LiveServer, text: str) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": 16000, "seed": 1}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    response.raise_for_status()
    return response.content


class Listener:
    """A pipeline of the scripted microphone → Silero VAD → the STT service → a recorder of what it said."""

    def __init__(self, stt: Any) -> None:
        from pipecat.audio.vad.silero import SileroVADAnalyzer
        from pipecat.audio.vad.vad_analyzer import VADParams
        from pipecat.frames.frames import ErrorFrame, InterimTranscriptionFrame, TranscriptionFrame
        from pipecat.pipeline.pipeline import Pipeline
        from pipecat.pipeline.worker import PipelineParams, PipelineWorker
        from pipecat.processors.audio.vad_processor import VADProcessor
        from pipecat.processors.frame_processor import FrameProcessor
        from pipecat.transports.base_transport import TransportParams
        from wav_transport import FileTransport

        listener = self
        self.interims: list[str] = []
        self.finals: list[str] = []
        self.errors: list[str] = []
        self.heard = asyncio.Event()

        class Recorder(FrameProcessor):  # type: ignore[misc]
            async def process_frame(self, frame: Any, direction: Any) -> None:
                await super().process_frame(frame, direction)
                if isinstance(frame, InterimTranscriptionFrame):
                    listener.interims.append(frame.text)
                elif isinstance(frame, TranscriptionFrame):
                    listener.finals.append(frame.text)
                    listener.heard.set()
                elif isinstance(frame, ErrorFrame):
                    listener.errors.append(frame.error)
                await self.push_frame(frame, direction)

        self.transport = FileTransport(TransportParams(audio_in_enabled=True))
        upstream_errors = Recorder()  # ErrorFrames from the service travel upstream
        vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.4)), audio_idle_timeout=3.0)
        pipeline = Pipeline([self.transport.input(), upstream_errors, vad, stt, Recorder()])
        self.worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=16000))

    async def __aenter__(self) -> Listener:
        from pipecat.workers.runner import WorkerRunner

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.running = asyncio.create_task(runner.run())
        await asyncio.sleep(0.5)
        return self

    async def __aexit__(self, *exc: object) -> None:
        from pipecat.frames.frames import EndFrame

        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self.running, timeout=30)

    async def hear(self, pcm: bytes) -> str:
        """Speak ``pcm`` and wait for the next final transcript."""
        self.heard.clear()
        count = len(self.finals)
        await self.transport.microphone.say(pcm)
        await asyncio.wait_for(self.heard.wait(), timeout=30)
        assert len(self.finals) == count + 1
        return self.finals[-1]


@pytest.fixture
def sagemaker(standin: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """pipecat's SageMakerBidiClient reaching the stand-in as endpoint ``voxtral`` through the local relay."""
    from local_sagemaker import LocalSageMakerRuntime
    from pipecat.services.aws.sagemaker import bidi_client

    runtime = LocalSageMakerRuntime({"voxtral": standin.port})
    monkeypatch.setattr(bidi_client, "SageMakerRuntimeHTTP2Client", runtime)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    return runtime


@pytest.mark.parametrize("way", ["ws", "sagemaker"])
async def test_a_spoken_question_comes_back_as_interim_then_final_transcripts(
    way: str, standin: Any, server: LiveServer, request: pytest.FixtureRequest
) -> None:
    from realtime_stt import VLLMRealtimeSTTService

    if way == "ws":
        stt = VLLMRealtimeSTTService(url=standin.url)
    else:
        runtime = request.getfixturevalue("sagemaker")
        stt = VLLMRealtimeSTTService(endpoint_name="voxtral", region="us-east-1")
    async with Listener(stt) as listener:
        heard = await listener.hear(await asyncio.to_thread(speak, server, QUESTION))

    assert {"capital", "france"} <= set(heard.lower().split())
    assert listener.interims, "no transcription.delta became an interim frame"
    # Each interim is the utterance's text so far: they grow word by word towards the final text.
    words = [interim.split() for interim in listener.interims]
    assert all(a == b[: len(a)] for a, b in itertools.pairwise(words))
    assert not listener.errors
    if way == "sagemaker":
        [opened] = runtime.requests
        assert opened.endpoint_name == "voxtral" and opened.model_invocation_path is None  # the AWS bridge's path


async def test_a_dropped_stream_is_reported_and_the_next_question_heard_on_a_new_session(
    standin: Any, server: LiveServer, sagemaker: Any
) -> None:
    from realtime_stt import VLLMRealtimeSTTService

    stt = VLLMRealtimeSTTService(endpoint_name="voxtral", region="us-east-1")
    async with Listener(stt) as listener:
        first = await listener.hear(await asyncio.to_thread(speak, server, QUESTION))
        assert await asyncio.to_thread(standin.drop_sessions) == 1  # the container goes away mid-call
        for _ in range(100):
            if listener.errors:
                break
            await asyncio.sleep(0.05)
        second = await listener.hear(await asyncio.to_thread(speak, server, SECOND))

    assert {"capital", "france"} <= set(first.lower().split())
    assert "weather" in second.lower().split()
    assert len(listener.errors) == 1 and "lost" in listener.errors[0]
    assert len(sagemaker.requests) == 2  # pipecat's reconnect opened a second stream
