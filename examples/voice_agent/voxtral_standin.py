"""A stand-in for the Voxtral endpoint: vLLM's realtime transcription protocol, transcribed by PocketSphinx.

It answers what the AWS sample's Voxtral container answers (vLLM's ``/v1/realtime`` behind a bridge on
SageMaker's default WebSocket path), so the agent's speech-to-text runs unchanged on one machine, for free:

- ``/v1/realtime`` (a self-hosted vLLM) and ``/invocations-bidirectional-stream`` (the path SageMaker's sidecar
  opens for a stream with no invocation path, where the AWS sample's bridge listens), and ``/ping``.
- The events of ``vllm/entrypoints/openai/realtime/protocol.py``: ``session.created`` on connect;
  ``session.update {model}``; ``input_audio_buffer.append {audio: base64 PCM16, 16 kHz mono}``;
  ``input_audio_buffer.commit`` starts an utterance's transcription and ``commit {final: true}`` ends its audio;
  back come ``transcription.delta {delta}`` while audio arrives and ``transcription.done {text, usage}``;
  mistakes are ``error {error, code}`` with vLLM's codes. JSON is accepted in text or binary frames (SageMaker
  relays a payload part without a UTF8 data type as binary; the AWS bridge decodes those too).

PocketSphinx (speakwire's ``[align]`` extra, US English, its default language model) decodes the audio as it
arrives; a delta carries the words its running hypothesis added. It is far less accurate than Voxtral, which is
why the local responder matches key words rather than sentences.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from local_services import ServedApp, serve

RATE = 16_000
MODEL = "mistralai/Voxtral-Mini-4B-Realtime-2602"
PARTIAL_EVERY_S = 0.3
"""How much new audio makes the running hypothesis worth asking for again (a delta, if it grew)."""


class Transcriber:
    """One utterance's streaming PocketSphinx decode: ``feed`` PCM16 as it comes, ``finish`` for the text.

    Blocking calls (PocketSphinx is C code that holds the GIL for a few ms per call); the session runs them in a
    worker thread, one at a time, because a decoder is not thread-safe.
    """

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self._decoder.start_utt()
        self._since_partial = 0

    def feed(self, pcm: bytes) -> str | None:
        """Decode ``pcm``; the running hypothesis when enough audio came since the last one, else None."""
        self._decoder.process_raw(pcm, False, False)
        self._since_partial += len(pcm) // 2
        if self._since_partial < PARTIAL_EVERY_S * RATE:
            return None
        self._since_partial = 0
        return _text(self._decoder)

    def finish(self) -> str:
        self._decoder.end_utt()
        return _text(self._decoder)


def _text(decoder: Any) -> str:
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""


def load_decoder() -> Any:
    """PocketSphinx's US English model, dictionary and language model from its wheel (no download)."""
    from pocketsphinx import Decoder

    return Decoder(samprate=RATE, loglevel="FATAL")


