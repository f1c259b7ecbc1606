"""Wire format of the speech stream: limits, close codes, session.config parsing, server events.

Compatible with both vLLM-Omni generations (see ../shared/reference/protocols.md §2)
plus our additions: ``input.cancel`` (alias ``response.cancel``) → ``input.cancelled``
(saying how much of the text the audio sent had covered), usage on ``session.done``, and
auth inside ``session.config``.

``word_timestamps: true`` is vLLM-Omni's: audio then travels as JSON ``audio.chunk`` events
(base64 PCM, ``timestamps: null``), and after each sentence's audio one more ``audio.chunk``
with empty audio carries the sentence's words, ``[{word, start_ms, end_ms}]`` in milliseconds
from the sentence's first sample (vLLM-Omni's fields), plus ``char_start``/``char_end`` into
the sentence's ``sentence_text`` (ours). ``timestamps`` is null for a sentence that could not
be timed. An engine's own words (Piper) come before the sentence's ``audio.done``; an aligner's
(Qwen3, ``--aligner``) after it, possibly after later sentences' audio, since no audio waits for
an aligner: the chunk's ``sentence_index`` names its sentence (docs/timings.md).

``timestamp_type: "word"`` (with ``timestamp_transport_strategy: "sync"``, the default) is Baseten's: each
sentence's ``audio.done`` carries ``timestamp_info.word_alignment`` — ``words``, ``word_start_times_seconds``,
``word_end_times_seconds``, seconds from the sentence's first sample — after all of that sentence's audio, so it
works with every framing (``stream_audio`` true or false, any ``response_format``) and beside ``word_timestamps``.
``timestamp_info`` is null for a sentence that could not be timed. Only ``sync`` is offered: an ``async``
strategy (timings interleaved anywhere) is refused, as is any other value of either field. With an aligner's
words, ``sync`` is the one shape where audio waits for them: the sentence's ``audio.done`` and what follows it
are held until its words come (at most the aligner's bound), because clients place them on the sentence that
began last (``output.word_order``).

``voice.add`` and ``voice.list`` are Baseten's voice-library control messages (LiveKit's Baseten plugin,
``qwen3_tts.register_voice`` / ``list_voices``, sends each as the first message of a socket of its own, before any
``session.config``, and reads one reply). ``voice.add`` carries ``name``, ``consent``, ``audio_data`` (base64, or a
``data:`` URI), ``audio_format`` (the clip's file extension) and optionally ``ref_text`` (plus our library's
``speaker_description`` and ``language``); it is answered ``voice.added`` with ``success: true`` and the saved
``voice``, described as ``POST /v1/audio/voices`` describes it. ``voice.list`` is answered ``voice.listed`` with the
catalogue ``GET /v1/audio/voices`` gives (built-in ``voices``, saved ``uploaded_voices``). Both are answered from the
server's voice library by the same code as those routes (``server.voices.serving``), so the same validation and
consent rules hold; a refusal is an ``error`` event (with ``success: false`` and the ``param`` at fault) and the
session goes on. Baseten's own reply types are not published; the plugin reads only ``type == "error"``,
``success`` and ``voice``, which these replies carry.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from speakwire.errors import BadRequestError, SpeakwireError
from speakwire.server.auth import key_matches
from speakwire.server.json_message import json_bool, parse_json
from speakwire.server.limits import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_LATER,
    MAX_CONFIG_BYTES,
    MAX_FRAME_BYTES,
    MAX_SESSION_CHARS,
    MAX_TEXT_MESSAGE_BYTES,
)
from speakwire.server.options import SpeechOptions, voice_name
from speakwire.text.alignment import WordTiming
from speakwire.text.segmenter import Granularity
from speakwire.voices.audio import MAX_AUDIO_BYTES
from speakwire.voices.fields import VoiceFields, voice_fields

# Limits and close codes are every dialect's (``server.limits``); named here as this protocol uses them.
__all__ = [
    "CLOSE_GOING_AWAY", "CLOSE_INTERNAL", "CLOSE_NORMAL", "CLOSE_POLICY", "CLOSE_TOO_BIG", "CLOSE_TRY_LATER",
    "MAX_CONFIG_BYTES", "MAX_FRAME_BYTES", "MAX_SESSION_CHARS", "MAX_TEXT_MESSAGE_BYTES",
]  # fmt: skip

ClientEventType = Literal["session.config", "input.text", "input.done", "input.cancel", "response.cancel",
                          "session.close", "voice.add", "voice.list"]  # fmt: skip
CLIENT_EVENT_TYPES: tuple[str, ...] = ClientEventType.__args__  # type: ignore[attr-defined]

_CONFIG_FIELDS = {
    "type", "model", "voice", "speaker", "task_type", "language", "instructions", "response_format", "speed",
    "max_new_tokens", "initial_codec_chunk_frames", "ref_audio", "ref_text", "x_vector_only_mode",
    "speaker_embedding", "stream_audio", "split_granularity", "seed", "word_timestamps", "sample_rate",
    "api_key", "close_after_done", "timestamp_type", "timestamp_transport_strategy",
}  # fmt: skip

VOICE_ADD_FIELDS = ("type", "name", "consent", "audio_data", "audio_format", "ref_text", "speaker_description",
                    "language", "api_key")  # fmt: skip
MAX_VOICE_ADD_BYTES = MAX_AUDIO_BYTES * 4 // 3 + 64 * 1024
"""A ``voice.add`` message: the library's largest clip in base64, and room for its other fields."""
_AUDIO_FORMATS = {"mp3": "audio/mpeg", "m4a": "audio/mp4", "aac": "audio/mp4", "mp4": "audio/mp4", "oga": "audio/ogg",
                  "opus": "audio/ogg"}  # fmt: skip
