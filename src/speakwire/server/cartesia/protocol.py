"""Cartesia's TTS wire format, without I/O: requests parsed into typed commands, server events built.

What the official ``cartesia`` SDK (4.x, ``Cartesia-Version: 2026-08-14``) sends and parses, read from its
source (``cartesia/lib/_tts.py``, ``cartesia/types/{generation_request,websocket_response,tts_sse_event}.py``)
and Cartesia's docs (api-errors, context flushing):

* WebSocket generation request: ``{context_id, model_id, transcript, voice: {mode: "id", id} | "<id>",
  output_format: {container: "raw", encoding, sample_rate}, continue, flush?, add_timestamps?, language?,
  speed?, generation_config?, max_buffer_delay_ms?, ...}``; cancel: ``{cancel: true, context_id}``.
  A context's settings are those of its first request; later ones only add text (the SDK's
  ``no_more_inputs()`` repeats a placeholder voice, which must not fail the context).
* Flushing: chunks carry ``flush_id`` (starting at 1); a request with ``flush: true`` ends the current
  flush group, whose last audio is followed by ``flush_done`` with that group's id, and later text belongs
  to the next id (``ContextInput`` keeps the count).
* Server events: ``chunk`` (base64 ``data``, ``done: false``, ``status_code`` 206, ``step_time`` in ms),
  ``timestamps`` (``word_timestamps: {words, start, end}``, seconds from the context's first sample),
  ``flush_done``, ``done``, and ``error`` (``title``, ``message``, ``error_code``, ``status_code``,
  ``request_id``, ``context_id``). The SDK ends a context's ``receive()`` at its ``done`` or ``error``.
* HTTP errors are ``{error_code, title, message, request_id}`` with the HTTP status; SSE sends
  ``event: <type>`` lines with the same JSON the WebSocket sends (the SDK reads only ``data``).

Our one addition: an integer ``seed`` (the SDK passes extra keyword arguments through) asks for
repeatable synthesis, as on the OpenAI route. Cartesia's ``sonic-*`` model ids mean the served model.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from speakwire.errors import BadRequestError, SpeakwireError
from speakwire.server.options import SpeechOptions
from speakwire.text.alignment import WordTiming

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
"""The rates Cartesia lists for every container (``RawOutputFormat.sample_rate``)."""
ENCODINGS = ("pcm_f32le", "pcm_s16le", "pcm_mulaw", "pcm_alaw")
STATUS_PARTIAL = 206
"""The ``status_code`` Cartesia puts on chunk, timestamps, flush_done and done events."""
DEFAULT_MAX_BUFFER_DELAY_MS = 3000
MAX_BUFFER_DELAY_MS = 5000
SENTENCE_HOLD_S = 0.15
"""How long text ending in a full stop waits for more before it is spoken (see ``buffer_delay_s``)."""
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’)\]}»」』）】*]*\s*$")
SPEED_WORDS = {"slowest": 0.6, "slow": 0.8, "normal": 1.0, "fast": 1.25, "fastest": 1.5}
"""``speed`` as a word (``ModelSpeed``; the two extremes are from the older ``__experimental_controls``)."""
MIN_VOLUME, MAX_VOLUME = 0.5, 2.0
LANGUAGE_NAMES = {
    "en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "de": "German", "fr": "French",
    "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian",
}  # fmt: skip
"""Cartesia's ISO 639-1 codes in the spelling our engines use; other codes go to the engine as sent."""

Container = Literal["raw", "wav", "mp3"]

# (container, encoding) -> (our encoder's format, the AUDIO_FORMATS name resolve_speech validates with)
_FORMATS: dict[tuple[str, str | None], tuple[str, str]] = {
    ("raw", "pcm_f32le"): ("pcm_f32le", "pcm"),
    ("raw", "pcm_s16le"): ("pcm", "pcm"),
    ("raw", "pcm_mulaw"): ("ulaw", "ulaw"),
    ("raw", "pcm_alaw"): ("alaw", "alaw"),
    ("wav", "pcm_f32le"): ("wav_f32le", "wav"),
    ("wav", "pcm_s16le"): ("wav", "wav"),
    ("mp3", None): ("mp3", "mp3"),
}


