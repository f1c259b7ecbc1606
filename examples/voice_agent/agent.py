"""A voice agent on SageMaker: Voxtral speech-to-text → an LLM → speakwire text-to-speech, with pipecat.

    transport in → Silero VAD → Voxtral (vLLM realtime API) → LLM (Bedrock, or any OpenAI-compatible URL)
    → speakwire (pipecat's ElevenLabsTTSService, over SageMaker's bidi stream) → transport out, interruptions on:
    the LLM context keeps only the words of a reply that were played (speakwire's word timings)

On AWS (three endpoints; see README.md):

    python agent.py --stt-endpoint voxtral-realtime --tts-endpoint speakwire --region us-east-1

opens pipecat's development WebRTC page (http://localhost:7860). ``--local`` runs the same pipeline with nothing
paid for: a Voxtral stand-in (PocketSphinx) and a speakwire server on this machine behind a local stand-in for
SageMaker's bidirectional stream, and a deterministic responder as the LLM (or ``--llm-url``). With
``--question-wav Q.wav --reply-wav R.wav`` the question is spoken into the pipeline in real time instead of a
browser, the spoken reply is written to R.wav, and the timings of the turn are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_services import STT_ENDPOINT, TTS_ENDPOINT, LocalStack, local_stack
from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import EndFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.transports.base_transport import BaseTransport, TransportParams
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner
from realtime_stt import RATE as STT_RATE
from realtime_stt import VOXTRAL, VLLMRealtimeSTTService
from timeline import Timeline, TurnTimes
from wav_transport import FileTransport, read_pcm16, trim_silence, write_pcm16

SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your answers are spoken aloud: reply in one or two short sentences, "
    "with no lists, markdown or emoji."
)
REPLY_RATE = 24_000
"""The rate pipecat asks speakwire for (Piper's own rate, so nothing is resampled)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Voxtral → LLM → speakwire voice agent (pipecat).", add_help=False)
    p.add_argument("--local", action="store_true", help="Run everything on this machine (see the module docstring).")
    p.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    p.add_argument("--stt-endpoint", help="SageMaker endpoint serving Voxtral's realtime API (the AWS sample's).")
    p.add_argument("--stt-url", help="Or a vLLM realtime URL: ws://host:8000/v1/realtime.")
    p.add_argument("--stt-path", help="Invocation path on the STT endpoint (default: SageMaker's default path).")
    p.add_argument("--stt-model", default=VOXTRAL, help="Model name sent in session.update.")
    p.add_argument("--tts-endpoint", help="SageMaker endpoint running speakwire (speakwire sagemaker deploy).")
    p.add_argument("--tts-url", help="Or a speakwire server's WebSocket base URL: ws://host:8000.")
    p.add_argument("--voice", default="aura-2-helena-en", help="A voice saved in speakwire, or a vendor's preset "
                   "name (ElevenLabs', Deepgram's, OpenAI's: speakwire's default voice).")  # fmt: skip
    p.add_argument("--llm-url", help="An OpenAI-compatible base URL (…/v1); default: Bedrock (or, with --local, "
                   "the local responder).")  # fmt: skip
    p.add_argument("--llm-model", default="gpt-4o-mini", help="Model for --llm-url.")
    p.add_argument("--llm-api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--bedrock-model", default="us.amazon.nova-lite-v1:0", help="Bedrock model or inference profile.")
    p.add_argument("--question-wav", type=Path, help="Speak this question into the agent instead of a browser.")
    p.add_argument("--reply-wav", type=Path, help="With --question-wav: write the spoken reply here.")
    return p


# ── The pipeline ─────────────────────────────────────────────────────────────


def make_stt(args: argparse.Namespace) -> VLLMRealtimeSTTService:
    if args.stt_url:
        return VLLMRealtimeSTTService(url=args.stt_url, model=args.stt_model)
    endpoint = args.stt_endpoint or (STT_ENDPOINT if args.local else None)
    if endpoint is None:
        raise SystemExit("give --stt-endpoint (or --stt-url, or --local)")
    return VLLMRealtimeSTTService(
        endpoint_name=endpoint, region=args.region, invocation_path=args.stt_path, model=args.stt_model
    )


def make_llm(args: argparse.Namespace, stack: LocalStack | None) -> Any:
    if args.llm_url or stack is not None:
        from pipecat.services.openai.llm import OpenAILLMService

        url = args.llm_url or stack.llm_url  # type: ignore[union-attr]
        model = args.llm_model if args.llm_url else "speakwire-local-responder"
        settings = OpenAILLMService.Settings(model=model, system_instruction=SYSTEM_PROMPT)
        return OpenAILLMService(base_url=url, api_key=args.llm_api_key, settings=settings)
    from pipecat.services.aws.llm import AWSBedrockLLMService

    settings = AWSBedrockLLMService.Settings(model=args.bedrock_model, system_instruction=SYSTEM_PROMPT)
    return AWSBedrockLLMService(aws_region=args.region, settings=settings)


def make_tts(args: argparse.Namespace) -> Any:
    """speakwire through pipecat's ElevenLabs service: its word timings keep what was not heard out of the context."""
    from speakwire_tts import LOCAL_API_KEY, SpeakwireSageMakerTTSService

    settings = SpeakwireSageMakerTTSService.Settings(voice=args.voice)
    if args.tts_url:
        from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

        return ElevenLabsTTSService(api_key=LOCAL_API_KEY, url=args.tts_url, settings=settings)
    endpoint = args.tts_endpoint or (TTS_ENDPOINT if args.local else None)
    if endpoint is None:
        raise SystemExit("give --tts-endpoint (or --tts-url, or --local)")
    return SpeakwireSageMakerTTSService(endpoint_name=endpoint, region=args.region, settings=settings)


@dataclass
class Agent:
    worker: PipelineWorker
    context: LLMContext
    timeline: Timeline


def build_agent(transport: BaseTransport, args: argparse.Namespace, stack: LocalStack | None) -> Agent:
    """transport → VAD → STT → user turn → LLM → TTS → transport, the reply's spoken part into the context."""
    context = LLMContext()
    turns = UserTurnStrategies(stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.2)])
    aggregators = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(user_turn_strategies=turns))
    # audio_idle_timeout: on a busy machine the event loop can stall past pipecat's 1 s default, and the VAD would
    # then end the user's speech in the middle of a word.
    vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.4)), audio_idle_timeout=3.0)
    pipeline = Pipeline([
        transport.input(), vad, make_stt(args), aggregators.user(), make_llm(args, stack), make_tts(args),
        transport.output(), aggregators.assistant(),
    ])  # fmt: skip
    timeline = Timeline()
    params = PipelineParams(audio_in_sample_rate=STT_RATE, audio_out_sample_rate=REPLY_RATE, enable_metrics=True)
    worker = PipelineWorker(pipeline, params=params, observers=[timeline], cancel_on_idle_timeout=False)
    return Agent(worker, context, timeline)


