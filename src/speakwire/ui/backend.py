"""What the Gradio page asks of a speech service, answered in words a person can act on.

The page needs three things: the voices and languages to offer (``catalogue()``), a
stream of PCM chunks with a running tally while the server speaks (``speak()``), and,
when anything fails, one sentence saying what went wrong and what to do — never a
stack trace. All of it lives here, without Gradio, so it is tested against a real
server without a browser.

The same ``SpeechBackend`` drives a speakwire server (HTTP for the catalogue, the
WebSocket for speech) or a SageMaker endpoint (``InvokeEndpoint`` routed to
``/v1/audio/voices`` for the catalogue, the bidirectional stream for speech); only the
two callables it is built with differ.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import json
import mimetypes
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import InvalidStatus

from speakwire.client.stream import SpeechStreamClient
from speakwire.client.transport import StreamTransport, TransportClosed
from speakwire.client.websocket import WebSocketTransport

DEFAULT_URL = "http://127.0.0.1:8000"
CONNECT_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 120.0
"""Longest wait for the next message once speaking: a cold GPU model can take a while for the first frame."""
PCM_SAMPLE_WIDTH = 2  # the stream's PCM is s16le mono

# Close codes a speakwire stream ends with (see speakwire.server.stream.protocol), and what they mean to a user.
# 1008 (policy) is left out: its reason always says what was refused.
_CLOSE_HINTS = {
    1009: "the message was too large for the server",
    1011: "the server hit an internal error (see its log)",
    1013: "the server is busy with other streams; try again in a moment",
}


class UiError(Exception):
    """A failure told for a person: what went wrong and, where we know, what to do about it."""


@dataclass(frozen=True, slots=True)
class Catalogue:
    """What the page offers: the service's voices and languages, and whether it clones voices."""

    voices: tuple[str, ...]
    default_voice: str | None
    languages: tuple[str, ...]
    supports_cloning: bool
    engine: str = ""
    note: str = ""
    """Said next to the voices when they are a guess rather than the service's own list."""

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Catalogue:
        """Read a ``GET /v1/audio/voices`` body."""
        voices = tuple(str(v) for v in body.get("voices") or ())
        saved = (v["name"] if isinstance(v, dict) else v for v in body.get("uploaded_voices") or ())
        uploaded = tuple(name for name in map(str, saved) if name not in voices)
        return cls(
            voices=voices + uploaded,
            default_voice=body.get("default_voice") or (voices[0] if voices else None),
            languages=tuple(str(x) for x in body.get("languages") or ()),
            supports_cloning=bool(body.get("supports_cloning")),
            engine=str(body.get("engine") or ""),
        )

    def describe(self) -> str:
        """One line for the status box once the service has answered."""
        count = f"{len(self.voices)} voice{'s' if len(self.voices) != 1 else ''}"
        cloning = ", voice cloning available" if self.supports_cloning else ""
        engine = f"{self.engine}, " if self.engine else ""
        return f"Ready: {engine}{count}{cloning}. {self.note}".strip()


