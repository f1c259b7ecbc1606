"""The load generator: N concurrent streams against a running server, each replayed through a player.

A level runs a closed loop: ``concurrency`` clients start together (the burst is the hard case for
time to first audio) and each starts its next utterance the moment its last one ends, until the
level's utterance count is reached, so the server sees exactly ``concurrency`` streams throughout.

Three targets speak the same paragraphs:

* ``SpeakwireHttpTarget``: ``POST /v1/audio/speech`` with raw chunked PCM (``stream_format: audio``);
  first audio is timed from sending the request.
* ``SpeakwireWebSocketTarget``: the speech stream, text fed like an LLM emits it (a few words every
  tens of milliseconds); first audio is timed from the first ``input.text``, so it includes waiting for
  enough words to make a first segment, as a voice agent would.
* ``PiperHttpTarget``: Piper's own Flask server (``POST /synthesize``), which answers with one whole WAV;
  its "first audio" is the first byte of that file.

Every target also notes its first audible sample (``audible``), beside first byte.

``websocket_reply`` is one utterance over the speech stream, with every piece's send time: the WebSocket
target and the open-loop benchmark both speak through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from speakwire.bench.audible import AudibleOnset
from speakwire.bench.results import LevelResult, StreamRecord, record_from_arrivals
from speakwire.client.stream import SpeechStreamClient
from speakwire.client.transport import TransportClosed


def text_pieces(text: str, words_per_piece: int) -> list[str]:
    """Split ``text`` into pieces of ``words_per_piece`` words that join back to exactly ``text``."""
    if words_per_piece <= 0:
        return [text]
    words = text.split(" ")
    pieces = [" ".join(words[i : i + words_per_piece]) for i in range(0, len(words), words_per_piece)]
    return [piece + " " for piece in pieces[:-1]] + pieces[-1:]


@dataclass(frozen=True, slots=True)
class _Stream:
    """What one utterance produced, before it becomes a record."""

    sent_at: float
    ended_at: float
    arrivals: list[tuple[float, int]]
    bytes_per_second: float
    skip_bytes: int = 0
    error: str | None = None
    audible_at: float | None = None


class StreamTarget(ABC):
    """A server under test; ``async with`` it around a level (it may hold a connection pool)."""

    name: str

    def __init__(self, url: str, *, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    async def __aenter__(self) -> StreamTarget:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    @abstractmethod
    async def _stream(self, text: str) -> _Stream:
        """Speak ``text`` once; failures go into ``_Stream.error``, never raise."""

    async def stream(self, text: str, *, concurrency: int, index: int, level_start: float) -> StreamRecord:
        result = await self._stream(text)
        return record_from_arrivals(
            target=self.name, concurrency=concurrency, index=index, text=text, level_start=level_start,
            sent_at=result.sent_at, ended_at=result.ended_at, arrivals=result.arrivals,
            bytes_per_second=result.bytes_per_second, skip_bytes=result.skip_bytes, error=result.error,
            audible_at=result.audible_at,
        )  # fmt: skip


class _HttpTarget(StreamTarget):
    """Shared httpx pool: one connection per concurrent stream, no read timeout shorter than a stream."""

    _client: httpx.AsyncClient | None = None

    def __init__(self, url: str, *, timeout_s: float = 120.0, max_connections: int = 64) -> None:
        super().__init__(url, timeout_s=timeout_s)
        self._max_connections = max_connections

    async def __aenter__(self) -> StreamTarget:
        limits = httpx.Limits(max_connections=self._max_connections, max_keepalive_connections=self._max_connections)
        self._client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(self.timeout_s, connect=10.0))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _post_stream(
        self, path: str, body: dict[str, Any], *, wav: bool = False
    ) -> tuple[float, list[tuple[float, int]], bytes, dict[str, str], str | None, AudibleOnset]:
        """POST and time every body read; returns (sent_at, arrivals, first bytes, headers, error, onset).

        The body is 16-bit PCM, or with ``wav`` a WAV file whose header (within its first 64 bytes) is skipped.
        """
        if self._client is None:
            raise RuntimeError(f"use 'async with' on the {self.name} target")
        arrivals: list[tuple[float, int]] = []
        onset = WavAudibleOnset() if wav else AudibleOnset()
        head = bytearray()
        headers: dict[str, str] = {}
        error: str | None = None
        sent_at = time.perf_counter()
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self._client.stream("POST", f"{self.url}{path}", json=body) as response,
            ):
                headers = dict(response.headers)
                if response.status_code != 200:
                    detail = (await response.aread())[:300].decode(errors="replace")
                    error = f"HTTP {response.status_code}: {detail}"
                else:
                    async for data in response.aiter_raw():
                        now = time.perf_counter()
                        arrivals.append((now, len(data)))
                        onset.feed(now, data)
                        if len(head) < 64:
                            head.extend(data[: 64 - len(head)])
        except TimeoutError:
            error = f"timed out after {self.timeout_s:g} s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        return sent_at, arrivals, bytes(head), headers, error, onset


class SpeakwireHttpTarget(_HttpTarget):
    name = "speakwire-http"

    def __init__(
        self, url: str, *, timeout_s: float = 120.0, max_connections: int = 64, sample_rate: int = 24000
    ) -> None:
        super().__init__(url, timeout_s=timeout_s, max_connections=max_connections)
        self.sample_rate = sample_rate

    async def _stream(self, text: str) -> _Stream:
        body = {"input": text, "response_format": "pcm", "stream_format": "audio", "sample_rate": self.sample_rate}
        sent_at, arrivals, _, headers, error, onset = await self._post_stream("/v1/audio/speech", body)
        rate = int(headers.get("x-audio-sample-rate", self.sample_rate))
        return _Stream(sent_at, time.perf_counter(), arrivals, rate * 2, error=error, audible_at=onset.heard_at(rate))


class PiperHttpTarget(_HttpTarget):
    name = "piper-http"

    async def _stream(self, text: str) -> _Stream:
        sent_at, arrivals, head, _, error, onset = await self._post_stream("/synthesize", {"text": text}, wav=True)
        rate, header = 22050, 44
        if error is None:
            try:
                rate, header = parse_wav_head(head)
            except ValueError as exc:
                error = str(exc)
        audible_at = onset.heard_at(rate)
        return _Stream(sent_at, time.perf_counter(), arrivals, rate * 2, header, error, audible_at)


class WavAudibleOnset(AudibleOnset):
    """``AudibleOnset`` for a WAV body: holds the pieces until its header is whole, then skips it."""

    def __init__(self) -> None:
        super().__init__()
        self._held: list[tuple[float, bytes]] | None = []

    def feed(self, at: float, data: bytes) -> None:
        if self._held is None:
            super().feed(at, data)
            return
        self._held.append((at, data))
        head = b"".join(piece for _, piece in self._held)[:64]
        try:
            _, self._skip = parse_wav_head(head)
        except ValueError:
            if len(head) >= 64:
                self._held = None  # not a WAV we can read: the record's error says so, nothing is audible
                self.first_arrival = None
            return
        held, self._held = self._held, None
        for when, piece in held:
            super().feed(when, piece)


def parse_wav_head(head: bytes) -> tuple[int, int]:
    """Sample rate and header length of a mono 16-bit RIFF/WAVE file from its first bytes."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise ValueError("response is not a WAV file")
    offset, rate = 12, 0
    while offset + 8 <= len(head):
        chunk, size = head[offset : offset + 4], struct.unpack_from("<I", head, offset + 4)[0]
        if chunk == b"fmt " and offset + 16 <= len(head):
            rate = struct.unpack_from("<I", head, offset + 12)[0]
        if chunk == b"data":
            if not rate:
                break
            return rate, offset + 8
        offset += 8 + size + (size & 1)
    raise ValueError("WAV header not within the first bytes of the response")


