"""The Wyoming protocol (Home Assistant's voice services) with no I/O: framing, events, the session's state.

Framing (``wyoming/event.py`` of the official package): one JSON header line
``{"type", "version", "data_length"?, "payload_length"?}\\n``, then ``data_length`` bytes of JSON data, then
``payload_length`` bytes of binary payload. A ``"data"`` object inside the header is merged with the data
that follows (readers must accept both). ``FrameDecoder`` takes bytes as they arrive and hands out whole
events; ``encode_event`` builds the bytes of one.

The session follows wyoming-piper (``wyoming_piper/handler.py``), which is what Home Assistant is tested against:

* ``synthesize`` outside a stream is one-shot: one ``audio-start`` … ``audio-stop`` around all its sentences
  (Home Assistant's one-shot client reads until the first ``audio-stop``).
* ``synthesize-start`` / ``synthesize-chunk``\\* / ``synthesize-stop`` streams text in; every sentence gets its
  own ``audio-start`` / ``audio-chunk``\\* / ``audio-stop`` as soon as it is spoken, then ``synthesize-stopped``.
* A ``synthesize`` inside a stream is ignored: clients send it only for servers that cannot stream. Unlike
  wyoming-piper, which never leaves streaming mode, a ``synthesize`` after ``synthesize-stop`` is one-shot again.

``WyomingSession`` holds that state: it turns each client event into one ``Command`` for the adapter to carry
out, and raises ``WyomingError`` (answered with an ``error`` event; the connection stays usable) for an event
that makes no sense where it arrives.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from speakwire.engines.base import EngineInfo
from speakwire.server.json_message import parse_json

PROTOCOL_VERSION = "1.10.2"
"""The version of the official ``wyoming`` package whose events this module speaks."""
SAMPLES_PER_CHUNK = 1024
"""Samples per ``audio-chunk``, as wyoming-piper sends (``--samples-per-chunk``)."""
SAMPLE_WIDTH = 2
"""Bytes per sample: 16-bit signed little-endian PCM."""
CHANNELS = 1

MAX_HEADER_BYTES = 1024 * 1024
"""The longest header line accepted (it may carry the data inline)."""
MAX_DATA_BYTES = 4 * 1024 * 1024
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""A TTS server takes no payloads; one is read and dropped, up to this size."""

ErrorCode = Literal[
    "invalid_frame", "invalid_event", "no_stream", "stream_open", "nothing_to_speak", "voice_not_found",
    "language_not_found", "bad_request", "too_large", "busy", "shutting_down", "not_ready", "synthesis_failed",
    "internal_error",
]  # fmt: skip

_LANGUAGE_CODES = {
    "english": "en", "chinese": "zh", "japanese": "ja", "korean": "ko", "german": "de", "french": "fr",
    "russian": "ru", "portuguese": "pt", "spanish": "es", "italian": "it",
}  # fmt: skip
_ATTRIBUTIONS = {
    "piper": ("rhasspy", "https://github.com/rhasspy/piper"),
    "qwen3": ("Qwen", "https://github.com/QwenLM/Qwen3-TTS"),
}


class WyomingError(Exception):
    """An event the server cannot act on; the adapter answers ``error{text, code}``."""

    def __init__(self, text: str, code: ErrorCode) -> None:
        super().__init__(text)
        self.text = text
        self.code: ErrorCode = code


class FrameError(WyomingError):
    """The byte stream is not Wyoming framing; nothing after it can be trusted, so the connection ends."""

    def __init__(self, text: str) -> None:
        super().__init__(text, "invalid_frame")


# ----- framing ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One Wyoming event as framed on the wire."""

    type: str
    data: dict[str, Any]
    payload: bytes | None = None


def encode_event(event_type: str, data: dict[str, Any] | None = None, payload: bytes | None = None) -> bytes:
    """The bytes of one event: header line, JSON data, payload (as ``wyoming.event.async_write_event`` writes)."""
    header: dict[str, Any] = {"type": event_type, "version": PROTOCOL_VERSION}
    data_bytes = json.dumps(data, ensure_ascii=False).encode() if data else b""
    if data_bytes:
        header["data_length"] = len(data_bytes)
    if payload:
        header["payload_length"] = len(payload)
    return b"".join((json.dumps(header, ensure_ascii=False).encode(), b"\n", data_bytes, payload or b""))