@dataclass(frozen=True, slots=True)
class SpeakRequest:
    """One utterance as the page collected it; ``None`` leaves a field to the server's default."""

    text: str
    voice: str | None = None
    language: str | None = None
    speed: float | None = None
    ref_audio: str | None = None
    """Reference clip as a ``data:`` URI (see ``reference_data_uri``), for engines that clone."""
    ref_text: str | None = None
    """What is said in the reference clip; improves cloning where the engine uses it."""

    def session_config(self) -> dict[str, Any]:
        """The ``session.config`` fields: raw PCM streamed as it is made, so playback starts early."""
        fields: dict[str, Any] = {
            "response_format": "pcm",
            "stream_audio": True,
            "voice": self.voice or None,
            "language": self.language or None,
            "speed": self.speed,
        }
        if self.ref_audio:
            fields.update(ref_audio=self.ref_audio, ref_text=self.ref_text or None)
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """The running tally shown while audio arrives."""

    chunks: int = 0
    total_bytes: int = 0
    sample_rate: int = 24_000
    time_to_first_audio_s: float | None = None
    """From sending the text to the first audio frame."""
    warnings: tuple[str, ...] = ()
    finished: bool = False

    @property
    def audio_seconds(self) -> float:
        return self.total_bytes / PCM_SAMPLE_WIDTH / self.sample_rate

    def describe(self) -> str:
        """The status line, e.g. ``Done: 9 chunks, 167,742 bytes (3.49 s of audio); first audio after 261 ms.``"""
        state = "Done" if self.finished else "Streaming"
        line = (f"{state}: {self.chunks} chunk{'s' if self.chunks != 1 else ''}, {self.total_bytes:,} bytes "
                f"({self.audio_seconds:.2f} s of audio)")  # fmt: skip
        if self.time_to_first_audio_s is not None:
            line += f"; first audio after {self.time_to_first_audio_s * 1000:.0f} ms"
        return "\n".join([line + ".", *(f"Server: {w}" for w in self.warnings)])


Connect = Callable[[], Awaitable[StreamTransport]]
LoadCatalogue = Callable[[], Awaitable[Catalogue]]


class SpeechBackend:
    """A speech service as the page sees it; build one with ``for_server`` or ``for_sagemaker``."""

    def __init__(
        self,
        *,
        target: str,
        connect: Connect,
        load_catalogue: LoadCatalogue,
        config_extra: dict[str, Any] | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        """
        Args:
            target: The service in words, e.g. ``speakwire at http://127.0.0.1:8000``.
            connect: Opens a stream transport; raises ``UiError`` when it cannot.
            load_catalogue: Fetches voices and languages; raises ``UiError`` when it cannot.
            config_extra: Added to every ``session.config`` (the API key, where headers cannot carry it).
            idle_timeout_s: Longest silence tolerated between two messages of one utterance.
        """
        self.target = target
        self._connect = connect
        self._load_catalogue = load_catalogue
        self._config_extra = dict(config_extra or {})
        self._idle_timeout_s = idle_timeout_s

    @classmethod
    def for_server(cls, url: str = DEFAULT_URL, *, api_key: str | None = None) -> SpeechBackend:
        """A speakwire server: ``url`` is its base (``http://host:port``); a ``ws://`` URL works too."""
        base = _http_base(url)
        return cls(target=f"speakwire at {base}", connect=functools.partial(_connect_websocket, url, base, api_key),
                   load_catalogue=functools.partial(_server_catalogue, base, api_key))  # fmt: skip

    @classmethod
    def for_sagemaker(cls, endpoint_name: str, *, region: str, api_key: str | None = None) -> SpeechBackend:
        """A SageMaker endpoint, over the bidirectional stream (needs Python ≥ 3.12 and ``[sagemaker-bidi]``)."""
        # SageMaker forwards no Authorization header, so the key rides in session.config.
        return cls(
            target=f"SageMaker endpoint {endpoint_name} ({region})",
            connect=functools.partial(_connect_sagemaker, endpoint_name, region),
            load_catalogue=functools.partial(asyncio.to_thread, _sagemaker_catalogue, endpoint_name, region),
            config_extra={"api_key": api_key} if api_key else None,
        )

    async def catalogue(self) -> Catalogue:
        """The service's voices and languages. Raises ``UiError``."""
        return await self._load_catalogue()

    async def speak(self, request: SpeakRequest) -> AsyncIterator[tuple[bytes, StreamProgress]]:
        """Speak ``request.text``, yielding each PCM chunk (s16le mono) with the tally so far, as it arrives.

        The last item is ``(b"", progress)`` with ``progress.finished`` set. Non-fatal server
        errors (one sentence failed) end up in ``progress.warnings``; anything that ends the
        stream early raises ``UiError``.
        """
        if not request.text.strip():
            raise UiError("Nothing to say: type some text first.")
        client = SpeechStreamClient(await self._connect())
        try:
            await client.configure(**request.session_config(), **self._config_extra)
            started = time.perf_counter()
            await client.send_text(request.text)
            await client.done()
            async for item in self._receive(client, started):
                yield item
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _receive(self, client: SpeechStreamClient, started: float) -> AsyncIterator[tuple[bytes, StreamProgress]]:
        progress = StreamProgress()
        carry = b""  # an odd byte split off a frame belongs to the next one's first sample
        last_error: str | None = None
        while True:
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    message = await client.receive()
            except TransportClosed as exc:
                raise UiError(_closed_message(self.target, exc, last_error)) from exc
            except TimeoutError as exc:
                raise UiError(f"{self.target} sent nothing for {self._idle_timeout_s:g} s; gave up.") from exc
            if isinstance(message, bytes):
                data, carry = _whole_samples(carry + message)
                if not data:
                    continue
                first = progress.time_to_first_audio_s
                progress = dataclasses.replace(
                    progress,
                    chunks=progress.chunks + 1,
                    total_bytes=progress.total_bytes + len(data),
                    time_to_first_audio_s=first if first is not None else time.perf_counter() - started,
                )
                yield data, progress
                continue
            kind = message.get("type")
            if kind == "audio.start":
                progress = dataclasses.replace(progress, sample_rate=int(message.get("sample_rate") or 24_000))
            elif kind in ("error", "warning"):
                last_error = str(message.get("message") or kind)
                progress = dataclasses.replace(progress, warnings=(*progress.warnings, last_error))
            elif kind == "session.done":
                yield b"", dataclasses.replace(progress, finished=True)
                return


def reference_data_uri(path: str | Path) -> str:
    """A reference clip file as a ``data:`` URI; the server decodes any common format itself."""
    file = Path(path)
    mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(file.read_bytes()).decode('ascii')}"


