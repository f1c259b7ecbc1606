"""The Engine interface: what an engine can do, and one segment of text → float32 PCM chunks.

Engines know nothing of HTTP, WebSockets or encoders. ``synthesize`` is a blocking
generator: the pipeline runs it on a worker thread and pulls chunks one at a time,
so a cancel takes effect between chunks (``SynthesisRun.cancelled`` lets an
engine stop even sooner, inside a long model call).

Three objects cross the seam: ``SynthesisRequest``, the client's options (frozen); ``SynthesisRun``, one
utterance's run state (its cancel event, the per-segment latency-critical flag); and its ``SynthesisResult``,
what the engine reports back (``capped``), which the pipeline turns into usage.
"""

from __future__ import annotations

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
    supports_first_chunk_frames: bool = False
    """Decodes codec frames in chunks and honours ``SynthesisRequest.initial_codec_chunk_frames`` (Qwen3)."""
    streams_text: bool = False
    """The engine takes an utterance's text while generating it (``open_text_stream``): one generation per
    utterance instead of one per segment."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def default_voice(self) -> str:
        return self.voices[0] if self.voices else ""


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """What the client asked for one utterance: options only, frozen.

    ``Engine.validate`` returns a copy with defaults filled in (``dataclasses.replace``), ``Engine.prepare`` one
    with its heavy per-voice work attached (``extra``); what happens while the utterance runs lives in its
    ``SynthesisRun``.
    """

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
    initial_codec_chunk_frames: int | None = None
    """Codec frames in the utterance's first decoded chunk (vLLM-Omni's field; engines with
    ``EngineInfo.supports_first_chunk_frames``); None or 0: the engine's own schedule."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Engine-specific prepared items (Qwen3's ``voice_clone_prompt``) and test knobs; never results."""


@dataclass(slots=True)
class SynthesisResult:
    """What an engine reports about an utterance besides its audio; the pipeline copies it into ``Usage``."""

    capped: bool = False
    """Generation hit its runaway budget and was cut before the model ended it (Qwen3's frame budget)."""


@dataclass(slots=True)
class SynthesisRun:
    """One utterance's run state, shared by the pipeline (which steers it) and the engine (which reports)."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set by the pipeline when the client is gone or cancelled; engines check it between steps."""
    latency_critical: bool = True
    """Set by the pipeline before each segment: True while a listener waits for audio (the first segment,
    or little audio buffered). Engines may then spend extra compute to produce the first samples sooner."""
    result: SynthesisResult = field(default_factory=SynthesisResult)
    """Written by the engine (any of its threads), read by the pipeline after each segment and at the end."""


@runtime_checkable
class Engine(Protocol):
    """A loaded speech model."""

    @property
    def info(self) -> EngineInfo: ...

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        """Check options against the model; raise ``BadRequestError``/``NotFoundError`` saying why.

        Returns a copy with defaults filled in (e.g. the canonical voice name).
        Runs on the event loop: must be cheap.
        """
        ...

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Per-utterance heavy preparation (e.g. encode a clone prompt); blocking, runs on a worker."""
        ...

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> Iterator[AudioChunk]:
        """Synthesize one segment; blocking generator yielding chunks as they are ready.

        ``run``: the utterance's run state (cancel, latency-critical, results); None: one of its own.
        """
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

    def open_text_stream(self, request: SynthesisRequest, run: SynthesisRun | None = None) -> TextStream:
        """Start an utterance for a validated, prepared ``request``; feed it text, then ``finish``."""
        ...


@runtime_checkable
class MonitoredEngine(Engine, Protocol):
    """An engine that reports its own health and counters (Qwen3's generation loop); checked once, at load."""

    @property
    def health_error(self) -> str | None:
        """Why the engine can no longer serve (e.g. repeated failed steps), or None; /ready and /ping say 503."""
        ...

    def engine_metrics(self) -> dict[str, float]:
        """Counters for /metrics (slots, steps, batch, code2wav), each exported as ``speakwire_engine_<name>``."""
        ...
