"""NVIDIA Magpie TTS on the wire, without I/O: the NIM realtime synthesis protocol and the SageMaker HTTP body.

What pipecat 1.14's ``NvidiaSageMakerTTSService`` and ``NvidiaSageMakerHTTPTTSService`` send and read
(``pipecat/services/nvidia/sagemaker/tts.py``), what NVIDIA's SageMaker wrapper for the Magpie NIM forwards
and its test clients expect (``pipecat-examples: deployment/aws-sagemaker-nvidia``), and the event shapes
NVIDIA's realtime TTS client reads (``conversation.created`` → ``synthesize_session.updated`` with ``session``;
``error`` with ``error.message``; ``conversation.item.speech.completed`` with ``is_last_result``).

**Realtime** (the bidirectional stream's default path; ``session.py``). The server greets with
``conversation.created``. Client events:

* ``synthesize_session.update {session: {input_text_synthesis: {voice_name, language_code},
  output_audio_params: {sample_rate_hz, num_channels: 1, audio_format: "LINEAR_PCM"}}}``: fields given
  override the session's (NIM's clients send overrides only); answered ``synthesize_session.updated`` with the
  whole session. Allowed whenever no appended text waits for its commit; a commit speaks with the settings
  of its moment. Before any update the session has NIM's defaults (see ``SynthesisConfig``).
* ``input_text.append {text}`` adds to the text being gathered; ``input_text.commit`` speaks it (answered
  ``input_text.committed``), its audio following as ``conversation.item.speech.data {audio: base64 PCM16}``
  events and ending with one whose ``audio`` is empty and ``is_last_chunk`` true. Commits speak in order.
* ``input_text.done``: no more text in this turn. Text appended and not committed is committed with it, and
  the server answers at once with ``input_text.ended {pending_items}`` (our event: NIM's clients ignore events
  they do not know); everything committed is spoken; then ``conversation.item.speech.completed
  {is_last_result: true}``, after which nothing more of the turn is sent. A later append starts a new turn.
  NVIDIA's client and pipecat's example send ``done`` right after their last commit and expect all the audio,
  so ``done`` does not cut anything short. pipecat's barge-in sends ``done``, waits for whatever event comes
  next, then sends ``session.end`` (which stops the audio) and opens a new stream; ``input_text.ended`` is that
  event, so the barge-in never waits for the next audio chunk (which flow control may hold back).
* ``session.end``: stop now and close (1000). NVIDIA's wrapper closes the NIM socket on it.

No per-commit ``speech.completed`` is sent: pipecat's service ends its stream at every ``speech.completed``
("reconnect to reset the synthesis state") and would drop the commits still queued on it.

Errors are NIM's ``error`` event, ``{error: {type, code, message, param, event_id}}`` (``event_id``: the
client event it answers, when that had one); the session goes on after every error but one: a message
over the size limit closes it (1009). Every server event carries its own ``event_id``.

**HTTP** (``POST /invocations`` with a JSON body that has ``text`` and no ``input``; ``router.py``):
``{text, voice_name, language_code, sample_rate_hz}`` → raw PCM16 mono at ``sample_rate_hz``
(``application/octet-stream``), as NVIDIA's wrapper answers. Errors are the wrapper's ``{"error": message}``.

**Voices.** Magpie's voice names (``Magpie-Multilingual.EN-US.Aria``, ``Magpie-ZeroShot.Female-1``,
``English-US-Magpie-Flow.Male.Happy``, Riva's ``English-US.Female-1``) mean the server's default voice, as
other vendors' stock names do (``speakwire.voice_presets``: never hiding a real voice of that name, off with
``--no-preset-voice-aliases``); any other name is looked up among the server's voices and saved voices.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from speakwire.errors import BadRequestError, PayloadTooLargeError, SpeakwireError
from speakwire.languages import language_name
from speakwire.server.json_message import json_int, parse_json
from speakwire.server.limits import (
    CLOSE_TOO_BIG,
    MAX_CONFIG_BYTES,
    MAX_FRAME_BYTES,
    MAX_TEXT_MESSAGE_BYTES,
)
from speakwire.server.options import SpeechOptions
from speakwire.server.speech.input_check import InputErrors, check_input

ClientEventType = Literal[
    "synthesize_session.update", "input_text.append", "input_text.commit", "input_text.done", "session.end"
]
CLIENT_EVENT_TYPES: tuple[str, ...] = ClientEventType.__args__  # type: ignore[attr-defined]
ServerEventType = Literal[
    "conversation.created", "synthesize_session.updated", "input_text.committed", "input_text.ended",
    "conversation.item.speech.data", "conversation.item.speech.completed", "error",
]  # fmt: skip

INVOCATIONS_PATH = "/v1/magpie/invocations"
"""Our route for the HTTP body; ``/invocations`` without a route attribute goes there when the body is Magpie's."""
DEFAULT_VOICE_NAME = "Magpie-Multilingual.EN-US.Aria"
"""What pipecat's services and NVIDIA's wrapper send by default (and echo when the client names none)."""
DEFAULT_LANGUAGE_CODE = "en-US"
DEFAULT_SAMPLE_RATE_HZ = 22050
"""Magpie's own rate: the NIM's and the wrapper's default."""
AUDIO_FORMAT = "LINEAR_PCM"
MAX_AUDIO_BYTES_PER_EVENT = MAX_FRAME_BYTES
"""PCM in one ``speech.data`` event (before base64), as binary frames are cut elsewhere."""