"""``audio_format`` (a file extension) → media type where it is not ``audio/<extension>``."""

TIMESTAMP_TYPES = ("none", "word")
"""Baseten's ``timestamp_type`` values we accept (null is ``none``)."""
TIMESTAMP_TRANSPORT_STRATEGIES = ("sync",)
"""Baseten's ``timestamp_transport_strategy`` values we accept (null is ``sync``): timings in ``audio.done``."""


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """A validated session.config."""

    options: SpeechOptions
    stream_audio: bool
    granularity: Granularity
    close_after_done: bool
    ignored_fields: tuple[str, ...]
    api_key: str | None
    word_timestamps: bool = False
    word_alignment: bool = False
    """Baseten's ``timestamp_type: "word"``: each sentence's ``audio.done`` carries its ``timestamp_info``."""


def parse_config(message: dict[str, Any]) -> StreamConfig:
    """Check field types and combinations; raise BadRequestError saying what is wrong."""
    fmt = message.get("response_format") or "wav"
    if not isinstance(fmt, str):
        raise BadRequestError("response_format must be a string.", param="response_format")
    stream_audio = json_bool(message, "stream_audio", False)
    if stream_audio and fmt.lower() != "pcm":
        raise BadRequestError(
            "stream_audio=true sends raw PCM frames as they are produced and needs response_format 'pcm'; "
            "use stream_audio=false for one encoded file per sentence.",
            param="stream_audio",
        )
    granularity: Granularity = message.get("split_granularity") or "sentence"
    if granularity not in ("none", "sentence", "clause"):
        raise BadRequestError(
            f"split_granularity must be none, sentence or clause, got {granularity!r}.", param="split_granularity"
        )
    ignored = sorted(set(message) - _CONFIG_FIELDS)
    word_timestamps = json_bool(message, "word_timestamps", False)
    if word_timestamps and not stream_audio:
        raise BadRequestError(
            "word_timestamps=true requires stream_audio=true and response_format 'pcm' (timestamps ride the "
            "per-sentence PCM audio.chunk stream).",
            param="word_timestamps",
        )
    word_alignment = _timestamp_type(message)
    speed = message.get("speed")
    if speed is not None and not isinstance(speed, int | float):
        raise BadRequestError("speed must be a number.", param="speed")
    options = SpeechOptions(
        model=_str(message, "model"),
        voice=voice_name(message.get("voice")) or voice_name(message.get("speaker")),
        response_format=fmt.lower(),
        speed=None if speed is None else float(speed),
        sample_rate=_int(message, "sample_rate"),
        language=_str(message, "language"),
        instructions=_str(message, "instructions"),
        task_type=_str(message, "task_type"),
        ref_audio=_str(message, "ref_audio"),
        ref_text=_str(message, "ref_text"),
        x_vector_only_mode=json_bool(message, "x_vector_only_mode", False),
        speaker_embedding=message.get("speaker_embedding"),
        seed=_int(message, "seed"),
        max_new_tokens=_int(message, "max_new_tokens"),
        initial_codec_chunk_frames=_int(message, "initial_codec_chunk_frames"),
    )
    return StreamConfig(
        options=options,
        stream_audio=stream_audio,
        granularity=granularity,
        close_after_done=json_bool(message, "close_after_done", False),
        ignored_fields=tuple(ignored),
        api_key=_str(message, "api_key"),
        word_timestamps=word_timestamps,
        word_alignment=word_alignment,
    )


