"""Request schema of ``POST /v1/audio/speech`` (OpenAI fields plus vLLM-Omni's Qwen3 fields)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from speakwire.server.options import SpeechOptions, voice_name


class SpeechRequest(BaseModel):
    """Unknown fields are refused (400) rather than silently ignored, as OpenAI does."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(description="Text to speak.")
    model: str | None = Field(None, description="Served model id or an OpenAI alias (tts-1, ...).")
    voice: str | dict[str, Any] | None = Field(None, description="Voice name (case-insensitive) or {'id': ...}.")
    speaker: str | None = Field(None, description="Alias of voice (vLLM-Omni).")
    response_format: str = Field("mp3", description="wav, pcm, flac, mp3, opus, aac, ulaw, alaw.")
    speed: float | None = Field(None, description="0.25 to 4.0.")
    stream: bool | None = Field(None, description="Stream; without stream_format this means SSE.")
    stream_format: Literal["audio", "sse"] | None = None
    sample_rate: int | None = Field(None, description="Output rate, 8000-48000 Hz (pcm default 24000).")
    language: str | None = None
    instructions: str | None = Field(None, max_length=4096)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    ref_audio: str | None = Field(None, description="Reference audio: data URI or base64.")
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=4096)
    seed: int | None = None
    initial_codec_chunk_frames: int | None = Field(None, ge=0)

    def options(self) -> SpeechOptions:
        return SpeechOptions(
            model=self.model,
            voice=voice_name(self.voice) or voice_name(self.speaker),
            response_format=self.response_format,
            speed=self.speed,
            sample_rate=self.sample_rate,
            language=self.language,
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

    def delivery(self) -> Literal["file", "audio", "sse"]:
        """How the audio goes back: ``stream_format`` wins; ``stream: true`` alone means SSE."""
        if self.stream_format is not None:
            return self.stream_format
        return "sse" if self.stream else "file"