_COMMIT_ERRORS = InputErrors(
    param="text",
    empty=None,  # a blank commit is refused before, as out of order
    unspeakable="The committed text has nothing to speak: no letters or digits.",
    too_long="The committed text is {length} characters; the limit is {limit}. Commit shorter pieces.",
    too_long_error=PayloadTooLargeError,
)
_SESSION_FIELDS = ("input_text_synthesis", "output_audio_params", "custom_dictionary", "zero_shot_config",
                   "custom_configuration", "id", "object", "client_secret")  # fmt: skip


class MagpieError(Exception):
    """A request NIM would refuse: its ``error`` event on the socket, ``{"error": message}`` over HTTP."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.param = param
        self.status = status


def from_speakwire(error: SpeakwireError) -> MagpieError:
    """One of our errors in NIM's terms (the HTTP status kept for the HTTP route)."""
    if error.status_code == 404:
        return MagpieError(error.message, code="invalid_voice", param="voice_name", status=404)
    if error.status_code in (429, 503):
        return MagpieError(error.message, code="server_busy", kind="server_error", status=error.status_code)
    if error.status_code >= 500:
        return MagpieError(error.message, code="synthesis_failed", kind="server_error", status=error.status_code)
    code = "input_too_long" if isinstance(error, PayloadTooLargeError) else "invalid_value"
    return MagpieError(error.message, code=code, param=error.param, status=error.status_code)


# ----- settings ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SynthesisConfig:
    """A session's (or an HTTP request's) synthesis settings, in NIM's terms."""

    voice_name: str | None = None
    """None: none named (our default voice; ``DEFAULT_VOICE_NAME`` is echoed)."""
    language_code: str | None = None
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ

    def speech_options(self) -> SpeechOptions:
        """Our options for these settings: raw PCM16 at ``sample_rate_hz``, the voice and language named."""
        language = language_name(self.language_code) if self.language_code else None
        return SpeechOptions(voice=self.voice_name, response_format="pcm", sample_rate=self.sample_rate_hz,
                             language=language)  # fmt: skip

    def session(self, session_id: str) -> dict[str, Any]:
        """The session object ``synthesize_session.updated`` carries."""
        synthesis = {"language_code": self.language_code or DEFAULT_LANGUAGE_CODE,
                     "voice_name": self.voice_name or DEFAULT_VOICE_NAME}  # fmt: skip
        audio = {"sample_rate_hz": self.sample_rate_hz, "num_channels": 1, "audio_format": AUDIO_FORMAT}
        return {"id": session_id, "object": "realtime.synthesize_session", "input_text_synthesis": synthesis,
                "output_audio_params": audio}  # fmt: skip