class MessageError(BadRequestError):
    """A client message we cannot act on; ``context_id`` says which context it was for, when known."""

    def __init__(self, message: str, *, param: str | None = None, context_id: str | None = None) -> None:
        super().__init__(message, param=param)
        self.context_id = context_id


# ----- requests ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputFormat:
    container: Container
    encoding: str | None
    sample_rate: int
    encoder_format: str
    """The speakwire encoder that writes it (``create_encoder``)."""
    resolve_format: str
    """The ``AUDIO_FORMATS`` name that validates the same rate (``resolve_speech``)."""


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """How a context (or an HTTP request) speaks: fixed by its first generation request."""

    options: SpeechOptions
    output: OutputFormat
    add_timestamps: bool
    volume: float
    max_buffer_delay_s: float


@dataclass(frozen=True, slots=True)
class Generate:
    """A generation request: text for a context, maybe the end of its input, maybe a flush."""

    context_id: str | None
    transcript: str
    continue_: bool
    flush: bool
    fields: Mapping[str, Any]
    """The whole message, parsed into a ``ContextSpec`` only when it opens a context."""


@dataclass(frozen=True, slots=True)
class Cancel:
    context_id: str


@dataclass(frozen=True, slots=True)
class HttpRequest:
    transcript: str
    spec: ContextSpec
    context_id: str | None


def parse_message(text: str) -> Generate | Cancel:
    """One WebSocket text message; raises ``MessageError`` saying what is wrong."""
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageError(f"Invalid JSON: {exc.msg} at position {exc.pos}.") from exc
    if not isinstance(message, dict):
        raise MessageError("Each message must be a JSON object.")
    context_id = message.get("context_id")
    if context_id is not None and (not isinstance(context_id, str) or not context_id):
        raise MessageError("context_id must be a non-empty string.", param="context_id")
    if message.get("cancel") is True:
        if context_id is None:
            raise MessageError("A cancel request needs the context_id to cancel.", param="context_id")
        return Cancel(context_id)
    transcript = message.get("transcript")
    if not isinstance(transcript, str):
        raise MessageError("transcript must be a string.", param="transcript", context_id=context_id)
    try:
        continue_ = _bool(message, "continue", False)
        flush = _bool(message, "flush", False)
    except BadRequestError as exc:
        raise MessageError(exc.message, param=exc.param, context_id=context_id) from exc
    return Generate(context_id, transcript, continue_, flush, message)


def parse_spec(message: Mapping[str, Any], *, containers: Sequence[Container] = ("raw",)) -> ContextSpec:
    """Voice, model, output format and options of a request; raises ``BadRequestError``."""
    output = parse_output_format(message.get("output_format"), containers)
    config = message.get("generation_config")
    if config is not None and not isinstance(config, dict):
        raise BadRequestError("generation_config must be an object.", param="generation_config")
    config = config or {}
    speed = _speed(config.get("speed"), "generation_config.speed")
    if speed is None:
        speed = _speed(message.get("speed"), "speed")
    volume = config.get("volume")
    if volume is None:
        volume = 1.0
    elif isinstance(volume, bool) or not isinstance(volume, int | float) or not MIN_VOLUME <= volume <= MAX_VOLUME:
        raise BadRequestError(
            f"generation_config.volume must be a number from {MIN_VOLUME} to {MAX_VOLUME}.",
            param="generation_config.volume",
        )
    delay = message.get("max_buffer_delay_ms")
    if delay is None:
        delay = DEFAULT_MAX_BUFFER_DELAY_MS
    elif isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_BUFFER_DELAY_MS:
        raise BadRequestError(
            f"max_buffer_delay_ms must be an integer from 0 to {MAX_BUFFER_DELAY_MS}.", param="max_buffer_delay_ms"
        )
    options = SpeechOptions(
        model=model_name(message.get("model_id")),
        voice=voice_id(message.get("voice")),
        response_format=output.resolve_format,
        speed=speed,
        sample_rate=output.sample_rate,
        language=language_name(message.get("language") or message.get("locale")),
        seed=_seed(message.get("seed")),
    )
    return ContextSpec(
        options=options,
        output=output,
        add_timestamps=_bool(message, "add_timestamps", False),
        volume=float(volume),
        max_buffer_delay_s=delay / 1000,
    )