class RealtimeSession:
    """One WebSocket connection speaking vLLM's realtime protocol (``RealtimeConnection`` in vLLM)."""

    def __init__(self, websocket: WebSocket, standin: VoxtralStandIn) -> None:
        self.websocket = websocket
        self.standin = standin
        self.model: str | None = None
        self.pending: asyncio.Queue[bytes | None] = asyncio.Queue()
        """Audio appended before the commit that starts an utterance: vLLM queues it for the next generation."""
        self.generation: asyncio.Task[None] | None = None
        self.send_lock = asyncio.Lock()

    async def run(self) -> None:
        await self.websocket.accept()
        await self.send({"type": "session.created", "id": f"sess-{uuid.uuid4().hex}", "created": int(time.time())})
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace")
                try:
                    event = json.loads(raw)
                except json.JSONDecodeError:
                    await self.error("Invalid JSON", "invalid_json")
                    continue
                await self.handle(event)
        except WebSocketDisconnect:
            return
        finally:
            if self.generation is not None:
                self.generation.cancel()

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "session.update":
            self.model = event.get("model")
        elif kind == "input_audio_buffer.append":
            try:
                pcm = base64.b64decode(event["audio"], validate=True)
            except (KeyError, ValueError):
                await self.error("Invalid audio data", "invalid_audio")
                return
            if not pcm or len(pcm) % 2:
                await self.error("Invalid audio data", "invalid_audio")
                return
            self.pending.put_nowait(pcm)
        elif kind == "input_audio_buffer.commit":
            if self.model is None:
                await self.error(
                    "Model not validated. Make sure to validate the model by sending a session.update event.",
                    "model_not_validated",
                )
            elif event.get("final"):
                self.pending.put_nowait(None)
            elif self.generation is None or self.generation.done():
                self.generation = asyncio.create_task(self.transcribe(self.pending))
        else:
            await self.error(f"Unknown event type: {kind}", "unknown_event")

    async def transcribe(self, audio: asyncio.Queue[bytes | None]) -> None:
        """One utterance: decode audio until the final commit, sending deltas, then ``transcription.done``."""
        transcriber = Transcriber(await self.standin.decoder())
        sent: list[str] = []
        seconds = 0.0
        try:
            while (pcm := await audio.get()) is not None:
                seconds += len(pcm) / 2 / RATE
                partial = await asyncio.to_thread(transcriber.feed, pcm)
                if partial is not None:
                    sent = await self.send_new_words(sent, partial)
            text = await asyncio.to_thread(transcriber.finish)
            await self.send_new_words(sent, text)
            usage = {"prompt_tokens": round(seconds * 12.5), "completion_tokens": len(text.split())}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            await self.send({"type": "transcription.done", "text": text, "usage": usage})
            self.standin.release(transcriber)  # a decoder left mid-utterance (cancelled) is not reused
        finally:
            while not audio.empty():  # vLLM clears the queue for the next utterance
                audio.get_nowait()

    async def send_new_words(self, sent: list[str], hypothesis: str) -> list[str]:
        """A delta with the words ``hypothesis`` adds to what was sent (a revised hypothesis waits for done)."""
        words = hypothesis.split()
        if len(words) > len(sent) and words[: len(sent)] == sent:
            added = " ".join(words[len(sent) :])
            await self.send({"type": "transcription.delta", "delta": (" " if sent else "") + added})
            return words
        return sent

    async def send(self, event: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.websocket.send_text(json.dumps(event))

    async def error(self, message: str, code: str) -> None:
        await self.send({"type": "error", "error": message, "code": code})


class VoxtralStandIn:
    """The stand-in's app and its pool of PocketSphinx decoders (each loads in about 0.3 s)."""

    def __init__(self) -> None:
        self.app = FastAPI(title="Voxtral stand-in")
        self.sessions: set[RealtimeSession] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        """The server's event loop, for ``RunningStandIn.drop_sessions`` from another thread."""
        self._decoders: list[Any] = []
        self._lock = threading.Lock()

        async def ping() -> dict[str, str]:
            return {"status": "healthy"}

        async def realtime(websocket: WebSocket) -> None:
            self.loop = asyncio.get_running_loop()
            session = RealtimeSession(websocket, self)
            self.sessions.add(session)
            try:
                await session.run()
            finally:
                self.sessions.discard(session)

        self.app.add_api_route("/ping", ping, methods=["GET", "POST"])
        self.app.add_api_route("/health", ping, methods=["GET"])
        self.app.add_api_websocket_route("/v1/realtime", realtime)
        self.app.add_api_websocket_route("/invocations-bidirectional-stream", realtime)

    async def decoder(self) -> Any:
        with self._lock:
            if self._decoders:
                return self._decoders.pop()
        return await asyncio.to_thread(load_decoder)

    def release(self, transcriber: Transcriber) -> None:
        with self._lock:
            self._decoders.append(transcriber._decoder)

    async def drop_sessions(self) -> int:
        """Close every open connection abruptly (1011), as a crashed container would; how many there were."""
        sessions = list(self.sessions)
        for session in sessions:
            await session.websocket.close(code=1011, reason="stand-in dropped the connection")
        return len(sessions)


@dataclass
class RunningStandIn:
    """A stand-in served in a background thread of this process (``start``)."""

    standin: VoxtralStandIn
    served: ServedApp

    @property
    def port(self) -> int:
        return self.served.port

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def drop_sessions(self) -> int:
        """``VoxtralStandIn.drop_sessions`` on the server's own event loop."""
        if self.standin.loop is None:
            return 0
        return asyncio.run_coroutine_threadsafe(self.standin.drop_sessions(), self.standin.loop).result(timeout=10)

    def stop(self) -> None:
        self.served.stop()


def start() -> RunningStandIn:
    """Serve a stand-in on a free loopback port in a daemon thread; returns once it listens."""
    standin = VoxtralStandIn()
    return RunningStandIn(standin, serve(standin.app, "voxtral-standin"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="8080: where SageMaker's sidecar connects")
    args = parser.parse_args()
    uvicorn.run(VoxtralStandIn().app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
