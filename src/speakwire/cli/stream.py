"""``speakwire stream``: speak text over the streaming protocol and report the time to first audio."""

from __future__ import annotations

import argparse
import asyncio
import sys
import wave

from speakwire.client.stream import SpeechStreamClient, StreamError, StreamResult
from speakwire.client.transport import StreamTransport, TransportClosed


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stream", help="Speak text over the WebSocket (or a SageMaker endpoint) and save a WAV.")
    p.add_argument("text", help="Text to speak ('-' reads standard input).")
    p.add_argument("--url", default="ws://127.0.0.1:8000/v1/audio/speech/stream", help="speakwire server URL.")
    p.add_argument("--sagemaker-endpoint", help="Use this SageMaker endpoint (bidirectional stream) instead.")
    p.add_argument("--region", help="AWS region of the endpoint.")
    p.add_argument("--api-key", help="API key, if the server requires one.")
    p.add_argument("--voice")
    p.add_argument("--language")
    p.add_argument("--speed", type=float)
    p.add_argument("--words-per-piece", type=int, default=0,
                   help="Send the text in pieces of N words, like an LLM (0: all at once).")  # fmt: skip
    p.add_argument("--piece-delay", type=float, default=0.05, help="Seconds between pieces.")
    p.add_argument("-o", "--output", default="stream-output.wav", help="WAV file to write.")
    p.set_defaults(func=run)


def _pieces(text: str, words: int) -> list[str]:
    if words <= 0:
        return [text]
    tokens = text.split(" ")
    return [" ".join(tokens[i : i + words]) + (" " if i + words < len(tokens) else "")
            for i in range(0, len(tokens), words)]  # fmt: skip


async def _transport(args: argparse.Namespace) -> StreamTransport:
    if args.sagemaker_endpoint:
        from speakwire.deploy.sagemaker.bidi import SageMakerBidiTransport

        return await SageMakerBidiTransport.connect(args.sagemaker_endpoint, region=args.region)
    from speakwire.client.websocket import WebSocketTransport

    return await WebSocketTransport.connect(args.url, api_key=args.api_key)


async def _speak(args: argparse.Namespace, text: str) -> StreamResult:
    async with SpeechStreamClient(await _transport(args)) as client:
        await client.configure(response_format="pcm", stream_audio=True, voice=args.voice, language=args.language,
                               speed=args.speed, api_key=args.api_key if args.sagemaker_endpoint else None)  # fmt: skip
        return await client.speak(_pieces(text, args.words_per_piece), piece_delay_s=args.piece_delay)


def run(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    try:
        result = asyncio.run(_speak(args, text))
    except (StreamError, TransportClosed) as exc:
        print(f"stream failed: {exc}", file=sys.stderr)
        return 1
    for error in result.errors:
        print(f"server error: {error.get('message')}", file=sys.stderr)
    with wave.open(args.output, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(result.sample_rate)
        wav.writeframes(result.audio)
    seconds = len(result.audio) / 2 / result.sample_rate
    ttfa = result.time_to_first_audio_s
    print(f"wrote {args.output}: {seconds:.2f} s of audio in {result.audio_frames} frames; "
          f"time to first audio {ttfa * 1000:.0f} ms" if ttfa is not None else "no audio received")  # fmt: skip
    return 0 if result.audio and not result.errors else 1