@dataclass(frozen=True, slots=True)
class _Header:
    type: str
    inline: dict[str, Any]
    data_length: int
    payload_length: int


class FrameDecoder:
    """Bytes in (any split), events out; raises ``FrameError`` on anything that is not Wyoming framing."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._header: _Header | None = None

    def feed(self, received: bytes) -> list[Event]:
        """Add received bytes; return every event they complete, in order."""
        self._buffer += received
        events: list[Event] = []
        while True:
            if self._header is None:
                newline = self._buffer.find(b"\n", 0, MAX_HEADER_BYTES + 1)
                if newline < 0:
                    if len(self._buffer) > MAX_HEADER_BYTES:
                        raise FrameError(f"Header line longer than {MAX_HEADER_BYTES} bytes.")
                    return events
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if line.strip():  # blank lines between events are harmless
                    self._header = _parse_header(line)
                continue
            header = self._header
            if len(self._buffer) < header.data_length + header.payload_length:
                return events
            data = dict(header.inline)
            if header.data_length:
                data.update(_parse_json_object(bytes(self._buffer[: header.data_length]), "data"))
            payload_end = header.data_length + header.payload_length
            payload = bytes(self._buffer[header.data_length : payload_end]) if header.payload_length else None
            del self._buffer[:payload_end]
            self._header = None
            events.append(Event(header.type, data, payload))


def _parse_header(line: bytes) -> _Header:
    header = _parse_json_object(line, "header")
    event_type = header.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise FrameError("Event header has no 'type'.")
    inline = header.get("data") or {}
    if not isinstance(inline, dict):
        raise FrameError("Event header 'data' must be an object.")
    return _Header(
        event_type,
        inline,
        _length(header, "data_length", MAX_DATA_BYTES),
        _length(header, "payload_length", MAX_PAYLOAD_BYTES),
    )


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FrameError(f"Event header '{key}' must be a non-negative integer.")
    if value > limit:
        raise FrameError(f"Event header '{key}' is {value} bytes; the limit is {limit}.")
    return value


def _parse_json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = parse_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"Event {what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise FrameError(f"Event {what} must be a JSON object.")
    return value


# ----- client events --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    """``voice`` of a synthesize event: a name (and speaker) from ``info``, or only a language."""

    name: str | None = None
    speaker: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class Describe:
    pass


@dataclass(frozen=True, slots=True)
class Ping:
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Synthesize:
    text: str
    voice: VoiceChoice | None = None


@dataclass(frozen=True, slots=True)
class SynthesizeStart:
    voice: VoiceChoice | None = None


@dataclass(frozen=True, slots=True)
class SynthesizeChunk:
    text: str


@dataclass(frozen=True, slots=True)
class SynthesizeStop:
    pass


@dataclass(frozen=True, slots=True)
class Other:
    """An event a TTS server does not act on (wyoming-piper ignores these too)."""

    type: str


ClientEvent = Describe | Ping | Synthesize | SynthesizeStart | SynthesizeChunk | SynthesizeStop | Other


def parse_event(event: Event) -> ClientEvent:
    """Check an event's fields; raise ``WyomingError`` (``invalid_event``) saying what is wrong."""
    data = event.data
    if event.type == "describe":
        return Describe()
    if event.type == "ping":
        return Ping(_optional_str(data, "text", event.type))
    if event.type == "synthesize":
        return Synthesize(_text(data, event.type), _voice(data, event.type))
    if event.type == "synthesize-start":
        return SynthesizeStart(_voice(data, event.type))
    if event.type == "synthesize-chunk":
        return SynthesizeChunk(_text(data, event.type))
    if event.type == "synthesize-stop":
        return SynthesizeStop()
    return Other(event.type)


def _text(data: dict[str, Any], event_type: str) -> str:
    text = data.get("text")
    if not isinstance(text, str):
        raise WyomingError(f"{event_type} needs a string 'text'.", "invalid_event")
    return text


