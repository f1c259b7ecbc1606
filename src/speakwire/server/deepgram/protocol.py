"""Deepgram Aura ``/v1/speak`` on the wire: query parameters, client messages, server messages, errors.

No sockets and no asyncio here; ``session.py`` (WebSocket) and ``router.py`` (REST) drive it.
Facts come from the ``deepgram-sdk`` 7.x wheel (``speak/v1/raw_client.py``, ``socket_client.py``,
``types/``) and Deepgram's docs (../shared/reference/dialects.md §5).

**model.** Deepgram names a voice with its model (``aura-2-thalia-en``). A value naming one of our served
models means the default voice; any other names a voice, resolved as every route resolves one: every Aura
name (``aura-…``, ``speakwire.voice_presets``) means our default voice, as OpenAI's voice names do on the
OpenAI route (unless ``--no-preset-voice-aliases``, or we have a voice or saved voice of that name), and
otherwise it is one of our voices or saved voices (``model=en_US-joe-medium``, ``model=my-saved-voice``); an
unknown name is refused like a bad parameter (400).

**WebSocket.** ``encoding`` linear16 | mulaw | alaw (default linear16), ``sample_rate`` 8000, 16000,
24000, 32000, 44100 or 48000 for linear16 (default 24000), 8000 or 16000 for µ-law/A-law (default 8000),
``speed``. Binary frames carry raw audio. A ``Speak`` feeds the current utterance at once (complete
sentences start speaking before the ``Flush``, where Deepgram waits for it); ``Flush`` ends the
utterance and is answered ``Flushed`` after its last audio byte; ``Clear`` drops the text and stops
the audio now, answered ``Cleared``; ``Close`` closes the socket (1000) now. ``KeepAlive`` (Deepgram's
keep-alive on its other sockets, which clients sharing one Deepgram helper send here too) is not answered and
changes nothing but the idle clock; without it, or any other message, an idle session closes after
``ws_idle_timeout_s`` (1011 ``NET-0001``, as Deepgram's do).

Sequence ids count flushes: the session's n-th ``Flush`` (from 0) is answered ``Flushed{sequence_id: n}``
(an empty buffer is flushed too). ``Cleared{sequence_id}`` carries the number of flushes so far, a
watermark: every flush with a lower id was spoken or dropped, and a flush the clear dropped is never
answered ``Flushed``.

Recoverable problems (bad JSON, an unknown type, a binary frame, a ``Speak`` over Deepgram's 2,000
characters) get a ``Warning`` and the session goes on. A warning carries both field pairs in use:
``description``/``code`` (what SDK 7.x parses) and ``warn_msg``/``warn_code`` (what Deepgram's API
sends, deepgram-python-sdk#653). Refused handshakes are HTTP errors with Deepgram's error body
``{"err_code", "err_msg", "request_id"}`` and ``dg-request-id``/``dg-error`` headers: 401 for a bad key
(``INVALID_AUTH``), 400 for a bad parameter, 503 while the engine loads.

**REST** ``POST /v1/speak``: ``encoding`` linear16 | mulaw | alaw | mp3 | opus | flac | aac (default mp3),
``container`` wav | none (linear16/µ-law/A-law, default wav), ogg (opus), none (mp3, flac, aac), and
the sample rates Deepgram documents per encoding (mp3 and aac 22050 Hz, opus 48000 Hz: fixed).
``bit_rate``, ``tag`` and ``mip_opt_out`` are accepted and ignored; ``callback`` is refused.

Both take one extension, ``seed`` (an integer: repeatable, noise-free synthesis, as on ``/v1/audio/speech``);
the SDK sends it with ``request_options={"additional_query_parameters": {"seed": 1}}``.

**Request ids.** ``dg-request-id`` and ``Metadata.request_id`` are the connection's (or REST request's)
``x-request-id``. Each WebSocket utterance has its own (``<connection id>-<n>``), sent as an extra
``request_id`` on its ``Flushed`` and on a ``SYNTHESIS_FAILED`` warning (the SDK's models keep unknown fields).

``SpeakConnection`` is the WebSocket's state without I/O (is an utterance open, how many flushes);
``session.py`` does what it says.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from speakwire.encoders.wav import UNKNOWN_SIZE
from speakwire.errors import SpeakwireError
from speakwire.server.json_message import parse_json
from speakwire.server.limits import CLOSE_TOO_BIG, MAX_TEXT_MESSAGE_BYTES

MAX_SPEAK_CHARS = 2000
"""Deepgram's limit on the text of one ``Speak`` message (code points); longer ones are dropped with a warning."""