# ── Files in, file out ───────────────────────────────────────────────────────


def file_transport() -> FileTransport:
    return FileTransport(TransportParams(audio_in_enabled=True, audio_out_enabled=True))


async def start(agent: Agent) -> asyncio.Task[None]:
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(agent.worker)
    return asyncio.create_task(runner.run())


async def ask(agent: Agent, transport: FileTransport, question: bytes, limit_s: float = 60) -> tuple[TurnTimes, bytes]:
    """Speak ``question`` (PCM16 at 16 kHz), wait until the reply has been played; its timings and audio."""
    speech_end = await transport.microphone.say(question)
    started = await agent.timeline.wait_for("bot_started", speech_end, limit_s)
    stopped = await agent.timeline.wait_for("bot_stopped", started.at, limit_s)
    while True:  # a pause between sentences is a stop too: the reply is over when no start follows within 1 s
        await asyncio.sleep(1.0)
        resumed = agent.timeline.first("bot_started", stopped.at)
        if resumed is None:
            break
        stopped = await agent.timeline.wait_for("bot_stopped", resumed.at, limit_s)
    return TurnTimes.of(agent.timeline, speech_end), transport.played.audio_between(speech_end, stopped.at + 0.05)


async def answer_file(args: argparse.Namespace, stack: LocalStack | None) -> int:
    question = trim_silence(read_pcm16(args.question_wav, STT_RATE), STT_RATE)
    transport = file_transport()
    agent = build_agent(transport, args, stack)
    running = await start(agent)
    try:
        await asyncio.sleep(1.0)  # the services' sessions open; a microphone would be silent meanwhile
        times, reply = await ask(agent, transport, question)
    finally:
        await agent.worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, timeout=30)
    if args.reply_wav:
        write_pcm16(args.reply_wav, reply, transport.played.sample_rate or REPLY_RATE)
    said = [m["content"] for m in agent.context.get_messages() if m.get("role") == "assistant"]
    print(f"heard: {times.heard!r}")
    print(f"said: {' '.join(str(s) for s in said)!r}")
    print(
        f"after the end of speech: STT final {times.stt_final_s * 1000:.0f} ms, "
        f"LLM first token {times.llm_first_token_s * 1000:.0f} ms, "
        f"TTS first audio {times.tts_first_audio_s * 1000:.0f} ms"
    )
    return 0


# ── The browser (pipecat's development runner) ───────────────────────────────


async def bot(runner_args: Any) -> None:
    """pipecat's runner calls this for each browser session (SmallWebRTC)."""
    from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

    args = runner_args.cli_args
    transport = SmallWebRTCTransport(
        webrtc_connection=runner_args.webrtc_connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    agent = build_agent(transport, args, _STACK)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(agent.worker)
    await runner.run()


_STACK: LocalStack | None = None
"""The ``--local`` endpoints, started once for every browser session."""


@contextlib.contextmanager
def endpoints(args: argparse.Namespace) -> Iterator[LocalStack | None]:
    if not args.local:
        yield None
        return
    logger.info("starting the local endpoints: Voxtral stand-in, responder, speakwire")
    begun = time.monotonic()
    with local_stack() as stack:
        logger.info(f"local endpoints ready in {time.monotonic() - begun:.1f} s")
        yield stack


def main() -> int:
    parser = build_parser()
    known, _ = parser.parse_known_args()
    if known.question_wav is None:
        global _STACK
        from pipecat.runner.run import main as run_browser

        with endpoints(known) as stack:
            _STACK = stack
            run_browser(argparse.ArgumentParser(parents=[parser], conflict_handler="resolve"))
        return 0
    args = argparse.ArgumentParser(parents=[parser]).parse_args()
    with endpoints(args) as stack:
        return asyncio.run(answer_file(args, stack))


if __name__ == "__main__":
    sys.exit(main())
