"""The Engine interface: what an engine can do, and one segment of text → float32 PCM chunks.

Engines know nothing of HTTP, WebSockets or encoders. ``synthesize`` is a blocking
generator: the pipeline runs it on a worker thread and pulls chunks one at a time,
so a cancel takes effect between chunks (``SynthesisRequest.cancelled`` lets an
engine stop even sooner, inside a long model call).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from speakwire.audio.chunk import AudioChunk


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What an engine can do; protocols validate requests against it before any work starts."""

    name: str
    """Engine name, e.g. ``piper`` or ``qwen3``."""
    model: str
    """The model id clients put in ``model`` (served model name)."""
    sample_rate: int
    """Native sample rate of the PCM the engine yields."""
    voices: tuple[str, ...]
    """Voices (speakers) the engine has built in; the first is the default."""
    languages: tuple[str, ...] = ("English",)
    """Languages it speaks (Qwen3 names: English, Chinese, ...)."""
    supports_cloning: bool = False
    """Accepts reference audio (+ transcript) to clone a voice."""
    supports_instructions: bool = False
    """Honours a free-text style instruction."""
    supports_speed: bool = True
    task_types: tuple[str, ...] = ()
    """vLLM-Omni task types the loaded model serves (CustomVoice, VoiceDesign, Base); empty for non-Qwen engines."""
    resumable: bool = False
    """``synthesize`` generators may be paused between chunks and resumed on another worker thread
    (lets the scheduler hand a worker to a more urgent stream mid-segment)."""
    needs_text_normalization: bool = True
    """Whether the pipeline should expand numbers, dates, ... before synthesis (English only)."""
    max_concurrent: int | None = None
    """Utterances the engine can generate at once (batched engines: its KV slots); None: no fixed limit."""
    streams_text: bool = False
    """The engine takes an utterance's text while generating it (``open_text_stream``): one generation per
    utterance instead of one per segment."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def default_voice(self) -> str:
        return self.voices[0] if self.voices else ""


@dataclass(slots=True)
class SynthesisRequest:
    """Per-request options for one utterance; the engine validates and keeps what it honours."""

    voice: str | None = None
    language: str | None = None
    speed: float = 1.0
    instructions: str | None = None
    task_type: str | None = None
    ref_audio: Any = None
    """Decoded reference audio (``AudioChunk``) or an engine-specific prepared voice prompt."""
    ref_text: str | None = None
    x_vector_only_mode: bool = False
    seed: int | None = None
    max_new_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    latency_critical: bool = True
    """Set by the pipeline before each segment: True while a listener waits for audio (the first segment,
    or little audio buffered). Engines may then spend extra compute to produce the first samples sooner."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set by the pipeline when the client is gone or cancelled; engines check it between steps."""

    def fresh(self) -> SynthesisRequest:
        """A copy for a new utterance: its own cancel event and its own ``extra`` (engines write to it)."""
        return dataclasses.replace(self, cancelled=threading.Event(), extra=dict(self.extra))


@runtime_checkable
class Engine(Protocol):
    """A loaded speech model."""

    @property
    def info(self) -> EngineInfo: ...

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        """Check options against the model; raise ``BadRequestError``/``NotFoundError`` saying why.

        Returns the request with defaults filled in (e.g. the canonical voice name).
        Runs on the event loop: must be cheap.
        """
        ...

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Per-utterance heavy preparation (e.g. encode a clone prompt); blocking, runs on a worker."""
        ...

    def synthesize(self, text: str, request: SynthesisRequest) -> Iterator[AudioChunk]:
        """Synthesize one segment; blocking generator yielding chunks as they are ready."""
        ...

    def close(self) -> None: ...


class TextStream(Protocol):
    """One utterance whose text is still arriving (engines with ``EngineInfo.streams_text``)."""

    @property
    def text(self) -> str:
        """The text received so far."""
        ...

    def feed(self, text: str) -> None: ...

    def finish(self) -> None: ...

    def cancel(self) -> None: ...

    def chunks(self) -> Iterator[tuple[AudioChunk, int]]:
        """Audio as it is made, each with the characters of the text the model had read by then."""
        ...


@runtime_checkable
class TextStreamingEngine(Engine, Protocol):
    """An engine that takes an utterance's text while generating it: one generation per utterance."""

    def open_text_stream(self, request: SynthesisRequest) -> TextStream:
        """Start an utterance for a validated, prepared ``request``; feed it text, then ``finish``."""
        ...