WsEncoding = Literal["linear16", "mulaw", "alaw"]
WS_ENCODINGS: tuple[str, ...] = WsEncoding.__args__  # type: ignore[attr-defined]
REST_ENCODINGS: tuple[str, ...] = (*WS_ENCODINGS, "mp3", "opus", "flac", "aac")

_PCM_RATES = (8000, 16000, 24000, 32000, 44100, 48000)
_G711_RATES = (8000, 16000)
_WS_RATES: dict[str, tuple[int, ...]] = {"linear16": _PCM_RATES, "mulaw": _G711_RATES, "alaw": _G711_RATES}
REST_RATES: dict[str, tuple[int, ...]] = {
    **_WS_RATES,
    "flac": (8000, 16000, 22050, 32000, 48000),
    "mp3": (22050,),
    "opus": (48000,),
    "aac": (22050,),
}
REST_SAMPLE_RATES = sorted({rate for rates in REST_RATES.values() for rate in rates})
"""Every rate some encoding of ``/v1/speak`` takes (``REST_RATES`` says which: the OpenAPI document lists both)."""

_DEFAULT_RATES = {"linear16": 24000, "mulaw": 8000, "alaw": 8000, "flac": 48000, "mp3": 22050, "opus": 48000,
                  "aac": 22050}  # fmt: skip
_CONTAINERS: dict[str, tuple[str, ...]] = {
    "linear16": ("wav", "none"), "mulaw": ("wav", "none"), "alaw": ("wav", "none"),
    "opus": ("ogg",), "mp3": ("none",), "flac": ("none",), "aac": ("none",),
}  # fmt: skip
"""Containers per encoding; the first is the default."""
_OUR_FORMATS = {"linear16": "pcm", "mulaw": "ulaw", "alaw": "alaw", "mp3": "mp3", "opus": "opus", "flac": "flac",
                "aac": "aac"}  # fmt: skip


