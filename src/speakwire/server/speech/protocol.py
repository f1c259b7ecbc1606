"""Request schema of ``POST /v1/audio/speech`` (OpenAI fields plus vLLM-Omni's Qwen3 fields).

It behaves as OpenAI's endpoint does for the clients built on it (pipecat, LiveKit, RealtimeTTS):
fields it does not know (``temperature``, ``top_p`` from RealtimeTTS, newer OpenAI fields) are
accepted and ignored — the handler names them in ``X-Ignored-Fields`` and logs each name once —
and ``null`` means the field is absent.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from speakwire.encoders.registry import AUDIO_FORMATS
from speakwire.languages import language_name
from speakwire.server.json_message import not_bool
from speakwire.server.openapi.limits import engine_capability, speech_text, spoken_language
from speakwire.server.options import (
    MAX_SAMPLE_RATE,
    MAX_SPEED,
    MIN_SAMPLE_RATE,
    MIN_SPEED,
    SpeechOptions,
    voice_name,
)

_VOICE_SCHEMA: JsonDict = {
    "anyOf": [
        {"type": "string"},
        {"type": "object", "properties": {"id": {"type": "string", "minLength": 1}}, "required": ["id"]},
        {"type": "null"},
    ]
}
"""A name, or OpenAI's newer ``{"id": ...}`` (``voice_name``)."""


def _format_or_null(schema: JsonDict) -> None:
    """``response_format``: one of ours, or null like every field here (``_null_means_absent``: the default)."""
    schema.pop("type", None)
    schema["anyOf"] = [{"type": "string", "enum": [*AUDIO_FORMATS]}, {"type": "null"}]


class SpeechRequest(BaseModel):
    """One speech request; unknown fields are kept aside in ``ignored_fields`` rather than refused."""

    model_config = ConfigDict(extra="allow")

    input: str = Field(description="Text to speak.", json_schema_extra=speech_text("Text to speak."))
    model: str | None = Field(None, description="Served model id or an OpenAI alias (tts-1, ...).")
    voice: str | dict[str, Any] | None = Field(
        None, description="Voice name (case-insensitive) or {'id': ...}.", json_schema_extra=_VOICE_SCHEMA
    )
    speaker: str | None = Field(None, description="Alias of voice (vLLM-Omni).")
    response_format: str = Field(
        "mp3",
        description="wav, pcm, flac, mp3, opus, aac, ulaw, alaw.",
        json_schema_extra=_format_or_null,
    )
    speed: float | None = Field(
        None, description="0.25 to 4.0.", json_schema_extra={"minimum": MIN_SPEED, "maximum": MAX_SPEED}
    )
    stream: bool | None = Field(None, strict=True, description="Stream; without stream_format this means SSE.")
    stream_format: Literal["audio", "sse"] | None = None
    sample_rate: int | None = Field(
        None,
        description="Output rate, 8000-48000 Hz (pcm default 24000).",
        json_schema_extra={"minimum": MIN_SAMPLE_RATE, "maximum": MAX_SAMPLE_RATE},
    )
    language: str | None = Field(None, json_schema_extra=spoken_language())
    instructions: str | None = Field(
        None, max_length=4096, json_schema_extra=engine_capability("supports_instructions")
    )
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    ref_audio: str | None = Field(
        None,
        description="Reference audio: data URI or base64.",
        json_schema_extra=engine_capability("supports_cloning"),
    )
    ref_text: str | None = Field(None, json_schema_extra=engine_capability("supports_cloning"))
    x_vector_only_mode: bool | None = Field(None, strict=True, json_schema_extra=engine_capability("supports_cloning"))
    speaker_embedding: list[float] | None = Field(None, json_schema_extra=engine_capability("supports_cloning"))
    max_new_tokens: int | None = Field(None, ge=1, le=4096)
    seed: int | None = None
    initial_codec_chunk_frames: int | None = Field(None, ge=0)
    word_timestamps: bool | None = Field(
        None,
        strict=True,
        description="With stream_format sse: speech.audio.words events (word, start_ms, end_ms, char offsets).",
    )

    _integers_not_bools = field_validator(
        "sample_rate", "max_new_tokens", "seed", "initial_codec_chunk_frames", mode="before"
    )(not_bool)

    @model_validator(mode="before")
    @classmethod
    def _null_means_absent(cls, data: Any) -> Any:
        """``"instructions": null`` (RealtimeTTS) or ``"response_format": null`` take the default."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @property
    def ignored_fields(self) -> list[str]:
        """Names the client sent that this server does not use, sorted, each in JSON's escapes (printable ASCII):
        they go into an HTTP header (``X-Ignored-Fields``), which cannot carry other characters, and a log line."""
        return sorted(json.dumps(name)[1:-1] for name in self.model_extra or {})

    def options(self) -> SpeechOptions:
        return SpeechOptions(
            model=self.model,
            voice=voice_name(self.voice) or voice_name(self.speaker),
            response_format=self.response_format,
            speed=self.speed,
            sample_rate=self.sample_rate,
            language=language_name(self.language) if self.language else None,  # "en", "en-US" too
            instructions=self.instructions,
            task_type=self.task_type,
            ref_audio=self.ref_audio,
            ref_text=self.ref_text,
            x_vector_only_mode=self.x_vector_only_mode,
            speaker_embedding=self.speaker_embedding,
            seed=self.seed,
            max_new_tokens=self.max_new_tokens,
            initial_codec_chunk_frames=self.initial_codec_chunk_frames,
        )

    def delivery(self, accept: str = "") -> Literal["file", "audio", "sse"]:
        """How the audio goes back, as OpenAI does it: streamed as it is produced unless asked otherwise.

        ``stream_format`` wins. Without it the audio streams raw (OpenAI's default ``audio``), so
        pipecat's ``response_format: "pcm"`` request hears its first words while the rest is made.
        ``stream: true`` (vLLM-Omni) means SSE only for a client that accepts ``text/event-stream``
        (vLLM-Omni's later API); RealtimeTTS sends it and wants raw ``audio/pcm``. WAV without either
        is sent whole, so its header states real sizes; ``stream_format: "audio"`` streams it with
        unknown sizes.
        """
        if self.stream_format is not None:
            return self.stream_format
        if self.stream and "text/event-stream" in accept.lower():
            return "sse"
        if self.response_format.lower() == "wav" and not self.stream:
            return "file"
        return "audio"