def _timestamp_type(message: dict[str, Any]) -> bool:
    """Baseten's ``timestamp_type`` / ``timestamp_transport_strategy``: whether ``audio.done`` carries timings."""
    kind = message.get("timestamp_type")
    if kind is not None and (not isinstance(kind, str) or kind not in TIMESTAMP_TYPES):
        raise BadRequestError(
            f"timestamp_type must be one of {', '.join(map(repr, TIMESTAMP_TYPES))} (or null), got {kind!r}.",
            param="timestamp_type",
        )
    strategy = message.get("timestamp_transport_strategy")
    if strategy is not None and (not isinstance(strategy, str) or strategy not in TIMESTAMP_TRANSPORT_STRATEGIES):
        allowed = ", ".join(map(repr, TIMESTAMP_TRANSPORT_STRATEGIES))
        raise BadRequestError(
            f"timestamp_transport_strategy must be one of {allowed} (or null), got {strategy!r}: 'sync' puts each "
            "sentence's timestamp_info in its audio.done; 'async' is not offered.",
            param="timestamp_transport_strategy",
        )
    return kind == "word"


def _str(message: dict[str, Any], key: str) -> str | None:
    value = message.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError(f"{key} must be a string.", param=key)
    return value


def _int(message: dict[str, Any], key: str) -> int | None:
    value = message.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{key} must be an integer.", param=key)
    return value


@dataclass(frozen=True, slots=True)
class VoiceUpload:
    """A checked ``voice.add``: the voice's metadata and its clip's bytes (not yet decoded as audio)."""

    fields: VoiceFields
    audio: bytes
    mime_type: str | None


def parse_voice_add(message: dict[str, Any]) -> VoiceUpload:
    """Check a ``voice.add``'s fields (the library's ``voice_fields`` rules) and decode its base64 audio.

    Whether the bytes are audio of an accepted length, and whether the name is free, the library decides.

    Raises:
        BadRequestError: An unknown field, bad metadata (name, missing consent, ...), or audio that is not base64.
    """
    unknown = sorted(set(message) - set(VOICE_ADD_FIELDS))
    if unknown:
        accepted = ", ".join(name for name in VOICE_ADD_FIELDS if name != "type")
        raise BadRequestError(
            f"Unrecognized voice.add field(s): {', '.join(unknown)}. Accepted: {accepted}.", param=unknown[0]
        )
    fields = voice_fields(
        name=message.get("name"),
        consent=message.get("consent"),
        ref_text=message.get("ref_text"),
        speaker_description=message.get("speaker_description"),
        language=message.get("language"),
    )
    audio_format = _str(message, "audio_format")
    data, media_type = _base64_audio(message.get("audio_data"))
    if media_type is None and audio_format and audio_format.strip():
        extension = audio_format.strip().lower().lstrip(".")
        media_type = _AUDIO_FORMATS.get(extension, f"audio/{extension}")
    return VoiceUpload(fields, data, media_type)