def _whole_samples(data: bytes) -> tuple[bytes, bytes]:
    cut = len(data) - len(data) % PCM_SAMPLE_WIDTH
    return data[:cut], data[cut:]


def _http_base(url: str) -> str:
    """``ws://h:p/v1/audio/speech/stream`` or ``http://h:p/`` → ``http://h:p``: where the HTTP routes live."""
    parsed = httpx.URL(url)
    scheme = {"ws": "http", "wss": "https"}.get(parsed.scheme, parsed.scheme)
    return str(parsed.copy_with(scheme=scheme, path="/", query=None, fragment=None)).rstrip("/")


async def _connect_websocket(url: str, base: str, api_key: str | None) -> StreamTransport:
    try:
        return await WebSocketTransport.connect(url, api_key=api_key, open_timeout=CONNECT_TIMEOUT_S)
    except TransportClosed as exc:
        raise UiError(_unreachable_message(base, exc.__cause__ or exc)) from exc
    except InvalidStatus as exc:
        raise UiError(_status_message(base, exc.response.status_code, bytes(exc.response.body or b""))) from exc
    except (OSError, TimeoutError) as exc:
        raise UiError(_unreachable_message(base, exc)) from exc


async def _connect_sagemaker(endpoint_name: str, region: str) -> StreamTransport:
    # Imported here: the SDK exists only on Python >= 3.12, and only endpoint users need it.
    from speakwire.deploy.sagemaker.bidi import SageMakerBidiTransport

    try:
        return await SageMakerBidiTransport.connect(endpoint_name, region=region)
    except ImportError as exc:  # BidiClientUnavailableError: its message says what to install
        raise UiError(str(exc)) from exc
    except TransportClosed as exc:
        raise UiError(f"Cannot open a stream to SageMaker endpoint {endpoint_name!r} in {region}: "
                      f"{exc.reason or exc}") from exc  # fmt: skip