def _optional_str(data: dict[str, Any], key: str, event_type: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise WyomingError(f"{event_type} '{key}' must be a string.", "invalid_event")
    return value


def _voice(data: dict[str, Any], event_type: str) -> VoiceChoice | None:
    voice = data.get("voice")
    if voice is None:
        return None
    if not isinstance(voice, dict):
        raise WyomingError(f"{event_type} 'voice' must be an object.", "invalid_event")
    # As SynthesizeVoice.from_dict: a name (with its speaker) wins over a language.
    name = _optional_str(voice, "name", f"{event_type} voice")
    if name:
        return VoiceChoice(name=name, speaker=_optional_str(voice, "speaker", f"{event_type} voice") or None)
    language = _optional_str(voice, "language", f"{event_type} voice")
    return VoiceChoice(language=language) if language else None


# ----- server events --------------------------------------------------------------------


def audio_start(rate: int) -> bytes:
    return encode_event("audio-start", {"rate": rate, "width": SAMPLE_WIDTH, "channels": CHANNELS, "timestamp": None})


def audio_chunk(rate: int, pcm: bytes) -> bytes:
    data = {"rate": rate, "width": SAMPLE_WIDTH, "channels": CHANNELS, "timestamp": None}
    return encode_event("audio-chunk", data, pcm)


def audio_stop() -> bytes:
    return encode_event("audio-stop", {"timestamp": None})


def synthesize_stopped() -> bytes:
    return encode_event("synthesize-stopped")


def pong(text: str | None) -> bytes:
    return encode_event("pong", {"text": text})


def error(text: str, code: ErrorCode) -> bytes:
    return encode_event("error", {"text": text, "code": code})


class PcmChunker:
    """16-bit PCM cut into ``SAMPLES_PER_CHUNK``-sample chunks, the last one shorter at ``flush``."""

    def __init__(self) -> None:
        self._pending = b""

    def add(self, pcm: bytes) -> list[bytes]:
        data = self._pending + pcm
        size = SAMPLES_PER_CHUNK * SAMPLE_WIDTH * CHANNELS
        whole = len(data) - len(data) % size
        self._pending = data[whole:]
        return [data[start : start + size] for start in range(0, whole, size)]

    def flush(self) -> list[bytes]:
        rest, self._pending = self._pending, b""
        return [rest] if rest else []


# ----- info -----------------------------------------------------------------------------


def language_codes(info: EngineInfo, voice_language: str | None = None) -> list[str]:
    """The languages of an engine as Wyoming advertises them (``en_US``, ``de``), not our names (``English``).

    ``voice_language`` is the voice file's own code (a Piper voice's ``language.code``), which is what
    wyoming-piper advertises for the same voice, so Home Assistant sees one voice the same way from both.
    """
    codes = []
    for name in info.languages:
        if name.lower() == "auto":
            continue
        code = _LANGUAGE_CODES.get(name.lower(), name)
        if voice_language and voice_language.split("_")[0].lower() == code.lower():
            code = voice_language
        if code not in codes:
            codes.append(code)
    return codes


def match_language(info: EngineInfo, requested: str, voice_language: str | None = None) -> str | None:
    """Our name for a requested Wyoming language (``en_US``, ``en-us``, ``en``, ``English``), or None."""
    wanted = requested.replace("-", "_").lower()
    for name in info.languages:
        code = _LANGUAGE_CODES.get(name.lower(), name.lower())
        candidates = {name.lower(), code.lower()}
        if voice_language and voice_language.split("_")[0].lower() == code:
            candidates.add(voice_language.lower())
        if wanted in candidates or wanted.split("_")[0] in candidates:
            return name
    return None


@dataclass(frozen=True, slots=True)
class SavedVoiceInfo:
    name: str
    language: str | None
    description: str | None


def build_info(
    info: EngineInfo,
    saved: list[SavedVoiceInfo],
    *,
    version: str,
    voice_language: str | None = None,
) -> bytes:
    """The ``info`` event: one TTS program (this server) whose voices are the engine's and the saved ones.

    Saved voices are cloning references: ``installed`` says whether this engine can speak them, and Home
    Assistant offers only installed voices.
    """
    languages = language_codes(info, voice_language)
    by, url = _ATTRIBUTIONS.get(info.name, (info.name, ""))
    engine_attribution = {"name": by, "url": url}
    voices = []
    for name in info.voices:
        description = name if name == info.model.split("/")[-1] else f"{name} ({info.model})"
        voices.append(_tts_voice(name, description, engine_attribution, languages, installed=True))
    for voice in saved:
        own = match_language(info, voice.language, voice_language) if voice.language else None
        voices.append(_tts_voice(
            voice.name, voice.description or f"{voice.name} (saved voice)",
            {"name": "speakwire voice library", "url": ""},
            language_codes(_only(info, own), voice_language) if own else languages,
            installed=info.supports_cloning,
        ))  # fmt: skip
    program = {
        "name": "speakwire",
        "attribution": {"name": "speakwire", "url": ""},
        "installed": True,
        "description": f"speakwire real-time text to speech ({info.model})",
        "version": version,
        "voices": voices,
        "supports_synthesize_streaming": True,
    }
    data = {"asr": [], "tts": [program], "handle": [], "intent": [], "wake": [], "mic": [], "snd": []}
    return encode_event("info", data)


def _tts_voice(
    name: str, description: str, attribution: dict[str, str], languages: list[str], *, installed: bool
) -> dict[str, Any]:
    """A ``TtsVoice`` (``wyoming/info.py``) as its ``to_dict`` writes it."""
    return {
        "name": name,
        "attribution": attribution,
        "installed": installed,
        "description": description,
        "version": None,
        "languages": languages,
        "speakers": None,
    }


def _only(info: EngineInfo, language: str) -> EngineInfo:
    return replace(info, languages=(language,))


# ----- session state ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """Reply at once (``info``, ``pong``): these do not wait for audio already being sent."""

    kind: Literal["info", "pong"]
    text: str | None = None


@dataclass(frozen=True, slots=True)
class SpeakOnce:
    """One-shot: speak ``text`` in one ``audio-start`` … ``audio-stop``."""

    text: str
    voice: VoiceChoice | None


@dataclass(frozen=True, slots=True)
class OpenStream:
    voice: VoiceChoice | None


@dataclass(frozen=True, slots=True)
class StreamText:
    text: str


@dataclass(frozen=True, slots=True)
class CloseStream:
    """End of the stream's text; ``failed``: the stream was refused, so only ``synthesize-stopped`` is owed."""

    failed: bool = False


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: str


Command = Answer | SpeakOnce | OpenStream | StreamText | CloseStream | Ignore

Phase = Literal["idle", "streaming", "failed"]
"""``failed``: a stream whose start was refused; its chunks are dropped and its stop answered."""


class WyomingSession:
    """What each client event means in the connection's current state (no I/O)."""

    def __init__(self) -> None:
        self.phase: Phase = "idle"

    def receive(self, event: ClientEvent) -> Command:
        """The command for one client event; raises ``WyomingError`` where the event is out of place."""
        if isinstance(event, Describe):
            return Answer("info")
        if isinstance(event, Ping):
            return Answer("pong", event.text)
        if isinstance(event, Synthesize):
            if self.phase != "idle":
                # Compatibility copy of the streamed text: start → chunk+ → synthesize? → stop.
                return Ignore("synthesize during a stream")
            return SpeakOnce(event.text, event.voice)
        if isinstance(event, SynthesizeStart):
            if self.phase != "idle":
                raise WyomingError("A stream is already open: send synthesize-stop first.", "stream_open")
            self.phase = "streaming"
            return OpenStream(event.voice)
        if isinstance(event, SynthesizeChunk):
            if self.phase == "idle":
                raise WyomingError("synthesize-chunk outside a stream: send synthesize-start first.", "no_stream")
            if self.phase == "failed":
                return Ignore("stream was refused")
            return StreamText(event.text)
        if isinstance(event, SynthesizeStop):
            if self.phase == "idle":
                raise WyomingError("synthesize-stop outside a stream: send synthesize-start first.", "no_stream")
            failed = self.phase == "failed"
            self.phase = "idle"
            return CloseStream(failed=failed)
        return Ignore(f"{event.type} is not a TTS event")

    def stream_failed(self) -> None:
        """The open stream could not go on (refused, or its text over the limit): drop its text until the stop."""
        if self.phase == "streaming":
            self.phase = "failed"
