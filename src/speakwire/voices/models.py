"""SavedVoice: one voice of the library as it is stored and as clients see it.

A saved voice is immutable: its reference audio, transcript and consent never
change after the upload (delete and re-add to change them), so a clone prompt
computed from it stays right for as long as the voice exists, and only the list
of models that have a prompt cached grows.
"""

from __future__ import annotations

from dataclasses import dataclass

CLONING_ENGINES = ("qwen3",)
"""Engines that can speak with a saved voice (Qwen3-TTS *Base* checkpoints clone from reference audio)."""


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """A clone prompt computed from the voice for one model and kept next to its audio."""

    engine: str
    model: str
    """The engine's model id (hub id or directory) the prompt was computed by — and is only valid for."""
    key: str
    """``prompts.model_key(engine, model)``: also the prompt file's name."""
    created_at: float


@dataclass(frozen=True, slots=True)
class SavedVoice:
    """A voice in the library: metadata row plus the files in its directory."""

    id: str
    """Random hex id; the name of the voice's directory (names never become paths)."""
    name: str
    """As the uploader spelled it; unique case-insensitively."""
    consent: str
    """Who recorded the reference and that they agreed to its cloning, in the uploader's words."""
    created_at: float
    duration_s: float
    """Length of the normalised 24 kHz reference audio."""
    ref_text: str | None
    """Transcript of the reference; None makes the voice x-vector only (speaker embedding, no in-context audio)."""
    speaker_description: str | None
    language: str | None
    """Default language of requests that use the voice and name none."""
    file_size: int
    """Bytes of the audio file as uploaded (before normalisation)."""
    mime_type: str
    """Media type of the upload as the client labelled it."""
    audio_sha256: str
    """SHA-256 of the stored (normalised FLAC) audio file."""
    prompts: tuple[PromptRecord, ...] = ()

    @property
    def x_vector_only_mode(self) -> bool:
        return self.ref_text is None

    def prompt_for(self, key: str) -> PromptRecord | None:
        return next((p for p in self.prompts if p.key == key), None)

    def describe(self) -> dict[str, object]:
        """The vLLM-Omni ``uploaded_voices`` entry (``created_at`` in epoch seconds), plus our own fields."""
        return {
            "name": self.name,
            "consent": self.consent,
            "created_at": int(self.created_at),
            "duration": round(self.duration_s, 3),
            "ref_text": self.ref_text,
            "speaker_description": self.speaker_description,
            "language": self.language,
            "file_size": self.file_size,
            "mime_type": self.mime_type,
            "embedding_source": "audio",
            "x_vector_only_mode": self.x_vector_only_mode,
        }