class DeepgramError(Exception):
    """A request Deepgram would refuse, with the status and ``err_code`` it would use."""

    def __init__(self, status: int, err_code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.err_code = err_code
        self.message = message


def bad_parameter(message: str) -> DeepgramError:
    return DeepgramError(400, "INVALID_QUERY_PARAMETER", message)


_ERR_CODES = {400: "BAD_REQUEST", 404: "INVALID_QUERY_PARAMETER", 413: "PAYLOAD_TOO_LARGE", 429: "TOO_MANY_REQUESTS",
              503: "SERVICE_UNAVAILABLE"}  # fmt: skip


_QUERY_FIELDS = frozenset({"model", "voice", "speed", "sample_rate", "response_format", "language"})
"""Fields of our errors that come from Deepgram's query string."""


def from_speakwire(error: SpeakwireError) -> DeepgramError:
    """The Deepgram answer to one of our errors; an unknown model or voice is a bad parameter (400)."""
    if error.status_code == 404 or (error.status_code == 400 and error.param in _QUERY_FIELDS):
        return bad_parameter(error.message)
    status = error.status_code if error.status_code in _ERR_CODES else 500
    return DeepgramError(status, _ERR_CODES.get(status, "INTERNAL_SERVER_ERROR"), error.message)


def error_body(error: DeepgramError, request_id: str) -> dict[str, str]:
    return {"err_code": error.err_code, "err_msg": error.message, "request_id": request_id}


def error_headers(error: DeepgramError, request_id: str) -> dict[str, str]:
    headers = {"dg-request-id": request_id, "dg-error": _header_safe(error.message)}
    if error.status == 401:
        headers["www-authenticate"] = "Token"
    return headers


def _header_safe(text: str) -> str:
    return text.encode("ascii", "replace").decode().replace("\r", " ").replace("\n", " ")[:512]


def unauthorized() -> DeepgramError:
    return DeepgramError(401, "INVALID_AUTH", "Invalid credentials.")


def subprotocol_key(header: str | None) -> str | None:
    """The key of ``Sec-WebSocket-Protocol: token, <key>``, how browsers authenticate to Deepgram."""
    parts = [part.strip() for part in (header or "").split(",")]
    if len(parts) == 2 and parts[0].lower() in ("token", "bearer") and parts[1]:
        return parts[1]
    return None


# ----- query parameters -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeakParams:
    """A validated ``/v1/speak`` query."""

    model: str | None
    encoding: str
    container: str
    sample_rate: int
    speed: float | None
    seed: int | None = None
    """Our extension (``?seed=``): noise-free, repeatable synthesis, as ``seed`` on ``/v1/audio/speech``."""

    @property
    def response_format(self) -> str:
        """Our encoder for the audio inside the container (the WAV header of G.711 is added by ``wav_prefix``)."""
        if self.encoding == "linear16" and self.container == "wav":
            return "wav"
        return _OUR_FORMATS[self.encoding]

    def wav_prefix(self) -> bytes:
        """The streaming WAV header µ-law and A-law need in a wav container; ``b""`` otherwise."""
        if self.container == "wav" and self.encoding in ("mulaw", "alaw"):
            return g711_wav_header(self.encoding, self.sample_rate)
        return b""


def parse_ws_query(query: Mapping[str, str]) -> SpeakParams:
    """The WebSocket's query: raw audio only (``container`` is not a WebSocket parameter and is ignored)."""
    encoding = (query.get("encoding") or "linear16").lower()
    if encoding not in WS_ENCODINGS:
        raise bad_parameter(
            f"Invalid encoding '{query.get('encoding')}' for the streaming endpoint; "
            f"use one of {', '.join(WS_ENCODINGS)}."
        )
    rate = _sample_rate(query, encoding, _WS_RATES)
    return SpeakParams(_model(query), encoding, "none", rate, _speed(query), _seed(query))


def parse_rest_query(query: Mapping[str, str]) -> SpeakParams:
    """The REST query, including ``container`` and the encodings only REST has."""
    if query.get("callback"):
        raise bad_parameter("callback is not supported by this server; read the audio from the response.")
    encoding = (query.get("encoding") or "mp3").lower()
    if encoding not in REST_ENCODINGS:
        raise bad_parameter(f"Invalid encoding '{query.get('encoding')}'; use one of {', '.join(REST_ENCODINGS)}.")
    allowed = _CONTAINERS[encoding]
    container = (query.get("container") or allowed[0]).lower()
    if container not in allowed:
        raise bad_parameter(
            f"Invalid container '{query.get('container')}' for encoding {encoding}; use {' or '.join(allowed)}."
        )
    rate = _sample_rate(query, encoding, REST_RATES)
    return SpeakParams(_model(query), encoding, container, rate, _speed(query), _seed(query))


def _model(query: Mapping[str, str]) -> str | None:
    return (query.get("model") or "").strip() or None


def _sample_rate(query: Mapping[str, str], encoding: str, table: Mapping[str, tuple[int, ...]]) -> int:
    raw = query.get("sample_rate")
    allowed = table[encoding]
    if raw is None or raw == "":
        return _DEFAULT_RATES[encoding]
    try:
        value = float(raw)
    except ValueError:
        raise bad_parameter(f"Invalid sample_rate '{raw}': not a number.") from None
    if value in allowed:
        return int(value)
    if len(allowed) == 1:
        raise bad_parameter(f"sample_rate is not configurable for {encoding}; it is {allowed[0]} Hz.")
    rates = ", ".join(str(rate) for rate in allowed)
    raise bad_parameter(f"Invalid sample_rate '{raw}' for encoding {encoding}; use one of {rates}.")


def _speed(query: Mapping[str, str]) -> float | None:
    raw = query.get("speed")
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise bad_parameter(f"Invalid speed '{raw}': not a number.") from None


def _seed(query: Mapping[str, str]) -> int | None:
    raw = query.get("seed")
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_parameter(f"Invalid seed '{raw}': not an integer.") from None


def speech_target(model: str | None, served_models: Sequence[str]) -> tuple[str | None, str | None]:
    """``(model, voice)`` for ``SpeechOptions`` from Deepgram's ``model`` (see the module docstring)."""
    if model is None:
        return None, None
    if model.lower() in (name.lower() for name in served_models):
        return model, None
    return None, model


# ----- REST body --------------------------------------------------------------------------


def parse_rest_body(body: bytes, content_type: str) -> str:
    """The text to speak: JSON ``{"text": ...}`` (what the SDK sends), or a ``text/plain`` body."""
    try:
        decoded = body.decode()
    except UnicodeDecodeError:
        raise DeepgramError(400, "BAD_REQUEST", "Request body is not valid UTF-8.") from None
    if content_type.split(";")[0].strip().lower() == "text/plain":
        return decoded
    try:
        payload = parse_json(decoded)
    except json.JSONDecodeError as exc:
        raise DeepgramError(400, "BAD_REQUEST", f"Request body is not valid JSON: {exc.msg}.") from None
    text = payload.get("text") if isinstance(payload, dict) else None
    if not isinstance(text, str):
        raise DeepgramError(400, "BAD_REQUEST", 'Request body must be a JSON object with a string "text" field.')
    return text


# ----- client messages --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Speak:
    text: str


@dataclass(frozen=True, slots=True)
class Flush:
    pass


@dataclass(frozen=True, slots=True)
class Clear:
    pass


@dataclass(frozen=True, slots=True)
class Close:
    pass


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Resets the idle clock (every message does); nothing is answered."""


@dataclass(frozen=True, slots=True)
class ProtocolWarning:
    """A message that cannot be acted on; the session answers it with a ``Warning`` and goes on."""

    code: str
    description: str


Command = Speak | Flush | Clear | Close | KeepAlive
CLIENT_TYPES = ("Speak", "Flush", "Clear", "Close", "KeepAlive")
_CONTROLS: dict[str, Command] = {"Flush": Flush(), "Clear": Clear(), "Close": Close(), "KeepAlive": KeepAlive()}


def parse_client_message(message: str | bytes) -> Command | ProtocolWarning:
    """One client frame as a command, or the warning it earns."""
    if isinstance(message, bytes):
        return ProtocolWarning("BINARY_NOT_SUPPORTED", "Binary frames are not accepted; send JSON text messages.")
    try:
        event = parse_json(message)
    except json.JSONDecodeError as exc:
        return ProtocolWarning("INVALID_JSON", f"Could not parse the message as JSON: {exc.msg} at position {exc.pos}.")
    kind = event.get("type") if isinstance(event, dict) else None
    if kind not in CLIENT_TYPES:
        return ProtocolWarning(
            "UNKNOWN_MESSAGE_TYPE", f"Unknown message type {kind!r}; expected one of {', '.join(CLIENT_TYPES)}."
        )
    if kind != "Speak":
        return _CONTROLS[kind]
    text = event.get("text")
    if not isinstance(text, str):
        return ProtocolWarning("INVALID_MESSAGE", "A Speak message needs a string 'text' field.")
    if len(text) > MAX_SPEAK_CHARS:
        return ProtocolWarning(
            "TEXT_LENGTH_EXCEEDED",
            f"Speak text is {len(text)} characters; the limit is {MAX_SPEAK_CHARS} per message. "
            "The message was dropped; split the text over several Speak messages.",
        )
    return Speak(text)


# ----- server messages --------------------------------------------------------------------


def metadata(request_id: str, model_name: str, model_version: str, model_uuid: str) -> dict[str, Any]:
    return {"type": "Metadata", "request_id": request_id, "model_name": model_name, "model_version": model_version,
            "model_uuid": model_uuid}  # fmt: skip


def flushed(sequence_id: int, request_id: str | None = None) -> dict[str, Any]:
    """``request_id``: the utterance the flush ended (none for a flush of an empty buffer)."""
    event: dict[str, Any] = {"type": "Flushed", "sequence_id": sequence_id}
    if request_id is not None:
        event["request_id"] = request_id
    return event


def cleared(sequence_id: int) -> dict[str, Any]:
    return {"type": "Cleared", "sequence_id": sequence_id}


def warning(item: ProtocolWarning, request_id: str | None = None) -> dict[str, Any]:
    event = {"type": "Warning", "description": item.description, "code": item.code, "warn_msg": item.description,
             "warn_code": item.code}  # fmt: skip
    if request_id is not None:
        event["request_id"] = request_id
    return event


class FlushSequence:
    """Numbers flushes (from 0) and gives the watermark a ``Cleared`` carries."""

    def __init__(self) -> None:
        self.count = 0

    def next_flush(self) -> int:
        self.count += 1
        return self.count - 1

    def watermark(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class SpeakText:
    """Text for the current utterance; ``opens``: there is none yet, this text starts one."""

    text: str
    opens: bool


@dataclass(frozen=True, slots=True)
class FlushTurn:
    """End the current utterance (if any) and answer ``Flushed{sequence_id}`` after its audio."""

    sequence_id: int


@dataclass(frozen=True, slots=True)
class ClearAll:
    """Drop every utterance now and answer ``Cleared{sequence_id}`` (the flushes so far)."""

    sequence_id: int


@dataclass(frozen=True, slots=True)
class TooBig:
    """A frame over ``MAX_TEXT_MESSAGE_BYTES``: close with ``code`` and ``reason``."""

    code: int
    reason: str


Action = SpeakText | FlushTurn | ClearAll | Close | KeepAlive | ProtocolWarning | TooBig


class SpeakConnection:
    """One ``/v1/speak`` WebSocket, without I/O: client frames in, ``Action``s out.

    Text between two flushes is one utterance: the first ``Speak`` after a flush (or a clear) opens it,
    ``Flush`` ends it (or flushes an empty buffer) and takes the next sequence id, ``Clear`` drops it.
    """

    def __init__(self) -> None:
        self.sequence = FlushSequence()
        self.open = False
        """An utterance is taking text."""

    def receive(self, message: str | bytes) -> Action:
        limit = MAX_TEXT_MESSAGE_BYTES  # a frame over it closes the session: far above a 2,000-character Speak
        if len(message) > limit // 4 and _size(message) > limit:
            return TooBig(CLOSE_TOO_BIG, f"BIG-0000: message exceeds {limit} bytes")
        command = parse_client_message(message)
        if isinstance(command, Speak):
            opens, self.open = not self.open, True
            return SpeakText(command.text, opens)
        if isinstance(command, ProtocolWarning | KeepAlive):
            return command  # a keep-alive leaves the open utterance open
        self.open = False
        if isinstance(command, Flush):
            return FlushTurn(self.sequence.next_flush())
        if isinstance(command, Clear):
            return ClearAll(self.sequence.watermark())
        return command

    def drop(self) -> None:
        """The open utterance is gone (the session cleared it, or could not start it)."""
        self.open = False


def _size(message: str | bytes) -> int:
    return len(message) if isinstance(message, bytes) else len(message.encode(errors="surrogatepass"))


# ----- audio ------------------------------------------------------------------------------


def g711_wav_header(encoding: str, sample_rate: int) -> bytes:
    """A streaming (length unknown) WAV header for mono 8-bit G.711: format 7 for µ-law, 6 for A-law."""
    tag = 7 if encoding == "mulaw" else 6
    return struct.pack(
        "<4sI4s4sIHHIIHHH4sI",
        b"RIFF", UNKNOWN_SIZE, b"WAVE",
        b"fmt ", 18, tag, 1, sample_rate, sample_rate, 1, 8, 0,  # 18-byte fmt with cbSize 0, as non-PCM formats need
        b"data", UNKNOWN_SIZE,
    )  # fmt: skip