@dataclass(slots=True)
class WebSocketReply:
    """One utterance over the speech stream as the client saw it (``time.perf_counter`` instants)."""

    arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(arrival time, byte count) of every binary audio frame."""
    sample_rate: int = 24000
    first_sent: float | None = None
    """Just before the first ``input.text`` went out."""
    sent_at: list[float] = field(default_factory=list)
    """After each piece went out, then after ``input.done``."""
    first_segment: str = ""
    """The first ``audio.start``'s ``sentence_text``: the words the server's first audio speaks."""
    onset: AudibleOnset = field(default_factory=AudibleOnset)
    """Where the first audible sample came."""
    refused: bool = False
    """Admission control said no (a ``busy`` error, close 1013)."""
    refusal: str = ""
    """The ``busy`` error's message: which admission rule said no."""
    error: str | None = None
    ended_at: float = 0.0


async def websocket_reply(
    url: str, pieces: Sequence[str], *, piece_interval_s: float, timeout_s: float
) -> WebSocketReply:
    """Send ``pieces`` as ``input.text`` events ``piece_interval_s`` apart (an LLM's feed), then ``input.done``,
    and collect the audio until ``session.done``. Failures go into the reply, never raise."""
    reply = WebSocketReply()

    async def feed(client: SpeechStreamClient) -> None:
        for i, piece in enumerate(pieces):
            if i and piece_interval_s:
                await asyncio.sleep(piece_interval_s)
            if reply.first_sent is None:
                reply.first_sent = time.perf_counter()
            await client.send_text(piece)
            reply.sent_at.append(time.perf_counter())
        await client.done()
        reply.sent_at.append(time.perf_counter())

    try:
        async with asyncio.timeout(timeout_s):
            client = await SpeechStreamClient.connect(url)
            sender: asyncio.Task[None] | None = None
            try:
                await client.configure(response_format="pcm", stream_audio=True)
                sender = asyncio.create_task(feed(client))
                while True:
                    message = await client.receive()
                    if isinstance(message, bytes):
                        now = time.perf_counter()
                        reply.arrivals.append((now, len(message)))
                        reply.onset.feed(now, message)
                        continue
                    kind = message.get("type")
                    if kind == "audio.start":
                        reply.sample_rate = int(message.get("sample_rate", reply.sample_rate))
                        reply.first_segment = reply.first_segment or str(message.get("sentence_text", ""))
                    elif kind == "error":
                        if message.get("code") == "busy":
                            reply.refused, reply.refusal = True, str(message.get("message", ""))
                        reply.error = f"error event: {message.get('message')}"
                    elif kind == "session.done":
                        break
            finally:
                if sender is not None:
                    sender.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await sender
                with contextlib.suppress(Exception):
                    await client.aclose()
    except TimeoutError:
        reply.error = f"timed out after {timeout_s:g} s"
    except TransportClosed as exc:
        reply.refused = reply.refused or exc.code == 1013
        reply.error = reply.error or f"stream closed before session.done: {exc}"
    except OSError as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    reply.ended_at = time.perf_counter()
    return reply


