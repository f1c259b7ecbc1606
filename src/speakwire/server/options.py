"""Turn protocol fields (HTTP body, WebSocket session.config, SageMaker payload) into a SynthesisRequest.

One place decides model and voice aliases, output format and rate, and what the
serving engine can honour, so every protocol answers the same request the same way.

A ``voice`` that names a saved voice (``speakwire.voices``) becomes a cloning
request here — its stored clone prompt (or audio), transcript and mode, task
``Base`` — so HTTP, WebSocket and SageMaker clients use saved voices by name alike.
Built-in speakers keep their names: a saved voice is only looked up for a name the
engine does not have, and it wins over the OpenAI voice aliases. ``task_type: "Base"`` with
any other named voice and no reference speaks that voice on an engine that cannot clone
(Baseten's convention: ``_task_type``).

A request without a ``seed`` gets the server's ``--seed`` (``Settings.default_seed``) here, so
every protocol's replies are in the same voice; a request's own seed still wins.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from speakwire.encoders.registry import AUDIO_FORMATS, default_sample_rate
from speakwire.engines.base import Engine, SynthesisRequest
from speakwire.errors import BadRequestError, LibraryUnavailableError, NotFoundError
from speakwire.server.state import ServerState
from speakwire.voice_presets import is_preset_voice
from speakwire.voices.models import SavedVoice

MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8000, 48000
MIN_SPEED, MAX_SPEED = 0.25, 4.0


@dataclass(frozen=True, slots=True)
class SpeechOptions:
    """Protocol-independent speech fields, as clients send them."""

    model: str | None = None
    voice: str | None = None
    response_format: str = "mp3"
    speed: float | None = None
    sample_rate: int | None = None
    language: str | None = None
    instructions: str | None = None
    task_type: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    initial_codec_chunk_frames: int | None = None


@dataclass(frozen=True, slots=True)
class ResolvedSpeech:
    request: SynthesisRequest
    response_format: str
    output_rate: int
    ignored_fields: tuple[str, ...] = ()
    """Fields the client sent that the serving engine ignores; the protocol names them to the client."""


def voice_name(value: Any) -> str | None:
    """``voice`` may be a string or ``{"id": "..."}`` (OpenAI's newer shape)."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id") or value.get("name")
    if not isinstance(value, str):
        raise BadRequestError("'voice' must be a string or an object with an 'id'.", param="voice")
    return value.strip() or None


def check_model(state: ServerState, engine: Engine, model: str | None) -> None:
    if model is None or model == "":
        return
    served = state.served_models(engine.info)
    aliases = state.model_aliases()
    if model in served or model in aliases or model.lower() in (m.lower() for m in served):
        return
    raise NotFoundError(
        f"The model `{model}` does not exist. Available models: {', '.join([*served, *aliases])}.", param="model"
    )


def _resolve_voice(state: ServerState, engine: Engine, voice: str | None) -> str | None:
    """Map the names stock clients send by default (``speakwire.voice_presets``: OpenAI's voices, Qwen3's
    speakers, ElevenLabs', Cartesia's and Deepgram's ids) to the default voice, unless the engine has a voice
    of that name; on models without speakers (Qwen3 Base, VoiceDesign) they mean "the default" too, so drop-in
    clients that always send a voice keep working. Any other name goes to the engine, which refuses it."""
    if voice is None:
        return None
    aliases = state.voice_aliases(engine.info)
    if voice.lower() in aliases:
        return aliases[voice.lower()]
    # Listed presets are in the aliases already; this catches an engine without voices, and the Aura voices
    # no table lists (any ``aura-…-xx`` name).
    own = (name.lower() for name in engine.info.voices)
    if state.settings.preset_voice_aliases and is_preset_voice(voice) and voice.lower() not in own:
        return None
    return voice


async def resolve_speech(state: ServerState, engine: Engine, options: SpeechOptions) -> ResolvedSpeech:
    """Validate everything before any synthesis starts; raise a 4xx error saying what to change."""
    check_model(state, engine, options.model)
    fmt = (options.response_format or "mp3").lower()
    if fmt not in AUDIO_FORMATS:
        raise BadRequestError(
            f"Unsupported response_format '{options.response_format}'. Supported: {', '.join(AUDIO_FORMATS)}.",
            param="response_format",
        )
    if options.sample_rate is not None and not MIN_SAMPLE_RATE <= options.sample_rate <= MAX_SAMPLE_RATE:
        raise BadRequestError(
            f"sample_rate must be between {MIN_SAMPLE_RATE} and {MAX_SAMPLE_RATE} Hz, got {options.sample_rate}.",
            param="sample_rate",
        )
    speed = 1.0 if options.speed is None else float(options.speed)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise BadRequestError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}.", param="speed")
    if options.speaker_embedding is not None:
        raise BadRequestError(
            "speaker_embedding is not supported; send ref_audio (and ref_text) or use a saved voice.",
            param="speaker_embedding",
        )
    saved = await _saved_voice(state, engine, options)
    request = SynthesisRequest(
        voice=None if saved else _resolve_voice(state, engine, options.voice),
        language=options.language or (saved.language if saved else None),
        speed=speed,
        instructions=options.instructions or None,
        task_type=_task_type(engine, options, saved),
        ref_text=saved.ref_text if saved else options.ref_text,
        x_vector_only_mode=saved.x_vector_only_mode if saved else bool(options.x_vector_only_mode),
        seed=state.settings.default_seed if options.seed is None else options.seed,
        max_new_tokens=options.max_new_tokens,
        initial_codec_chunk_frames=options.initial_codec_chunk_frames,
    )
    if saved is not None and state.voices is not None:
        _, pipeline, _ = state.require_ready()
        request = replace(request, ref_audio=await state.voices.clone_reference(saved, engine, pipeline.scheduler))
    elif options.ref_audio:
        request = replace(request, ref_audio=await _decode_reference(state, engine, options.ref_audio))
    request = engine.validate(request)
    output_rate = default_sample_rate(fmt, options.sample_rate, engine.info.sample_rate)
    return ResolvedSpeech(request, fmt, output_rate, _ignored_by_engine(engine, options))