def parse_http_request(body: Any, *, sse: bool) -> HttpRequest:
    """The JSON body of ``POST /tts/bytes`` (raw, wav or mp3) or ``POST /tts/sse`` (raw only)."""
    if not isinstance(body, dict):
        raise BadRequestError("Request body must be a JSON object.")
    transcript = body.get("transcript")
    if not isinstance(transcript, str):
        raise BadRequestError("transcript must be a string.", param="transcript")
    if not transcript.strip():
        raise BadRequestError("transcript must not be empty.", param="transcript")
    context_id = body.get("context_id")
    if context_id is not None and not isinstance(context_id, str):
        raise BadRequestError("context_id must be a string.", param="context_id")
    spec = parse_spec(body, containers=("raw",) if sse else ("raw", "wav", "mp3"))
    return HttpRequest(transcript, spec, context_id or None)


def parse_output_format(value: Any, containers: Sequence[Container]) -> OutputFormat:
    if not isinstance(value, dict):
        raise BadRequestError(
            "output_format must be an object: {container, encoding, sample_rate}.", param="output_format"
        )
    container = value.get("container")
    if container not in containers:
        allowed = ", ".join(repr(c) for c in containers)
        raise BadRequestError(
            f"output_format.container must be {allowed} here, got {container!r}.", param="output_format.container"
        )
    encoding = value.get("encoding")
    if container == "mp3":
        encoding = None
    elif encoding not in ENCODINGS:
        raise BadRequestError(
            f"output_format.encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}.",
            param="output_format.encoding",
        )
    rate = value.get("sample_rate")
    if isinstance(rate, bool) or rate not in SAMPLE_RATES:
        raise BadRequestError(
            f"output_format.sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}, got {rate!r}.",
            param="output_format.sample_rate",
        )
    formats = _FORMATS.get((str(container), None if encoding is None else str(encoding)))
    if formats is None:
        raise BadRequestError(
            f"The wav container is served with pcm_s16le or pcm_f32le, not {encoding}; use container 'raw' "
            f"for {encoding}.",
            param="output_format.encoding",
        )
    return OutputFormat(cast(Container, container), encoding, int(rate), *formats)


def voice_id(value: Any) -> str | None:
    """``{"mode": "id", "id": "..."}`` or a bare id string (the SDK's ``VoiceSpecifierParam``)."""
    if isinstance(value, dict):
        mode = value.get("mode", "id")
        if mode != "id":
            raise BadRequestError(
                f"voice.mode {mode!r} is not supported; use {{'mode': 'id', 'id': '<voice>'}}.", param="voice.mode"
            )
        value = value.get("id")
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError("voice must be {'mode': 'id', 'id': '<voice id>'} or a voice id.", param="voice")
    return value.strip()


