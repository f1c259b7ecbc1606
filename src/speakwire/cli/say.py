"""``speakwire say``: synthesize text to a file (or stdout) without a server."""

from __future__ import annotations

import argparse
import asyncio
import sys

from speakwire.encoders.registry import AUDIO_FORMATS, default_sample_rate
from speakwire.engines.base import SynthesisRequest
from speakwire.engines.registry import default_worker_count, load_engine
from speakwire.output import AudioOut, OutputSpec, SegmentEnd, UtteranceEnd
from speakwire.scheduler import Scheduler
from speakwire.settings import Settings
from speakwire.synthesis import SynthesisPipeline


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("say", help="Speak text into an audio file, no server needed.")
    p.add_argument("text", help="Text to speak ('-' reads standard input).")
    p.add_argument("-o", "--output", required=True, help="Output file, or '-' for stdout.")
    p.add_argument("--format", choices=AUDIO_FORMATS, help="Audio format (default: from the file name, else wav).")
    p.add_argument("--voice", help="Piper voice file (.onnx) or, with --engine qwen3, a speaker name.")
    p.add_argument("--engine", choices=("piper", "qwen3"), default="piper")
    p.add_argument("--model", help="Qwen3-TTS model directory or hub id.")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--sample-rate", type=int)
    p.set_defaults(func=run)


def _format_for(output: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    suffix = output.rsplit(".", 1)[-1].lower() if "." in output else ""
    return {"ogg": "opus", "ul": "ulaw", "al": "alaw", "raw": "pcm"}.get(suffix, suffix) if suffix else "wav"


async def synthesize_to_bytes(settings: Settings, text: str, fmt: str, speed: float, voice: str | None,
                              sample_rate: int | None) -> bytes:  # fmt: skip
    engine = await asyncio.to_thread(load_engine, settings)
    scheduler = Scheduler(default_worker_count(settings, engine.info), reserve=not engine.info.streams_text)
    try:
        pipeline = SynthesisPipeline(engine, scheduler, trim_leading_silence=settings.trim_leading_silence)
        request = engine.validate(SynthesisRequest(voice=voice, speed=speed))
        rate = default_sample_rate(fmt, sample_rate, engine.info.sample_rate)
        out = await AudioOut.open(OutputSpec(fmt, rate, "file"))
        utterance = pipeline.utterance(request, output_rate=rate)
        try:
            utterance.feed(text)
            utterance.finish()
            async for part in out.parts(utterance):
                if isinstance(part, SegmentEnd) and part.error is not None:
                    raise SystemExit(f"synthesis failed: {part.error.message}")
                if isinstance(part, UtteranceEnd):
                    return part.data
            return b""
        finally:
            utterance.close()
    finally:
        scheduler.close()
        engine.close()


def run(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        print("nothing to say: the text is empty", file=sys.stderr)
        return 2
    fmt = _format_for(args.output, args.format)
    if fmt not in AUDIO_FORMATS:
        print(f"unknown format '{fmt}'; choose one of {', '.join(AUDIO_FORMATS)} with --format", file=sys.stderr)
        return 2
    piper_voice = args.voice if args.engine == "piper" else None
    speaker = args.voice if args.engine == "qwen3" else None
    settings = Settings(engine=args.engine, model=args.model or piper_voice, workers=1)
    data = asyncio.run(synthesize_to_bytes(settings, text, fmt, args.speed, speaker, args.sample_rate))
    if args.output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        with open(args.output, "wb") as fh:
            fh.write(data)
        print(f"wrote {args.output} ({fmt}, {len(data)} bytes)", file=sys.stderr)
    return 0