def parse_session_update(event: Mapping[str, Any], current: SynthesisConfig) -> SynthesisConfig:
    """``current`` with the fields a ``synthesize_session.update`` gives.

    Raises:
        MagpieError: A field of the wrong type or value, an unknown field, or a setting not offered here.
    """
    session = event.get("session", {})
    if not isinstance(session, dict):
        raise MagpieError("'session' must be an object.", code="invalid_value", param="session")
    unknown = sorted(set(session) - set(_SESSION_FIELDS))
    if unknown:
        raise MagpieError(f"Unknown session field(s): {', '.join(unknown)}.", code="invalid_value", param=unknown[0])
    if session.get("zero_shot_config"):
        raise MagpieError(
            "zero_shot_config is not supported here: save the voice (POST /v1/audio/voices), then name it in "
            "voice_name.",
            code="invalid_value",
            param="session.zero_shot_config",
        )
    synthesis = _object(session, "input_text_synthesis")
    audio = _object(session, "output_audio_params")
    config = current
    if "voice_name" in synthesis:
        config = replace(config, voice_name=_optional_str(synthesis, "voice_name", "input_text_synthesis."))
    if "language_code" in synthesis:
        config = replace(config, language_code=_optional_str(synthesis, "language_code", "input_text_synthesis."))
    if audio.get("sample_rate_hz") is not None:
        config = replace(config, sample_rate_hz=_rate(audio.get("sample_rate_hz"), "output_audio_params."))
    channels = audio.get("num_channels")
    if channels is not None and channels != 1:
        raise MagpieError("num_channels must be 1 (mono).", code="invalid_value",
                          param="session.output_audio_params.num_channels")  # fmt: skip
    fmt = audio.get("audio_format")
    if fmt is not None and (not isinstance(fmt, str) or fmt.upper() != AUDIO_FORMAT):
        raise MagpieError(f"audio_format must be {AUDIO_FORMAT} (16-bit PCM), got {fmt!r}.", code="invalid_value",
                          param="session.output_audio_params.audio_format")  # fmt: skip
    return config


