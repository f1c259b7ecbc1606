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

Our additions: an integer ``seed`` (the SDK passes extra keyword arguments through) asks for
repeatable synthesis, as on the OpenAI route; ``chunk`` and ``timestamps`` events carry the ``request_id``
of the utterance they belong to, as ``error`` events do (the SDK's models keep unknown fields). Cartesia's
``sonic-*`` model ids mean the served model.

``CartesiaConnection`` is the connection's state without I/O: which contexts are open, what each request
asks of one, and what must be refused; the session (``session.py``) speaks what it says.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from speakwire.errors import BadRequestError, PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.languages import language_name as to_language_name
from speakwire.server.json_message import json_bool, json_int, parse_json
from speakwire.server.limits import MAX_SESSION_CHARS, MAX_TEXT_MESSAGE_BYTES
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
MAX_CONTEXTS = 256
"""Open contexts per connection; each speaking one also holds an admission slot."""
REMEMBERED_ENDED = 1024
"""Ended context ids remembered, so a late empty closing request for one is ignored, not an error."""
SPEED_WORDS = {"slowest": 0.6, "slow": 0.8, "normal": 1.0, "fast": 1.25, "fastest": 1.5}
"""``speed`` as a word (``ModelSpeed``; the two extremes are from the older ``__experimental_controls``)."""
MIN_VOLUME, MAX_VOLUME = 0.5, 2.0
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
        message = parse_json(text)
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
        continue_ = json_bool(message, "continue", False)
        flush = json_bool(message, "flush", False)
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
    elif (delay := json_int(delay)) is None or not 0 <= delay <= MAX_BUFFER_DELAY_MS:
        raise BadRequestError(
            f"max_buffer_delay_ms must be an integer from 0 to {MAX_BUFFER_DELAY_MS}.", param="max_buffer_delay_ms"
        )
    options = SpeechOptions(
        model=model_name(message.get("model_id")),
        voice=voice_id(message.get("voice")),
        response_format=output.resolve_format,
        speed=speed,
        sample_rate=output.sample_rate,
        language=language_name(_language_field(message)),
        seed=_seed(message.get("seed")),
    )
    return ContextSpec(
        options=options,
        output=output,
        add_timestamps=json_bool(message, "add_timestamps", False),
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


def _language_field(message: Mapping[str, Any]) -> Any:
    """``language``, or ``locale`` when it is absent or empty (a non-string ``language`` stays, to be refused)."""
    language = message.get("language")
    return message.get("locale") if language is None or language == "" else language


def language_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError("language must be a string such as 'en'.", param="language")
    code = value.strip()
    return to_language_name(code) if code else None  # ISO 639-1 codes as our engines name them


def _speed(value: Any, param: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in SPEED_WORDS:
        return SPEED_WORDS[value.lower()]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequestError(f"{param} must be one of {', '.join(SPEED_WORDS)} or a number.", param=param)
    return float(value)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    seed = json_int(value)
    if seed is None:
        raise BadRequestError("seed must be an integer.", param="seed")
    return seed


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


# ----- the connection -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenContext:
    """A request for a new context: the session resolves its voice and output, then applies ``step``."""

    context_id: str
    spec: ContextSpec
    step: ContextStep
    hold_s: float | None
    """How long text the segmenter holds may wait for more (``buffer_delay_s``); None: nothing to wait for."""


@dataclass(frozen=True, slots=True)
class Feed:
    """A request for an open context: text to feed, then maybe a flush, then maybe the end of its input."""

    context_id: str
    step: ContextStep
    hold_s: float | None


@dataclass(frozen=True, slots=True)
class Refuse:
    """An ``error`` event to send; ``ends_context``: the context it names was open and is over now."""

    error: SpeakwireError
    context_id: str | None
    ends_context: bool = False


Action = OpenContext | Feed | Cancel | Refuse | None
"""What one client message asks of the session (None: nothing, e.g. a late ``no_more_inputs()``)."""


@dataclass(eq=False, slots=True)
class _ContextState:
    spec: ContextSpec
    input: ContextInput = field(default_factory=ContextInput)
    chars: int = 0
    tail: str = ""
    """The end of the text fed so far (does it end a sentence?)."""


class CartesiaConnection:
    """One ``/tts/websocket`` connection's contexts, without I/O: messages in, ``Action``s out.

    A context opens with the first request naming it (its settings are that request's), takes text until a
    request with ``continue: false``, and is over once the session says so (``end``: its ``done`` was sent, or
    it failed) or it is cancelled or refused. An error about an open context ends it (the SDK stops reading a
    context at its ``error``); an ended context's id may open a new context with new text.
    """

    def __init__(self) -> None:
        self._open: dict[str, _ContextState] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()

    @property
    def open_contexts(self) -> list[str]:
        """Ids of the open contexts, oldest first."""
        return list(self._open)

    def receive(self, message: str | bytes) -> Action:
        """What one client message asks; a message that cannot be acted on is a ``Refuse``."""
        if isinstance(message, bytes):
            return Refuse(BadRequestError("Binary frames are not accepted; send JSON text messages."), None)
        if len(message) * 4 > MAX_TEXT_MESSAGE_BYTES and len(message.encode(errors="replace")) > MAX_TEXT_MESSAGE_BYTES:
            return Refuse(PayloadTooLargeError(f"A message may hold at most {MAX_TEXT_MESSAGE_BYTES} bytes."), None)
        try:
            command = parse_message(message)
        except MessageError as exc:
            return self._refuse(exc, exc.context_id)
        if isinstance(command, Cancel):
            if command.context_id not in self._open:
                return None
            self.end(command.context_id)
            return command
        context_id = command.context_id or str(uuid.uuid4())
        ctx = self._open.get(context_id)
        opening = ctx is None
        if ctx is None:
            if context_id in self._ended and not command.transcript:
                return None  # e.g. no_more_inputs() after the context failed or was cancelled
            if len(self._open) >= MAX_CONTEXTS:
                return self._refuse(TooBusyError(f"At most {MAX_CONTEXTS} contexts may be open on one connection."),
                                    context_id)  # fmt: skip
            try:
                ctx = _ContextState(parse_spec(command.fields))
            except BadRequestError as exc:
                return self._refuse(exc, context_id)
            self._open[context_id] = ctx
        try:
            step = ctx.input.receive(command)
        except MessageError as exc:
            return self._refuse(exc, context_id)
        ctx.chars += len(step.text)
        if ctx.chars > MAX_SESSION_CHARS:
            error = PayloadTooLargeError(
                f"A context may hold at most {MAX_SESSION_CHARS} characters; start a new context.", param="transcript"
            )
            return self._refuse(error, context_id)
        ctx.tail = (ctx.tail + step.text)[-16:]
        hold_s = buffer_delay_s(ctx.spec, ctx.tail) if step.text and not step.close else None
        if opening:
            return OpenContext(context_id, ctx.spec, step, hold_s)
        return Feed(context_id, step, hold_s)

    def end(self, context_id: str) -> None:
        """The context is over (spoken to its ``done``, failed, cancelled); idempotent."""
        self._open.pop(context_id, None)
        self._ended[context_id] = None
        self._ended.move_to_end(context_id)
        while len(self._ended) > REMEMBERED_ENDED:
            self._ended.popitem(last=False)

    def _refuse(self, error: SpeakwireError, context_id: str | None) -> Refuse:
        ends = context_id is not None and context_id in self._open
        if context_id is not None:
            self.end(context_id)
        return Refuse(error, context_id, ends)


# ----- server events ----------------------------------------------------------------------


def chunk_event(
    context_id: str | None, audio: bytes, step_time_ms: float, flush_id: int | None, request_id: str | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "chunk",
        "data": base64.b64encode(audio).decode(),
        "done": False,
        "status_code": STATUS_PARTIAL,
        "step_time": round(step_time_ms, 3),
    }
    return _about(event, context_id, flush_id, request_id)


def timestamps_event(
    context_id: str | None,
    words: Sequence[WordTiming],
    offset_s: float,
    flush_id: int | None,
    request_id: str | None = None,
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
    return _about(event, context_id, flush_id, request_id)


def _about(
    event: dict[str, Any], context_id: str | None, flush_id: int | None, request_id: str | None
) -> dict[str, Any]:
    """The ids an audio event carries: its context, flush group and utterance (where there is one)."""
    if context_id is not None:
        event["context_id"] = context_id
    if flush_id is not None:
        event["flush_id"] = flush_id
    if request_id is not None:
        event["request_id"] = request_id
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