def _base64_audio(value: Any) -> tuple[bytes, str | None]:
    """``audio_data``: plain base64 or a ``data:<type>;base64,`` URI; the bytes and the URI's media type."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError(
            "voice.add needs 'audio_data': the reference clip (1–30 s; WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM) "
            "in base64.",
            param="audio_data",
        )
    text, media_type = value.strip(), None
    if text[:5].lower() == "data:":
        header, _, text = text.partition(",")
        media_type = header[5:].split(";", 1)[0].strip() or None
    try:
        return base64.b64decode("".join(text.split()), validate=True), media_type
    except ValueError as exc:  # binascii.Error is a ValueError
        raise BadRequestError("'audio_data' is not valid base64.", param="audio_data") from exc


# ----- server events ----------------------------------------------------------------------


def voice_added(voice: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``voice.add``: the saved voice as ``POST /v1/audio/voices`` describes it."""
    return {"type": "voice.added", "success": True, "voice": voice}


def voices_listed(catalogue: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``voice.list``: ``GET /v1/audio/voices``'s catalogue (``voices``, ``uploaded_voices``, ...)."""
    return {"type": "voice.listed", **catalogue}


VOICE_ERROR_CODES = {400: "invalid_voice", 404: "voice_not_found", 409: "voice_exists", 413: "too_large",
                     503: "not_ready", 507: "insufficient_storage"}  # fmt: skip


def voice_error(request: str, exc: SpeakwireError) -> dict[str, Any]:
    """A refused ``voice.add`` / ``voice.list``: an ``error`` event with the library's message and field; the
    session goes on."""
    return error_event(f"{request} failed: {exc.message}", code=VOICE_ERROR_CODES.get(exc.status_code, "voice_failed"),
                       param=exc.param, success=False)  # fmt: skip


def error_event(message: str, *, code: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "error", "message": message}
    if code:
        event["code"] = code
    event.update(extra)
    return event


def audio_start(
    utterance: int, sentence: int, text: str, fmt: str, sample_rate: int, *, word_timestamps: bool = False
) -> dict[str, Any]:
    event = {"type": "audio.start", "utterance_index": utterance, "sentence_index": sentence,
             "sentence_text": text, "format": fmt, "sample_rate": sample_rate, "channels": 1}  # fmt: skip
    if word_timestamps:
        event["word_timestamps"] = True
    return event


def audio_chunk(
    utterance: int,
    sentence: int,
    chunk_id: int,
    start_ms: int,
    end_ms: int,
    sample_rate: int,
    pcm: bytes,
    timestamps: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """vLLM-Omni's JSON audio frame (``word_timestamps: true``); times in ms from the sentence's first sample."""
    return {"type": "audio.chunk", "utterance_index": utterance, "sentence_index": sentence, "chunk_id": chunk_id,
            "chunk_start_ms": start_ms, "chunk_end_ms": end_ms, "sample_rate": sample_rate, "channels": 1,
            "audio_b64": base64.b64encode(pcm).decode("ascii"), "timestamps": timestamps}  # fmt: skip


def sentence_timestamps(words: Sequence[WordTiming], start_s: float, char_offset: int) -> list[dict[str, Any]]:
    """A sentence's words as vLLM-Omni lists them, relative to the sentence's first sample and its text."""
    return [
        {
            "word": word.text,
            "start_ms": max(0, round((word.start_s - start_s) * 1000)),
            "end_ms": max(0, round((word.end_s - start_s) * 1000)),
            "char_start": word.char_start - char_offset,
            "char_end": word.char_end - char_offset,
        }
        for word in words
    ]


def timestamp_info(words: Sequence[WordTiming], start_s: float) -> dict[str, Any] | None:
    """Baseten's ``audio.done`` timings for one sentence: seconds from its first sample (millisecond steps, the
    same instants ``sentence_timestamps`` gives); null when the engine did not time it."""
    if not words:
        return None
    starts = [max(0, round((word.start_s - start_s) * 1000)) / 1000 for word in words]
    ends = [max(0, round((word.end_s - start_s) * 1000)) / 1000 for word in words]
    return {"word_alignment": {"words": [word.text for word in words], "word_start_times_seconds": starts,
                               "word_end_times_seconds": ends}}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Heard:
    """How far one utterance's audio got before a cancel."""

    utterance_index: int
    spoken_chars: int
    """Characters of the utterance's text that the audio sent covers: through the last word whose audio was
    entirely sent and whose timing had come, or through the last sentence entirely sent, whichever is further (an
    aligner's words come after their sentence's end: until then only whole sentences count)."""
    text: str
    audio_sent_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"utterance_index": self.utterance_index, "spoken_chars": self.spoken_chars,
                "spoken_text": self.text[: self.spoken_chars], "audio_sent_s": round(self.audio_sent_s, 3)}  # fmt: skip


def input_cancelled(heard: Sequence[Heard], fallback_index: int) -> dict[str, Any]:
    """``input.cancelled`` for the utterances a cancel cut short: the last one's fields on top, earlier ones listed."""
    if not heard:
        return {"type": "input.cancelled", "utterance_index": fallback_index, "spoken_chars": 0, "spoken_text": "",
                "audio_sent_s": 0.0}  # fmt: skip
    event: dict[str, Any] = {"type": "input.cancelled", **heard[-1].to_dict()}
    if len(heard) > 1:
        event["earlier"] = [item.to_dict() for item in heard[:-1]]
    return event


def audio_done(utterance: int, sentence: int, total_bytes: int, error: bool) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "audio.done", "utterance_index": utterance, "sentence_index": sentence,
                             "total_bytes": total_bytes, "error": error}  # fmt: skip
    if error:
        event.update(partial_audio=total_bytes > 0, action="discard")
    return event