def _object(session: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = session.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MagpieError(f"'{key}' must be an object.", code="invalid_value", param=f"session.{key}")
    return value


def _optional_str(fields: Mapping[str, Any], key: str, prefix: str = "") -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MagpieError(f"'{key}' must be a string.", code="invalid_value", param=f"session.{prefix}{key}")
    return value.strip() or None


def _rate(value: Any, prefix: str = "") -> int:
    """A whole number of Hz (``20`` or ``20.0``; not ``true``, and not JSON's ``1e999`` or ``NaN``)."""
    rate = json_int(value)
    if rate is None:
        raise MagpieError(f"sample_rate_hz must be an integer, got {value!r}.", code="invalid_value",
                          param=f"{prefix}sample_rate_hz")  # fmt: skip
    return rate


# ----- HTTP -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A checked ``/invocations`` body."""

    text: str
    config: SynthesisConfig


def is_http_body(fields: Any) -> bool:
    """Magpie's ``/invocations`` shape: a JSON object with ``text`` and without OpenAI's ``input``."""
    return isinstance(fields, dict) and "text" in fields and "input" not in fields


def parse_http_body(body: bytes) -> HttpRequest:
    """The wrapper's JSON body; raises ``MagpieError`` (400) saying what is wrong."""
    try:
        fields = parse_json(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise MagpieError("invalid JSON body", code="invalid_json") from None
    if not isinstance(fields, dict):
        raise MagpieError("the body must be a JSON object", code="invalid_json")
    text = fields.get("text")
    if not isinstance(text, str) or not text.strip():
        raise MagpieError("text field is required", code="invalid_value", param="text")
    rate = fields.get("sample_rate_hz")
    config = SynthesisConfig(
        voice_name=_optional_str(fields, "voice_name"),
        language_code=_optional_str(fields, "language_code"),
        sample_rate_hz=DEFAULT_SAMPLE_RATE_HZ if rate is None else _rate(rate),
    )
    return HttpRequest(text, config)


def http_error_body(error: MagpieError) -> dict[str, Any]:
    return {"error": error.message}


# ----- realtime: client events in, actions out ----------------------------------------------


def is_realtime_event(message: str | bytes | None) -> bool:
    """Whether a bidirectional stream's first message is a Magpie client event (else it is the speech stream's)."""
    if not isinstance(message, str) or not any(f'"{kind}"' in message for kind in CLIENT_EVENT_TYPES):
        return False  # the cheap test first: a session.config may carry megabytes of reference audio
    try:
        event = parse_json(message)
    except json.JSONDecodeError:
        return False
    return isinstance(event, dict) and event.get("type") in CLIENT_EVENT_TYPES


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``event`` (an ``error``); the session goes on."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Fatal:
    """Send ``event`` (an ``error``), then close with ``code``."""

    event: dict[str, Any]
    code: int


@dataclass(frozen=True, slots=True)
class Configure:
    """Resolve ``config`` (its voice may not exist); then send ``RealtimeConnection.configured``'s event, or an
    error, and the session keeps its settings."""

    config: SynthesisConfig
    event_id: str | None


@dataclass(frozen=True, slots=True)
class Commit:
    """Speak ``text`` with the session's settings; answer ``input_text.committed`` now."""

    text: str
    event_id: str | None


@dataclass(frozen=True, slots=True)
class Finish:
    """The turn's input is over: answer ``input_text.ended`` now; ``speech.completed`` follows the last audio of
    everything committed."""

    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class End:
    """``session.end``: stop everything and close (1000)."""


Action = Reply | Fatal | Configure | Commit | Finish | End


class RealtimeConnection:
    """One realtime synthesis session as a state machine: a client message in, the ``Action``\\ s to take out.

    It holds the session's settings and the text appended since the last commit; the session adapter does
    the I/O and synthesis and reports a configuration it could resolve back (``configured``).
    """

    def __init__(self, *, max_commit_chars: int) -> None:
        self.config = SynthesisConfig()
        self.session_id = f"sess_{uuid.uuid4().hex}"
        self.conversation_id = f"conv_{uuid.uuid4().hex}"
        self._appended: list[str] = []
        self._appended_chars = 0
        self._max_commit_chars = max_commit_chars

    @property
    def has_text(self) -> bool:
        """Text was appended and not yet committed."""
        return bool(self._appended)

    def greeting(self) -> dict[str, Any]:
        """The first server event, before any client event is answered."""
        conversation = {"id": self.conversation_id, "object": "realtime.conversation"}
        return event("conversation.created", conversation=conversation)

    def receive(self, message: str | bytes) -> list[Action]:
        """The actions one client message asks for, in order (``input_text.done`` may commit first)."""
        if isinstance(message, bytes):
            return [Reply(error_event(MagpieError("Binary frames are not accepted; send JSON text events.",
                                                  code="invalid_event")))]  # fmt: skip
        size = len(message.encode(errors="surrogatepass")) if len(message) * 4 > MAX_TEXT_MESSAGE_BYTES else 0
        if size > MAX_CONFIG_BYTES:
            return [_too_big(MAX_CONFIG_BYTES)]
        try:
            parsed = parse_json(message)
        except json.JSONDecodeError as exc:
            error = MagpieError(f"Invalid JSON: {exc.msg} at position {exc.pos}.", code="invalid_json")
            return [Reply(error_event(error))]
        kind = parsed.get("type") if isinstance(parsed, dict) else None
        client_id = parsed.get("event_id") if isinstance(parsed, dict) else None
        client_id = client_id if isinstance(client_id, str) else None
        if size > MAX_TEXT_MESSAGE_BYTES and kind != "synthesize_session.update":
            return [_too_big(MAX_TEXT_MESSAGE_BYTES)]
        if kind not in CLIENT_EVENT_TYPES:
            expected = ", ".join(CLIENT_EVENT_TYPES)
            error = MagpieError(f"Unknown event type {kind!r}; expected one of {expected}.", code="unknown_event",
                                param="type")  # fmt: skip
            return [Reply(error_event(error, client_id))]
        assert isinstance(parsed, dict)
        try:
            return self._event(kind, parsed, client_id)
        except MagpieError as error:
            return [Reply(error_event(error, client_id))]

    def configured(self, config: SynthesisConfig, client_id: str | None = None) -> dict[str, Any]:
        """The session resolved ``config``: it holds from now on; the ``synthesize_session.updated`` to send."""
        self.config = config
        return event("synthesize_session.updated", session=config.session(self.session_id), **_answering(client_id))

    def _event(self, kind: str, message: dict[str, Any], client_id: str | None) -> list[Action]:
        if kind == "synthesize_session.update":
            if self._appended:
                raise MagpieError(
                    "synthesize_session.update while appended text waits for its commit; send input_text.commit "
                    "(or input_text.done) first.",
                    code="out_of_order",
                )
            return [Configure(parse_session_update(message, self.config), client_id)]
        if kind == "input_text.append":
            text = message.get("text")
            if not isinstance(text, str):
                raise MagpieError("input_text.append needs a string 'text'.", code="invalid_value", param="text")
            if self._appended_chars + len(text) > self._max_commit_chars:  # refused here, or the commit loses all
                raise MagpieError(f"Appended text would exceed {self._max_commit_chars} characters, the most one "
                                  "commit speaks; commit first. This text was dropped; what came before it waits.",
                                  code="input_too_long", param="text")  # fmt: skip
            self._appended.append(text)
            self._appended_chars += len(text)
            return []
        if kind == "input_text.commit":
            return [self._commit(client_id)]
        if kind == "input_text.done":
            if not "".join(self._appended).strip():
                self._take_text()
                return [Finish(client_id)]
            try:  # the rest of the text is committed with it; if it cannot be spoken, the turn still ends
                return [self._commit(client_id), Finish(client_id)]
            except MagpieError as error:
                return [Reply(error_event(error, client_id)), Finish(client_id)]
        return [End()]

    def _commit(self, client_id: str | None) -> Commit:
        text = self._take_text()
        if not text.strip():
            raise MagpieError(
                "input_text.commit with no text appended since the last commit; send input_text.append first.",
                code="out_of_order",
            )
        try:
            check_input(text, self._max_commit_chars, _COMMIT_ERRORS)
        except PayloadTooLargeError as exc:
            raise MagpieError(exc.message, code="input_too_long", param="text") from None
        except BadRequestError as exc:
            raise MagpieError(exc.message, code="invalid_value", param="text") from None
        return Commit(text, client_id)

    def _take_text(self) -> str:
        text = "".join(self._appended)
        self._appended, self._appended_chars = [], 0
        return text


def _too_big(limit: int) -> Fatal:
    return Fatal(error_event(MagpieError(f"Message exceeds {limit} bytes.", code="message_too_large")), CLOSE_TOO_BIG)


def _answering(client_id: str | None) -> dict[str, Any]:
    return {"previous_event_id": client_id} if client_id else {}


# ----- server events ----------------------------------------------------------------------


def event(kind: ServerEventType, **fields: Any) -> dict[str, Any]:
    """A server event: its type, a fresh ``event_id``, then ``fields``."""
    return {"event_id": f"event_{uuid.uuid4().hex}", "type": kind, **fields}


def committed_event(item_id: str, client_id: str | None = None) -> dict[str, Any]:
    return event("input_text.committed", item_id=item_id, **_answering(client_id))


def input_ended(pending_items: int, client_id: str | None = None) -> dict[str, Any]:
    """``input_text.done`` was taken: ``pending_items`` commits are still to be heard before ``speech.completed``."""
    return event("input_text.ended", pending_items=pending_items, **_answering(client_id))


def speech_data(item_id: str, pcm: bytes, *, last: bool = False) -> dict[str, Any]:
    """Audio of a commit; ``last``: the commit's end (sent with empty audio)."""
    return event("conversation.item.speech.data", item_id=item_id, audio=base64.b64encode(pcm).decode("ascii"),
                 is_last_chunk=last)  # fmt: skip


def speech_completed(total_audio_chunks: int, audio_duration_ms: int) -> dict[str, Any]:
    """The turn is over: everything committed before ``input_text.done`` was spoken."""
    return event("conversation.item.speech.completed", is_last_result=True, total_audio_chunks=total_audio_chunks,
                 synthesis_metadata={"audio_duration_ms": audio_duration_ms})  # fmt: skip


def error_event(error: MagpieError, client_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": error.kind, "code": error.code, "message": error.message, "param": error.param}
    if client_id:
        body["event_id"] = client_id
    return event("error", error=body)
