"""pipecat's ``DeepgramSageMakerTTSService``, unchanged, speaking through SageMaker's bidirectional stream to us.

The service opens the stream with ``model_invocation_path="v1/speak"`` and ``model_query_string=
"model=...&encoding=...&sample_rate=..."`` and speaks Deepgram's protocol (Speak, Flush, Clear, Close). Only the
AWS SDK client under its ``SageMakerBidiClient`` is replaced, by ``LoopbackSageMaker`` (tests/support), which
forwards path and query string to our container as SageMaker's sidecar does; everything above it (the service,
its pipeline, its frame handling) is pipecat's own. Python ≥ 3.12 (the SDK's requirement).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.live_server import LiveServer

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
    from pipecat.services.deepgram.sagemaker.tts import DeepgramSageMakerTTSService
    from pipecat.workers.runner import WorkerRunner

    from support.sagemaker_loopback import LoopbackSageMaker

SENTENCES = ["Hello from pipecat on SageMaker. ", "This is the second sentence of the reply."]
RATE = 24000


if sys.version_info >= (3, 12):  # FrameProcessor comes with the guarded imports above

    class Sink(FrameProcessor):  # type: ignore[misc]
        """The end of the pipeline: keeps the audio and notes each reply's end and any error."""

        def __init__(self) -> None:
            super().__init__()
            self.audio = bytearray()
            self.rates: set[int] = set()
            self.stopped = asyncio.Event()
            self.errors: list[str] = []

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                self.audio += frame.audio
                self.rates.add(frame.sample_rate)
            elif isinstance(frame, TTSStoppedFrame):
                self.stopped.set()
            elif isinstance(frame, ErrorFrame):
                self.errors.append(frame.error)
            await self.push_frame(frame, direction)


@pytest.fixture
def sagemaker(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LoopbackSageMaker:
    """Replace only the SDK client pipecat's SageMakerBidiClient makes (its Config is still built as usual)."""
    client = LoopbackSageMaker(server.settings.port)
    configs: list[Any] = []

    def make_client(*, config: Any) -> LoopbackSageMaker:
        configs.append(config)
        return client

    monkeypatch.setattr(bidi_client, "SageMakerRuntimeHTTP2Client", make_client)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLOOPBACK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "loopback")
    return client


async def run_agent_turn(sink: Sink, *, interrupt: bool = False) -> None:
    """What an agent's LLM gives its TTS: a response's text in pieces, then its end; then the pipeline ends."""
    tts = DeepgramSageMakerTTSService(endpoint_name="speakwire", region="us-east-1")
    worker = PipelineWorker(Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=RATE))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await worker.queue_frames([LLMFullResponseStartFrame(), *(LLMTextFrame(s) for s in SENTENCES),
                             LLMFullResponseEndFrame()])  # fmt: skip
    if interrupt:
        while not sink.audio:
            await asyncio.sleep(0.01)
        await worker.queue_frame(InterruptionFrame())  # the user talks over the reply: pipecat sends Clear
        await asyncio.sleep(0.5)
    else:
        await asyncio.wait_for(sink.stopped.wait(), timeout=60)  # Flushed came: the reply is all spoken
    await worker.queue_frame(EndFrame())
    await asyncio.wait_for(running, timeout=30)


def http_pcm_seconds(server: LiveServer, text: str) -> float:
    body = {"input": text, "response_format": "pcm", "stream_format": "audio"}
    return len(httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60).content) / 2 / RATE


def sent_messages(sagemaker: LoopbackSageMaker) -> list[dict[str, Any]]:
    [stream] = sagemaker.streams
    assert all(part.data_type == "UTF8" for part in stream.input_stream.sent)
    return [json.loads(part.bytes_) for part in stream.input_stream.sent]


async def test_pipecat_speaks_through_sagemaker_to_our_deepgram_dialect(
    server: LiveServer, sagemaker: LoopbackSageMaker
) -> None:
    sink = Sink()
    await run_agent_turn(sink)

    [request] = sagemaker.requests
    assert request.endpoint_name == "speakwire" and request.model_invocation_path == "v1/speak"
    assert request.model_query_string == f"model=aura-2-helena-en&encoding=linear16&sample_rate={RATE}"
    assert sagemaker.streams[0].url.endswith(f"/v1/speak?{request.model_query_string}")
    kinds = [message["type"] for message in sent_messages(sagemaker)]
    assert set(kinds[:-2]) == {"Speak"} and kinds[-2:] == ["Flush", "Close"]
    spoken = "".join(m["text"] for m in sent_messages(sagemaker) if m["type"] == "Speak")
    assert spoken.split() == "".join(SENTENCES).split()

    assert not sink.errors and sink.rates == {RATE}
    seconds = len(sink.audio) / 2 / RATE
    expected = http_pcm_seconds(server, "".join(SENTENCES))
    assert abs(seconds - expected) < 0.1 * expected  # all of the reply (Piper's unseeded lengths vary a little)
    replies = [frame for frame in sagemaker.streams[0].receiver.received if isinstance(frame, str)]
    assert [json.loads(frame)["type"] for frame in replies] == ["Metadata", "Flushed"]


async def test_a_barge_in_clears_what_the_server_was_saying(server: LiveServer, sagemaker: LoopbackSageMaker) -> None:
    sink = Sink()
    await run_agent_turn(sink, interrupt=True)

    kinds = [message["type"] for message in sent_messages(sagemaker)]
    assert "Clear" in kinds and kinds[-1] == "Close"
    replies = [json.loads(f)["type"] for f in sagemaker.streams[0].receiver.received if isinstance(f, str)]
    assert "Cleared" in replies
    assert not sink.errors
    assert len(sink.audio) / 2 / RATE < http_pcm_seconds(server, "".join(SENTENCES))  # cut short


GUIDE = Path(__file__).resolve().parents[2] / "deploy" / "sagemaker" / "README.md"


def test_the_guides_pipecat_agent_compiles_and_everything_it_imports_exists() -> None:
    guide = GUIDE.read_text()
    section = guide[guide.index("## A pipecat voice agent whose TTS is a speakwire endpoint") :]
    source = section[section.index("```python\n") + len("```python\n") : section.index("\n```\n")]
    tree = ast.parse(source)
    compile(tree, "agent.py", "exec")
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert any(node.module == "pipecat.services.deepgram.sagemaker.tts" for node in imports)
    for node in imports:
        assert node.module is not None
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