class SpeakwireWebSocketTarget(StreamTarget):
    """The speech stream with an LLM-like text feed: ``words_per_piece`` words every ``piece_interval_s``."""

    name = "speakwire-ws"

    def __init__(
        self, url: str, *, timeout_s: float = 120.0, words_per_piece: int = 5, piece_interval_s: float = 0.05
    ) -> None:
        super().__init__(url, timeout_s=timeout_s)
        self.words_per_piece = words_per_piece
        self.piece_interval_s = piece_interval_s

    async def _stream(self, text: str) -> _Stream:
        pieces = text_pieces(text, self.words_per_piece)
        reply = await websocket_reply(
            self.url, pieces, piece_interval_s=self.piece_interval_s, timeout_s=self.timeout_s
        )
        sent_at = reply.first_sent if reply.first_sent is not None else reply.ended_at
        audible_at = reply.onset.heard_at(reply.sample_rate)
        return _Stream(
            sent_at, reply.ended_at, reply.arrivals, reply.sample_rate * 2, error=reply.error, audible_at=audible_at
        )


async def run_level(target: StreamTarget, texts: Sequence[str], *, concurrency: int, streams: int) -> LevelResult:
    """Run ``streams`` utterances with ``concurrency`` in flight (closed loop); text ``i`` is ``texts[i % n]``."""
    if concurrency < 1 or streams < 1 or not texts:
        raise ValueError("need concurrency >= 1, streams >= 1 and at least one text")
    counter = itertools.count()
    records: list[StreamRecord] = []
    level_start = time.perf_counter()

    async def client() -> None:
        while (index := next(counter)) < streams:
            text = texts[index % len(texts)]
            records.append(await target.stream(text, concurrency=concurrency, index=index, level_start=level_start))

    async with target:
        await asyncio.gather(*(client() for _ in range(min(concurrency, streams))))
    wall = time.perf_counter() - level_start
    records.sort(key=lambda r: r.index)
    return LevelResult(target=target.name, concurrency=concurrency, wall_s=wall, streams=records)
