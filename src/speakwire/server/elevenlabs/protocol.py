"""Wire format of the ElevenLabs text-to-speech API, with no I/O: formats, query, messages, errors.

Sources: the ``elevenlabs`` Python SDK 2.78 (``realtime_tts.py``, ``types/*``, ``text_to_speech/raw_client.py``)
and pipecat's ``ElevenLabsTTSService`` (../shared/reference/dialects.md §3).

**Output formats** are ElevenLabs' names (``mp3_44100_128``, ``pcm_24000``, ``ulaw_8000``, ...) mapped onto our
encoders at exactly that rate; an MP3 or Opus bitrate is honoured too (the FFmpeg codec takes it).

**What the generation knobs mean here.** ElevenLabs buffers text and starts a generation once the buffer
holds ``chunk_length_schedule[i]`` characters (default ``[120, 160, 250, 290]``); ``try_trigger_generation``
asks it to try earlier, ``auto_mode`` turns the schedule off, and ``flush`` generates whatever is buffered.
Our pipeline has no such buffer to tune: every text message goes into one utterance (``Utterance.feed``) and
the segmenter starts synthesis the moment a clause or sentence is complete, which is already earlier than
the shortest schedule ElevenLabs allows (50 characters). So ``chunk_length_schedule`` is validated (a list
of numbers) and otherwise has no effect, and ``try_trigger_generation``, ``auto_mode`` and
``sync_alignment`` (we always put the alignment on the audio it describes) are accepted as no-ops.
``flush`` does what matters: the text buffered so far is spoken now even without a sentence end (the
session finishes the utterance and opens a new one for later text, so audio stays in order).

``voice_settings.speed`` is honoured; ``stability``, ``similarity_boost``, ``style`` and
``use_speaker_boost`` describe ElevenLabs' models and have no counterpart in ours. ``seed`` (HTTP body, and the
WebSocket query as pipecat sends it to ElevenLabs' dialogue socket) is honoured: same seed, same audio.
``model_id`` values starting with ``eleven_`` mean the served model; ``language_code`` is passed on as our
language name (``en`` → English).

**Multi-stream-input** (``context_id`` on every message): the first message naming a context opens it; an
empty ``text`` is a keep-alive (of that context, or of the connection when it names none, as pipecat sends
every 10 s); ``close_context`` ends a context the way ElevenLabs documents it: text not yet flushed is
dropped and its audio stops at once (barge-in), while text already flushed is still spoken ("If it has
already been set to flush it will continue flushing") — which is what pipecat relies on when it sends
``flush`` and ``close_context`` back to back at the end of a turn. Then ``{"isFinal": true, "contextId"}``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from speakwire.encoders.av_stream import MP3, OPUS, AvStreamEncoder
from speakwire.encoders.base import Encoder
from speakwire.encoders.registry import CONTENT_TYPES, create_encoder
from speakwire.errors import (
    BadRequestError,
    NotFoundError,
    NotReadyError,
    PayloadTooLargeError,
    ShuttingDownError,
    SpeakwireError,
    TooBusyError,
)
from speakwire.languages import language_name
from speakwire.output import Framing, OutputSpec
from speakwire.server.json_message import not_bool, parse_json
from speakwire.server.limits import CLOSE_POLICY
from speakwire.server.options import MAX_SPEED, MIN_SPEED, SpeechOptions

# ----- output formats -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """One ElevenLabs ``output_format`` and how we make it."""

    name: str
    codec: str
    """Our format name: mp3, pcm (s16le), ulaw, alaw or opus (Ogg)."""
    sample_rate: int
    bit_rate: int | None = None
    """Bits per second, for the lossy codecs."""

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.codec]

    def encoder(self, *, streaming: bool) -> Encoder:
        """A new encoder for one stream of this format (bitrate included)."""
        if self.codec in ("mp3", "opus") and self.bit_rate is not None:
            spec = dataclasses.replace(MP3 if self.codec == "mp3" else OPUS, bit_rate=self.bit_rate)
            return AvStreamEncoder(spec, self.sample_rate, streaming=streaming)
        return create_encoder(self.codec, self.sample_rate, streaming=streaming)

    def output(self, framing: Framing = "stream") -> OutputSpec:
        """What ``AudioOut`` makes of this format: our codec at its rate, with its bitrate."""
        return OutputSpec(self.codec, self.sample_rate, framing, make_encoder=lambda s: self.encoder(streaming=s))


def _format(codec: str, rate: int, kbps: int | None = None) -> OutputFormat:
    name = f"{codec}_{rate}" if kbps is None else f"{codec}_{rate}_{kbps}"
    return OutputFormat(name, codec, rate, None if kbps is None else kbps * 1000)


OUTPUT_FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        _format("mp3", 22050, 32),
        _format("mp3", 24000, 48),
        *(_format("mp3", 44100, kbps) for kbps in (32, 64, 96, 128, 192)),
        *(_format("pcm", rate) for rate in (8000, 16000, 22050, 24000, 32000, 44100, 48000)),
        _format("ulaw", 8000),
        _format("alaw", 8000),
        *(_format("opus", 48000, kbps) for kbps in (32, 64, 96, 128, 192)),
    )
}
"""Every format of the SDK's ``TextToSpeechStreamRequestOutputFormat`` (the WebSocket list is a subset)."""
DEFAULT_OUTPUT_FORMAT = "mp3_44100_128"


