"""SpeechStreamClient: the speech-stream protocol over any StreamTransport.

Used by ``speakwire stream``, the tests, the Gradio app and the SageMaker smoke test.
``speak()`` sends text pieces (optionally paced like an LLM) while it receives
audio, and returns the PCM, every event, and the time to first audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from speakwire.client.transport import StreamTransport, TransportClosed
from speakwire.client.websocket import WebSocketTransport


class StreamError(Exception):
    """The server sent an ``error`` event that ended the utterance, or closed the stream."""


@dataclass(slots=True)
class StreamResult:
    audio: bytes = b""
    """PCM (s16le) when stream_audio is on, else the concatenated per-sentence files."""
    sentences: list[bytes] = field(default_factory=list)
    """Per-sentence audio (one encoded file each when stream_audio is off)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    sample_rate: int = 24000
    time_to_first_audio_s: float | None = None
    """From the first text sent to the first binary frame received."""
    audio_frames: int = 0
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "error"]


class SpeechStreamClient:
    def __init__(self, transport: StreamTransport) -> None:
        self.transport = transport

    @classmethod
    async def connect(cls, url: str, *, api_key: str | None = None) -> SpeechStreamClient:
        return cls(await WebSocketTransport.connect(url, api_key=api_key))

    async def __aenter__(self) -> SpeechStreamClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def send(self, event: dict[str, Any]) -> None:
        await self.transport.send_text(json.dumps(event))

    async def configure(self, **fields: Any) -> None:
        await self.send({"type": "session.config", **{k: v for k, v in fields.items() if v is not None}})

    async def send_text(self, text: str) -> None:
        await self.send({"type": "input.text", "text": text})

    async def done(self) -> None:
        await self.send({"type": "input.done"})

    async def cancel(self) -> None:
        await self.send({"type": "input.cancel"})

    async def close_session(self) -> None:
        await self.send({"type": "session.close"})

    async def receive(self) -> dict[str, Any] | bytes:
        """Next event (a dict) or audio frame (bytes); raises TransportClosed at the end."""
        message = await self.transport.receive()
        if isinstance(message, bytes):
            return message
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    async def messages(self) -> AsyncIterator[dict[str, Any] | bytes]:
        with contextlib.suppress(TransportClosed):
            while True:
                yield await self.receive()

    async def speak(
        self,
        text: str | Iterable[str] | AsyncIterable[str],
        *,
        piece_delay_s: float = 0.0,
        timeout_s: float = 120.0,
        done: bool = True,
    ) -> StreamResult:
        """Send text (pieces, paced by ``piece_delay_s``) then ``input.done``; collect until ``session.done``.

        Configure the session first. Raises StreamError if the server closes the stream early.
        """
        result = StreamResult()
        first_sent: list[float] = []

        async def pieces() -> AsyncIterator[str]:
            if isinstance(text, str):
                yield text
            elif isinstance(text, AsyncIterable):
                async for piece in text:
                    yield piece
            else:
                for piece in text:
                    yield piece

        async def sender() -> None:
            async for piece in pieces():
                if not first_sent:
                    first_sent.append(time.perf_counter())
                await self.send_text(piece)
                if piece_delay_s:
                    await asyncio.sleep(piece_delay_s)
            if done:
                await self.done()

        send_task = asyncio.create_task(sender())
        try:
            async with asyncio.timeout(timeout_s):
                await self._collect(result, first_sent)
        finally:
            if not send_task.done():
                send_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TransportClosed):
                await send_task
        return result

    async def _collect(self, result: StreamResult, first_sent: list[float]) -> None:
        current = bytearray()
        try:
            while True:
                message = await self.receive()
                if isinstance(message, bytes):
                    if result.time_to_first_audio_s is None and first_sent:
                        result.time_to_first_audio_s = time.perf_counter() - first_sent[0]
                    result.audio_frames += 1
                    current.extend(message)
                    continue
                result.events.append(message)
                kind = message.get("type")
                if kind == "audio.start":
                    result.sample_rate = int(message.get("sample_rate", result.sample_rate))
                    current = bytearray()
                elif kind == "audio.done":
                    result.sentences.append(bytes(current))
                    result.audio += bytes(current)
                    current = bytearray()
                elif kind == "session.done":
                    result.usage = dict(message.get("usage") or {})
                    return
        except TransportClosed as exc:
            raise StreamError(f"stream closed before session.done (code {exc.code}): {exc.reason}") from exc

    async def aclose(self) -> None:
        await self.transport.aclose()


def speak_sync(url: str, text: str, *, api_key: str | None = None, **config: Any) -> StreamResult:
    """Blocking helper: one session, one utterance."""

    async def run() -> StreamResult:
        async with await SpeechStreamClient.connect(url, api_key=api_key) as client:
            await client.configure(**config)
            return await client.speak(text)

    return asyncio.run(run())