async def _server_catalogue(base: str, api_key: str | None) -> Catalogue:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with httpx.AsyncClient(timeout=CONNECT_TIMEOUT_S) as http:
            response = await http.get(f"{base}/v1/audio/voices", headers=headers)
    except httpx.TransportError as exc:
        raise UiError(_unreachable_message(base, exc)) from exc
    if response.status_code != 200:
        raise UiError(_status_message(base, response.status_code, response.content))
    try:
        body = response.json()
    except ValueError as exc:
        raise UiError(f"{base} answered, but not like a speakwire server (no JSON voice list).") from exc
    return Catalogue.from_json(body)


def _sagemaker_catalogue(endpoint_name: str, region: str) -> Catalogue:
    """Ask the container for ``/v1/audio/voices`` through ``InvokeEndpoint``; guess Qwen3-TTS if it cannot say.

    speakwire's container routes ``route=/v1/audio/voices`` to its voice list; the vLLM-Omni
    DLC has no such route, so its speakers are assumed to be Qwen3-TTS CustomVoice's.
    """
    try:
        import boto3  # the [sagemaker] extra

        runtime = boto3.client("sagemaker-runtime", region_name=region)
        response = runtime.invoke_endpoint(EndpointName=endpoint_name, ContentType="application/json", Body=b"{}",
                                           CustomAttributes="route=/v1/audio/voices")  # fmt: skip
        body = json.loads(response["Body"].read())
        if isinstance(body, dict) and body.get("voices"):
            return Catalogue.from_json(body)
    except Exception:  # any failure here only means we fall back to the well-known speakers
        pass
    from speakwire.engines.qwen3.engine import DEFAULT_SPEAKER, LANGUAGE_ORDER

    return Catalogue(voices=(DEFAULT_SPEAKER,), default_voice=DEFAULT_SPEAKER, languages=LANGUAGE_ORDER,
                     supports_cloning=False, engine="qwen3",
                     note="The endpoint did not list its voices; type a speaker name if you know another.")  # fmt: skip


def _unreachable_message(base: str, cause: BaseException) -> str:
    return f"Cannot reach the speakwire server at {base}: {_network_cause(cause)}. Is it running? (speakwire serve)"


def _network_cause(exc: BaseException) -> str:
    """The short reason a connection failed: refused, unknown host, or timed out."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in chain:
        if isinstance(error, ConnectionRefusedError) or "connection refused" in str(error).lower():
            return "connection refused"
        if isinstance(error, socket.gaierror) or "name or service not known" in str(error).lower():
            return "unknown host"
        if isinstance(error, TimeoutError | httpx.TimeoutException):
            return f"no answer within {CONNECT_TIMEOUT_S:g} s"
    return str(exc) or type(exc).__name__


def _status_message(base: str, status: int, body: bytes) -> str:
    if status == 401:
        return f"{base} needs a valid API key: start the UI with --api-key KEY."
    if status == 503:
        return f"{base} is still loading its engine; try again in a moment."
    return f"{base} answered HTTP {status}: {_error_text(body)}"


def _error_text(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body's first line."""
    try:
        decoded = json.loads(body)
        if isinstance(decoded, dict):
            error = decoded.get("error")
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])
            if isinstance(decoded.get("detail"), str):
                return str(decoded["detail"])
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip().splitlines()
    return text[0][:200] if text else "no details"


def _closed_message(target: str, exc: TransportClosed, last_error: str | None) -> str:
    """Why the stream ended early: the server's own ``error`` message beats a close reason cut to 120 bytes."""
    reason = (last_error or exc.reason or "").strip()
    hint = _CLOSE_HINTS.get(exc.code or 0)
    if not reason:
        return f"{target} ended the stream: {hint or 'it closed before the speech was done'}."
    if "api key" in reason.lower():
        reason += " Start the UI with --api-key KEY."
    if hint:
        return f"{target} ended the stream: {reason.rstrip('.')} ({hint})."
    return f"{target} ended the stream: {reason}"