# ----- the connection's state, no I/O ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``event`` (an ``error`` or ``warning``); the session goes on."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Fatal:
    """Send ``event`` (an ``error``), then close with ``code``: the session is over."""

    event: dict[str, Any]
    code: int


@dataclass(frozen=True, slots=True)
class Configure:
    """A valid ``session.config``: resolve its voice and options, then call ``StreamProtocol.configured``."""

    config: StreamConfig


@dataclass(frozen=True, slots=True)
class SpeakText:
    """Text for the open utterance (the first opens one)."""

    text: str


@dataclass(frozen=True, slots=True)
class FinishInput:
    """``input.done``: the open utterance has all its text (none open: an empty utterance)."""


@dataclass(frozen=True, slots=True)
class CancelAll:
    """``input.cancel``: stop every utterance now and say how far each got (``input_cancelled``)."""


@dataclass(frozen=True, slots=True)
class CloseSession:
    """``session.close``: finish what was said, then close 1000."""


@dataclass(frozen=True, slots=True)
class AddVoice:
    """``voice.add``: save ``upload`` in the voice library, then answer ``voice_added`` (or ``voice_error``)."""

    upload: VoiceUpload


@dataclass(frozen=True, slots=True)
class ListVoices:
    """``voice.list``: answer ``voices_listed`` with the voice library's catalogue (or ``voice_error``)."""


Action = Reply | Fatal | Configure | SpeakText | FinishInput | CancelAll | CloseSession | AddVoice | ListVoices


def fatal(message: str, close: int, **extra: Any) -> Fatal:
    """An ``error`` event with ``message`` (``extra`` fields: its ``code``, ...), then the close code ``close``."""
    return Fatal(error_event(message, **extra), close)