def _task_type(engine: Engine, options: SpeechOptions, saved: SavedVoice | None) -> str | None:
    """The request's task: a saved voice is cloned (``Base``). ``Base`` with a named voice and no reference means
    "speak with that voice" on an engine that cannot clone: LiveKit's Baseten plugin sends ``task_type: "Base"``
    and a voice name by default, and on Baseten the name is a registered clone. Cloning is refused (by the
    engine) only where a reference is actually sent, or no voice is named."""
    if saved is not None:
        return options.task_type or "Base"
    asks_base = options.task_type is not None and options.task_type.strip().lower() == "base"
    reference = options.ref_audio or options.ref_text or options.x_vector_only_mode
    if asks_base and options.voice and not reference and not engine.info.supports_cloning:
        return None
    return options.task_type


def _ignored_by_engine(engine: Engine, options: SpeechOptions) -> tuple[str, ...]:
    """Fields the protocol accepts that the serving engine does not act on (``X-Ignored-Fields``, the WebSocket's
    ``warning``): a first-chunk size means nothing to an engine that does not decode codec frames (Piper)."""
    if options.initial_codec_chunk_frames is not None and not engine.info.supports_first_chunk_frames:
        return ("initial_codec_chunk_frames",)
    return ()


async def _saved_voice(state: ServerState, engine: Engine, options: SpeechOptions) -> SavedVoice | None:
    """The saved voice ``voice`` names, unless it names a built-in speaker (those win) or nothing saved."""
    name = options.voice
    if name is None or state.voices is None or name.lower() in (v.lower() for v in engine.info.voices):
        return None
    try:
        saved = await state.voices.find(name)
    except LibraryUnavailableError:
        # The shared library is down: a name stock clients send by default (``alloy``) still speaks as before;
        # any other name might be a saved voice, so the client gets the 503 with the reason, not a wrong 404.
        if _resolve_voice(state, engine, name) != name:
            return None
        raise
    if saved is None:
        return None
    sent = [field for field, value in (("ref_audio", options.ref_audio), ("ref_text", options.ref_text)) if value]
    if options.x_vector_only_mode and not saved.x_vector_only_mode:
        sent.append("x_vector_only_mode")
    if sent:
        raise BadRequestError(
            f"Voice '{saved.name}' is a saved voice with its own reference audio and transcript; do not send "
            f"{', '.join(sent)} with it (or omit 'voice' to clone from ref_audio instead).",
            param=sent[0],
        )
    return saved


async def _decode_reference(state: ServerState, engine: Engine, value: str) -> Any:
    if not engine.info.supports_cloning:
        raise BadRequestError(
            f"The {engine.info.name} engine ({engine.info.model}) cannot clone voices from ref_audio. "
            "Serve a Qwen3-TTS Base model (--engine qwen3 --model Qwen/Qwen3-TTS-12Hz-1.7B-Base).",
            param="ref_audio",
        )
    from speakwire.audio.decode import decode_reference_audio, parse_audio_reference

    allow_remote = state.settings.allow_remote_ref_audio
    data = await asyncio.to_thread(parse_audio_reference, value, allow_remote=allow_remote)
    return await asyncio.to_thread(decode_reference_audio, data)