class InvalidOutputFormat(BadRequestError):
    """An ``output_format`` ElevenLabs does not define."""


def parse_output_format(value: str | None) -> OutputFormat:
    """The format ``value`` names (ElevenLabs' default when None); raises ``InvalidOutputFormat``."""
    fmt = OUTPUT_FORMATS.get(value or DEFAULT_OUTPUT_FORMAT)
    if fmt is None:
        raise InvalidOutputFormat(
            f"Invalid output_format {value!r}; expected one of: {', '.join(OUTPUT_FORMATS)}.", param="output_format"
        )
    return fmt


# ----- request fields ---------------------------------------------------------------------------

MAX_INACTIVITY_TIMEOUT_S = 180
DEFAULT_INACTIVITY_TIMEOUT_S = 20


@dataclass(frozen=True, slots=True)
class VoiceSettings:
    """``voice_settings``: only ``speed`` has an effect here (see the module docstring)."""

    speed: float | None = None


def parse_voice_settings(value: Any) -> VoiceSettings | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequestError("voice_settings must be an object.", param="voice_settings")
    speed = value.get("speed")
    if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int | float)):
        raise BadRequestError("voice_settings.speed must be a number.", param="voice_settings.speed")
    if speed is not None and not MIN_SPEED <= speed <= MAX_SPEED:
        raise BadRequestError(
            f"voice_settings.speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}.",
            param="voice_settings.speed",
        )
    return VoiceSettings(speed=None if speed is None else float(speed))


def speech_options(
    voice_id: str,
    fmt: OutputFormat,
    *,
    model_id: str | None = None,
    language_code: str | None = None,
    voice_settings: VoiceSettings | None = None,
    seed: int | None = None,
) -> SpeechOptions:
    """The pipeline's request for an ElevenLabs one.

    ``voice_id`` is any voice ``resolve_speech`` knows: one of the engine's, a saved voice, or an OpenAI name
    (the default voice). ElevenLabs model ids (``eleven_flash_v2_5``, ``eleven_turbo_v2_5``, ...) mean "the
    served model", so clients that always send one keep working; any other id must name a served model.
    """
    model = None if model_id is None or model_id.lower().startswith("eleven_") else model_id
    language = None if language_code is None else language_name(language_code)
    return SpeechOptions(
        model=model,
        voice=voice_id,
        response_format=fmt.codec,
        sample_rate=fmt.sample_rate,
        speed=voice_settings.speed if voice_settings else None,
        language=language,
        seed=seed,
    )


@dataclass(frozen=True, slots=True)
class StreamQuery:
    """The query string of the two WebSocket routes."""

    output_format: OutputFormat
    model_id: str | None = None
    language_code: str | None = None
    inactivity_timeout_s: float = DEFAULT_INACTIVITY_TIMEOUT_S
    auto_mode: bool = False
    sync_alignment: bool = False
    seed: int | None = None
    """As pipecat sends it to ElevenLabs' dialogue WebSocket; here the same seed and text give the same audio."""


def parse_stream_query(query: Mapping[str, str]) -> StreamQuery:
    """Validate the query; raise ``BadRequestError`` (``InvalidOutputFormat``) saying what is wrong."""
    fmt = parse_output_format(query.get("output_format"))
    timeout_text = query.get("inactivity_timeout")
    timeout = DEFAULT_INACTIVITY_TIMEOUT_S
    if timeout_text is not None:
        try:
            timeout = int(timeout_text)
        except ValueError:
            raise BadRequestError(
                f"inactivity_timeout must be an integer number of seconds, got {timeout_text!r}.",
                param="inactivity_timeout",
            ) from None
        if not 1 <= timeout <= MAX_INACTIVITY_TIMEOUT_S:
            raise BadRequestError(
                f"inactivity_timeout must be between 1 and {MAX_INACTIVITY_TIMEOUT_S} seconds, got {timeout}.",
                param="inactivity_timeout",
            )
    seed_text = query.get("seed")
    try:
        seed = None if not seed_text else int(seed_text)
    except ValueError:
        raise BadRequestError(f"seed must be an integer, got {seed_text!r}.", param="seed") from None
    return StreamQuery(
        output_format=fmt,
        model_id=query.get("model_id") or None,
        language_code=query.get("language_code") or None,
        inactivity_timeout_s=timeout,
        auto_mode=_query_bool(query, "auto_mode"),
        sync_alignment=_query_bool(query, "sync_alignment"),
        seed=seed,
    )