class StreamProtocol:
    """One connection of the speech stream as a state machine: a client message in, the ``Action`` to take out.

    It knows whether the client is authorized and configured and whether an utterance is open; the session
    (``session.StreamSession``) does the I/O and the synthesis and tells it what happened (``configured``,
    ``utterance_closed``).
    """

    def __init__(self, api_key: str | None, offered_key: str | None) -> None:
        self._api_key = api_key or ""
        self.authorized = not api_key or key_matches(self._api_key, offered_key)
        self.config: StreamConfig | None = None
        self.utterance_open = False

    def receive(self, message: str | bytes) -> Action:
        if isinstance(message, bytes):
            return Reply(error_event("Binary frames are not accepted; send JSON text events.",
                                     code="binary_not_supported"))  # fmt: skip
        size = len(message.encode(errors="surrogatepass")) if len(message) > MAX_CONFIG_BYTES else 0
        if size > MAX_VOICE_ADD_BYTES:
            return fatal(f"Message exceeds {MAX_VOICE_ADD_BYTES} bytes.", CLOSE_TOO_BIG, code="too_large")
        if size > MAX_CONFIG_BYTES and not self.authorized:  # a clip is not parsed for a client not yet let in
            return fatal(f"Message exceeds {MAX_CONFIG_BYTES} bytes before the API key was given (header, ?api_key= "
                         "or session.config api_key); send voice.add after it.", CLOSE_POLICY,
                         code="unauthorized")  # fmt: skip
        try:
            event = parse_json(message)
        except json.JSONDecodeError as exc:
            if size > MAX_CONFIG_BYTES:
                return fatal(f"Message exceeds {MAX_CONFIG_BYTES} bytes.", CLOSE_TOO_BIG, code="too_large")
            return Reply(error_event(f"Invalid JSON: {exc.msg} at position {exc.pos}.", code="invalid_json"))
        kind = event.get("type") if isinstance(event, dict) else None
        if size > MAX_CONFIG_BYTES and kind != "voice.add":  # only a voice.add carries a whole reference clip
            return fatal(f"Message exceeds {MAX_CONFIG_BYTES} bytes.", CLOSE_TOO_BIG, code="too_large")
        if kind not in CLIENT_EVENT_TYPES:
            expected = ", ".join(CLIENT_EVENT_TYPES)
            return Reply(error_event(f"Unknown event type {kind!r}; expected one of {expected}.", code="unknown_type"))
        if kind == "session.config":
            return self._config(event)
        if kind in ("voice.add", "voice.list"):  # the library needs no session: answered before session.config too
            return self._voice(kind, event)
        if self.config is None:
            return Reply(error_event(f"Send session.config before {kind}.", code="no_config"))
        if kind == "input.text":
            return self._text(event)
        if kind == "input.done":
            self.utterance_open = False
            return FinishInput()
        if kind in ("input.cancel", "response.cancel"):
            self.utterance_open = False
            return CancelAll()
        self.utterance_open = False
        return CloseSession()

    def configured(self, config: StreamConfig) -> Reply | None:
        """The session resolved ``config``: it holds from now on (a warning names the fields it ignored)."""
        self.config = config
        if config.ignored_fields:
            return Reply({"type": "warning", "message": f"Ignored fields: {', '.join(config.ignored_fields)}."})
        return None

    def utterance_closed(self) -> None:
        """The open utterance ended without ``input.done`` (it could not start, or was cancelled)."""
        self.utterance_open = False

    def _config(self, event: dict[str, Any]) -> Action:
        if self.utterance_open:
            return Reply(error_event("An utterance is open: send input.done first, then session.config.",
                                     code="utterance_open"))  # fmt: skip
        if (refused := self._authorize(event)) is not None:
            return refused
        try:
            return Configure(parse_config(event))
        except BadRequestError as exc:
            return fatal(f"Invalid session.config: {exc.message}", CLOSE_POLICY, code="invalid_config",
                         param=exc.param)  # fmt: skip

    def _authorize(self, event: dict[str, Any]) -> Fatal | None:
        """None once the client is authorized (its header, or this message's ``api_key``); else the refusal."""
        if not self.authorized:
            offered = event.get("api_key")
            if not key_matches(self._api_key, offered if isinstance(offered, str) else None):
                return fatal("Missing or invalid API key (header, ?api_key= or session.config api_key).",
                             CLOSE_POLICY, code="unauthorized")  # fmt: skip
            self.authorized = True
        return None

    def _voice(self, kind: str, event: dict[str, Any]) -> Action:
        if (refused := self._authorize(event)) is not None:
            return refused
        if kind == "voice.list":
            return ListVoices()
        try:
            return AddVoice(parse_voice_add(event))
        except BadRequestError as exc:
            return Reply(voice_error("voice.add", exc))

    def _text(self, event: dict[str, Any]) -> Action:
        text = event.get("text")
        if not isinstance(text, str):
            return Reply(error_event("input.text needs a string 'text' field.", code="invalid_text"))
        encoded = len(text.encode(errors="surrogatepass")) if len(text) * 4 > MAX_TEXT_MESSAGE_BYTES else 0
        if encoded > MAX_TEXT_MESSAGE_BYTES:
            return fatal(f"input.text exceeds {MAX_TEXT_MESSAGE_BYTES} bytes.", CLOSE_TOO_BIG, code="too_large")
        self.utterance_open = True
        return SpeakText(text)