def model_name(value: Any) -> str | None:
    """Cartesia's own model ids (``sonic-3``, ``sonic-latest``, ...) mean the served model, like OpenAI's."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError("model_id must be a string.", param="model_id")
    if not value or value.lower().startswith("sonic"):
        return None
    return value


def language_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError("language must be a string such as 'en'.", param="language")
    code = value.strip()
    return LANGUAGE_NAMES.get(code.split("-")[0].lower(), code) if code else None


def _speed(value: Any, param: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in SPEED_WORDS:
        return SPEED_WORDS[value.lower()]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{param} must be one of {', '.join(SPEED_WORDS)} or a number.", param=param)
    return float(value)


def _seed(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequestError("seed must be an integer.", param="seed")
    return None if value is None else int(value)


def _bool(message: Mapping[str, Any], key: str, default: bool) -> bool:
    value = message.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequestError(f"{key} must be true or false.", param=key)
    return value


def buffer_delay_s(spec: ContextSpec, tail: str) -> float:
    """How long text held mid-utterance may wait for more before it is spoken anyway.

    The segmenter only cuts a sentence once it sees the next word ("$29." may go on as "$29.99"), so a
    client sending one whole sentence per request (pipecat's Cartesia service does) would wait for its next
    request. Text whose ``tail`` ends a sentence waits ``SENTENCE_HOLD_S`` at most (an LLM's next token comes
    sooner); anything else waits ``max_buffer_delay_ms``, Cartesia's buffering limit.
    """
    if _SENTENCE_END.search(tail):
        return min(spec.max_buffer_delay_s, SENTENCE_HOLD_S)
    return spec.max_buffer_delay_s


# ----- a context's input ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextStep:
    """What one request asks of a context: text to feed, then maybe a flush, then maybe the end of input."""

    text: str
    flush_id: int | None
    """The flush group this request closes (its ``flush_done`` id), when it flushes."""
    close: bool


class ContextInput:
    """The input side of one context: flush ids and whether its input is over.

    Text after ``continue: false`` is an error; an empty closing request after it (``no_more_inputs()``
    called twice, or after a flush with ``continue: false``) is ignored.
    """

    def __init__(self) -> None:
        self.flush_id = 1
        """The group the next text belongs to."""
        self.closed = False

    def receive(self, request: Generate) -> ContextStep:
        if self.closed:
            if request.transcript:
                raise MessageError(
                    "This context's input is over (a request with continue=false was sent); use a new context_id.",
                    param="transcript", context_id=request.context_id,
                )  # fmt: skip
            return ContextStep("", None, close=False)
        flushed = None
        if request.flush:
            flushed = self.flush_id
            self.flush_id += 1
        if not request.continue_:
            self.closed = True
        return ContextStep(request.transcript, flushed, close=not request.continue_)


# ----- server events ----------------------------------------------------------------------


def chunk_event(context_id: str | None, audio: bytes, step_time_ms: float, flush_id: int | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "chunk",
        "data": base64.b64encode(audio).decode(),
        "done": False,
        "status_code": STATUS_PARTIAL,
        "step_time": round(step_time_ms, 3),
    }
    if context_id is not None:
        event["context_id"] = context_id
    if flush_id is not None:
        event["flush_id"] = flush_id
    return event


def timestamps_event(
    context_id: str | None, words: Sequence[WordTiming], offset_s: float, flush_id: int | None
) -> dict[str, Any]:
    """Word timings shifted by ``offset_s`` (the context's audio before this utterance)."""
    event: dict[str, Any] = {
        "type": "timestamps",
        "done": False,
        "status_code": STATUS_PARTIAL,
        "word_timestamps": {
            "words": [word.text for word in words],
            "start": [round(offset_s + word.start_s, 4) for word in words],
            "end": [round(offset_s + word.end_s, 4) for word in words],
        },
    }
    if context_id is not None:
        event["context_id"] = context_id
    if flush_id is not None:
        event["flush_id"] = flush_id
    return event


def flush_done_event(context_id: str, flush_id: int) -> dict[str, Any]:
    return {"type": "flush_done", "context_id": context_id, "flush_id": flush_id, "flush_done": True,
            "done": False, "status_code": STATUS_PARTIAL}  # fmt: skip


def done_event(context_id: str | None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "done", "done": True, "status_code": STATUS_PARTIAL}
    if context_id is not None:
        event["context_id"] = context_id
    return event


def error_fields(exc: SpeakwireError) -> dict[str, Any]:
    """Cartesia's ``error_code``/``title``/``message`` for one of our errors."""
    title, code = _TITLES.get(exc.status_code, ("Internal server error", "internal_error"))
    if exc.status_code == 404 and exc.param in ("voice", "model"):
        title, code = f"{exc.param.capitalize()} not found", f"{exc.param}_not_found"
    return {"error_code": code, "title": title, "message": exc.message}


_TITLES = {
    400: ("Invalid request", "invalid_request"),
    401: ("Invalid API key", "unauthorized"),
    404: ("Not found", "not_found"),
    413: ("Request too large", "payload_too_large"),
    429: ("Too many concurrent requests", "concurrency_limited"),
    503: ("Service unavailable", "service_unavailable"),
}


def error_event(exc: SpeakwireError, *, request_id: str, context_id: str | None = None) -> dict[str, Any]:
    """The WebSocket (and SSE) ``error`` event."""
    event: dict[str, Any] = {"type": "error", "done": True, "status_code": exc.status_code, **error_fields(exc),
                             "request_id": request_id}  # fmt: skip
    if context_id is not None:
        event["context_id"] = context_id
    return event


def http_error_body(exc: SpeakwireError, *, request_id: str) -> dict[str, Any]:
    return {**error_fields(exc), "request_id": request_id}


def sse_frame(event: Mapping[str, Any]) -> bytes:
    """One SSE event named after its type, with the JSON on one ``data:`` line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()