def _query_bool(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return False
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise BadRequestError(f"{name} must be true or false, got {value!r}.", param=name)


# ----- client messages --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitContext:
    """The first message of a connection (stream-input) or of a context (multi-stream-input)."""

    context_id: str | None
    text: str
    voice_settings: VoiceSettings | None = None
    api_key: str | None = None
    """``xi-api-key`` or ``authorization`` (a bearer token, "Bearer " optional)."""
    flush: bool = False


@dataclass(frozen=True, slots=True)
class SendText:
    context_id: str | None
    text: str
    flush: bool = False


@dataclass(frozen=True, slots=True)
class Flush:
    context_id: str | None


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """stream-input's ``{"text": ""}``: speak the rest, send ``isFinal``, close the socket."""


@dataclass(frozen=True, slots=True)
class KeepAlive:
    context_id: str | None
    """The context whose inactivity clock restarts; None: the connection's."""


@dataclass(frozen=True, slots=True)
class CloseContext:
    context_id: str | None


@dataclass(frozen=True, slots=True)
class CloseSocket:
    pass


Command = InitContext | SendText | Flush | EndOfInput | KeepAlive | CloseContext | CloseSocket


class InputError(BadRequestError):
    """A client message the protocol refuses; ElevenLabs answers these with an error and close 1008."""

    def __init__(self, message: str, *, error: str = "invalid_input_message") -> None:
        super().__init__(message)
        self.error = error


_UNPARSABLE = "Could not parse input message, make sure it is a json and follows the schema outlined in protocol."


class StreamInputProtocol:
    """The client side of one connection: messages in, ``Command``s out, illegal ones refused.

    stream-input has one implicit context (``context_id`` None): its first message is the ``InitContext``,
    ``voice_settings`` may not change afterwards, ``{"text": ""}`` ends the input. On multi-stream-input
    the first message naming a context opens it, and a closed context's id may be used again for a new one.
    """

    def __init__(self, *, multi: bool) -> None:
        self.multi = multi
        self._initialized = False
        self._ended = False
        self._voice_settings: VoiceSettings | None = None
        self._open: set[str | None] = set()

    def receive(self, raw: str | bytes) -> Command:
        """Parse one message; raises ``InputError`` (or ``BadRequestError`` for bad field values)."""
        if isinstance(raw, bytes):
            raise InputError(_UNPARSABLE)
        try:
            message = parse_json(raw)
        except json.JSONDecodeError:
            raise InputError(_UNPARSABLE) from None
        if not isinstance(message, dict):
            raise InputError(_UNPARSABLE)
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            raise InputError("'text' must be a string.")
        flush = message.get("flush")
        if flush is not None and not isinstance(flush, bool):
            raise InputError("'flush' must be true or false.")
        _check_generation_config(message.get("generation_config"))
        return self._multi(message, text, bool(flush)) if self.multi else self._single(message, text, bool(flush))

    def _single(self, message: dict[str, Any], text: str | None, flush: bool) -> Command:
        if not self._initialized:
            self._initialized = True
            self._voice_settings = parse_voice_settings(message.get("voice_settings"))
            return InitContext(None, text or "", self._voice_settings, _api_key(message), flush)
        if self._ended:
            return KeepAlive(None)  # late messages after the end of input change nothing
        settings = message.get("voice_settings")
        if settings is not None and parse_voice_settings(settings) != self._voice_settings:
            raise InputError(
                "voice_settings field must be provided in the first message and then either be not provided or "
                "not change."
            )
        if text is None:
            if flush:
                return Flush(None)
            raise InputError(_UNPARSABLE)
        if text == "" and not flush:
            self._ended = True
            return EndOfInput()
        return SendText(None, text, flush)

    def _multi(self, message: dict[str, Any], text: str | None, flush: bool) -> Command:
        if message.get("close_socket") is True:
            return CloseSocket()
        context_id = message.get("context_id")
        if context_id is not None and not isinstance(context_id, str):
            raise InputError("'context_id' must be a string.")
        if message.get("close_context") is True:
            self._open.discard(context_id)
            return CloseContext(context_id)
        if text is None:
            if flush:
                return Flush(context_id)
            raise InputError(_UNPARSABLE)
        if context_id not in self._open:
            if text == "" and not flush:
                return KeepAlive(context_id)  # pipecat's connection keep-alive names no context
            self._open.add(context_id)
            settings = parse_voice_settings(message.get("voice_settings"))
            return InitContext(context_id, text, settings, _api_key(message), flush)
        if text == "":
            return Flush(context_id) if flush else KeepAlive(context_id)
        return SendText(context_id, text, flush)


def _api_key(message: dict[str, Any]) -> str | None:
    for name in ("xi-api-key", "xi_api_key", "authorization"):
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            value = value.strip()
            return value[7:].strip() if value[:7].lower() == "bearer " else value
    return None


def _check_generation_config(value: Any) -> None:
    """``chunk_length_schedule`` must be a list of numbers; it has no other effect (module docstring)."""
    if value is None:
        return
    schedule = value.get("chunk_length_schedule") if isinstance(value, dict) else None
    if not isinstance(value, dict) or (
        schedule is not None
        and (not isinstance(schedule, list) or not all(isinstance(v, int | float) for v in schedule))
    ):
        raise InputError("generation_config.chunk_length_schedule must be a list of numbers.")


# ----- server messages --------------------------------------------------------------------------


def audio_message(audio_b64: str, alignment: dict[str, Any] | None, context_id: str | None, *, multi: bool
                  ) -> dict[str, Any]:  # fmt: skip
    """An audio chunk; ``normalizedAlignment`` repeats ``alignment``: our alignment is on the client's text."""
    message: dict[str, Any] = {"audio": audio_b64, "normalizedAlignment": alignment, "alignment": alignment}
    if multi:
        message["contextId"] = context_id
    return message


def final_message(context_id: str | None, *, multi: bool) -> dict[str, Any]:
    return {"isFinal": True, "contextId": context_id} if multi else {"isFinal": True}


def error_message(message: str, error: str, code: int = CLOSE_POLICY) -> dict[str, Any]:
    """ElevenLabs' error message; the SDK raises ``ApiError`` when a message holding ``message`` is the last.

    ``code`` is the close that follows: ElevenLabs closes with 1008 after an error (bad key, bad input,
    inactivity), 1013 when busy, 1001 at the end of a drain (``server.limits``)."""
    return {"message": message, "error": error, "code": code}


def inactivity_message(timeout_s: float) -> str:
    return (
        f"Have not received a new text input within the timeout of {timeout_s:g} seconds. Streaming input "
        "terminated. Please make sure to either feed the input in the timely manner, or to send the end of input "
        'text (empty string "") when done.'
    )


INVALID_API_KEY = "Invalid API key"


def error_status(exc: SpeakwireError) -> tuple[int, str]:
    """The HTTP status and ElevenLabs ``status`` string for one of our errors."""
    if isinstance(exc, InvalidOutputFormat):
        return 422, "invalid_output_format"
    if isinstance(exc, NotFoundError):
        return 404, f"{exc.param}_not_found" if exc.param in ("voice", "model") else "not_found"
    if isinstance(exc, PayloadTooLargeError):
        return 400, "max_character_limit_exceeded"
    if isinstance(exc, ShuttingDownError):
        return 503, "system_busy"
    if isinstance(exc, TooBusyError):
        return 429, "too_many_concurrent_requests"
    if isinstance(exc, NotReadyError):
        return 503, "system_busy"
    if isinstance(exc, BadRequestError):
        return 400, "invalid_request"
    return exc.status_code, "internal_error"


def describe(exc: SpeakwireError, voice_id: str) -> str:
    """The message for an error, worded as ElevenLabs words the common ones."""
    if isinstance(exc, NotFoundError) and exc.param == "voice":
        return f"A voice with voice_id '{voice_id}' does not exist. {exc.message}"
    if isinstance(exc, NotFoundError) and exc.param == "model":
        return f"A model with requested ID does not exist. {exc.message}"
    return exc.message


# ----- HTTP -----------------------------------------------------------------------------------


class TextToSpeechBody(BaseModel):
    """The JSON body of ``POST /v1/text-to-speech/{voice_id}[...]``; fields we do not use are ignored."""

    model_config = ConfigDict(extra="ignore")

    text: str
    model_id: str | None = None
    language_code: str | None = None
    voice_settings: dict[str, Any] | None = None
    seed: int | None = None
    """Honoured: the same seed and text give the same audio (Piper then synthesizes without noise)."""

    _seed_not_bool = field_validator("seed", mode="before")(not_bool)


def http_error_body(status: str, message: str) -> dict[str, Any]:
    """ElevenLabs' error body: ``{"detail": {"status", "message"}}``."""
    return {"detail": {"status": status, "message": message}}


def validation_error_body(loc: list[str | int], message: str, kind: str, value: Any = None) -> dict[str, Any]:
    """FastAPI's 422 body, as ElevenLabs (a FastAPI service) sends it; the SDK raises UnprocessableEntityError."""
    return {"detail": [{"type": kind, "loc": loc, "msg": message, "input": value}]}


def safe_reason(text: str, limit: int = 123) -> str:
    """A WebSocket close reason: at most 123 UTF-8 bytes (RFC 6455 §5.5)."""
    data = text.encode()[:limit]
    return data.decode(errors="ignore")
