"""What a Qwen3-TTS request may ask of the loaded model, with vLLM-Omni's semantics.

One server serves one checkpoint, and each checkpoint does one task:
``Base`` clones the voice in ``ref_audio`` (+ its transcript ``ref_text`` unless
``x_vector_only_mode``), ``CustomVoice`` speaks with a built-in speaker (``voice``,
case-insensitive, default the first) and — the 1.7B only — follows
``instructions``, ``VoiceDesign`` invents a voice from ``instructions``. A request
that omits ``task_type`` gets the model's. A field that belongs to another task
is an error rather than silently ignored, so a client learns at once that the
server loaded a different model than it assumed; every message says what to do
instead and lists the valid values. Names come back canonical (``"vivian"`` →
``"Vivian"``, ``"english"`` → ``"English"``).

Pure Python on purpose: it runs on the event loop and is tested without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import SynthesisRequest
from speakwire.errors import BadRequestError, NotFoundError

TASK_TYPES = ("Base", "CustomVoice", "VoiceDesign")
TASK_BY_VARIANT = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}
"""``config.json`` ``tts_model_type`` → vLLM-Omni ``task_type``."""

MAX_NEW_TOKENS = 4096
"""vLLM-Omni's upper bound on ``max_new_tokens`` (frames; 4096 ≈ 5.5 min)."""

REF_AUDIO_MIN_S = 1.0
REF_AUDIO_MAX_S = 30.0

_CHECKPOINT = {
    "Base": "a Qwen3-TTS-12Hz-*-Base checkpoint",
    "CustomVoice": "a Qwen3-TTS-12Hz-*-CustomVoice checkpoint",
    "VoiceDesign": "the Qwen3-TTS-12Hz-1.7B-VoiceDesign checkpoint",
}
_WHAT_IT_NEEDS = {
    "Base": "send 'ref_audio' (+ 'ref_text') to clone a voice",
    "CustomVoice": "pick a built-in 'voice'",
    "VoiceDesign": "describe the voice in 'instructions'",
}


@dataclass(frozen=True, slots=True)
class Qwen3ModelFacts:
    """What the loaded checkpoint can do (read from its config at load time)."""

    model: str
    task_type: str
    speakers: tuple[str, ...] = ()
    """Canonical built-in speaker names, default first (CustomVoice only)."""
    languages: tuple[str, ...] = ("Auto",)
    """Canonical language names, ``Auto`` first."""
    honours_instructions: bool = False


def validate_request(request: SynthesisRequest, facts: Qwen3ModelFacts) -> SynthesisRequest:
    """Check ``request`` against the model; return a canonical copy (task type, language, voice filled in).

    Raises:
        BadRequestError: A field the model cannot honour, a missing required field,
            or an unknown task type or language.
        NotFoundError: An unknown CustomVoice speaker.
    """
    request = replace(
        request,
        task_type=_task_type(request.task_type, facts),
        language=_language(request.language, facts),
        voice=request.voice if request.voice is None or request.voice.strip() else None,
        instructions=request.instructions if request.instructions is None or request.instructions.strip() else None,
    )
    if request.initial_codec_chunk_frames is not None and request.initial_codec_chunk_frames < 0:
        raise BadRequestError("initial_codec_chunk_frames must be 0 or more", param="initial_codec_chunk_frames")
    if request.max_new_tokens is not None and not 1 <= request.max_new_tokens <= MAX_NEW_TOKENS:
        raise BadRequestError(
            f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS} (codec frames, 12.5 per second)",
            param="max_new_tokens",
        )
    if request.task_type == "Base":
        request = _validate_base(request, facts)
    else:
        _refuse_cloning_fields(request, facts)
        if request.task_type == "CustomVoice":
            request = replace(request, voice=_validate_custom_voice(request, facts))
        else:
            _validate_voice_design(request)
    return request


def _task_type(value: str | None, facts: Qwen3ModelFacts) -> str:
    if value is None or not value.strip():
        return facts.task_type
    canonical = {name.lower(): name for name in TASK_TYPES}.get(value.strip().lower())
    if canonical is None:
        raise BadRequestError(
            f"Unknown task_type {value!r}; valid values: {', '.join(TASK_TYPES)} "
            f"(this server's model serves {facts.task_type!r})",
            param="task_type",
        )
    if canonical != facts.task_type:
        raise BadRequestError(
            f"This server's model ({facts.model}) serves task_type {facts.task_type!r} only, "
            f"not {canonical!r}: "
            f"{_WHAT_IT_NEEDS[facts.task_type]}, or omit task_type. {canonical} needs a server running "
            f"{_CHECKPOINT[canonical]}.",
            param="task_type",
        )
    return canonical


def _language(value: str | None, facts: Qwen3ModelFacts) -> str:
    if value is None or not value.strip():
        return "Auto"
    canonical = {name.lower(): name for name in facts.languages}.get(value.strip().lower())
    if canonical is None:
        raise BadRequestError(
            f"Unsupported language {value!r}; use one of: {', '.join(facts.languages)}",
            param="language",
        )
    return canonical


def _refuse_cloning_fields(request: SynthesisRequest, facts: Qwen3ModelFacts) -> None:
    sent = [
        name
        for name, present in (
            ("ref_audio", request.ref_audio is not None),
            ("ref_text", bool(request.ref_text)),
            ("x_vector_only_mode", request.x_vector_only_mode),
        )
        if present
    ]
    if sent:
        raise BadRequestError(
            f"{', '.join(sent)} {'is' if len(sent) == 1 else 'are'} for voice cloning (task_type 'Base'), "
            f"which this {facts.task_type} model ({facts.model}) does not do: remove "
            f"{'it' if len(sent) == 1 else 'them'} and {_WHAT_IT_NEEDS[facts.task_type]}, "
            f"or use a server running {_CHECKPOINT['Base']}.",
            param=sent[0],
        )


def _validate_custom_voice(request: SynthesisRequest, facts: Qwen3ModelFacts) -> str | None:
    """The canonical speaker (the default one when none is named)."""
    if request.voice is None:
        voice = facts.speakers[0] if facts.speakers else None
    else:
        canonical = {name.lower(): name for name in facts.speakers}.get(request.voice.strip().lower())
        if canonical is None:
            raise NotFoundError(
                f"Unknown voice {request.voice!r} for {facts.model}; available voices: {', '.join(facts.speakers)}",
                param="voice",
            )
        voice = canonical
    if request.instructions is not None and not facts.honours_instructions:
        raise BadRequestError(
            f"This model ({facts.model}) ignores instructions (only the 1.7B CustomVoice follows them): "
            "remove 'instructions', or use a server running Qwen3-TTS-12Hz-1.7B-CustomVoice.",
            param="instructions",
        )
    return voice


def _validate_voice_design(request: SynthesisRequest) -> None:
    if request.voice is not None:
        raise BadRequestError(
            f"VoiceDesign has no built-in voices (got voice {request.voice!r}): omit 'voice' and describe "
            "the voice in 'instructions', e.g. 'a warm, low-pitched female voice, speaking slowly'.",
            param="voice",
        )
    if request.instructions is None:
        raise BadRequestError(
            "VoiceDesign needs 'instructions' describing the voice, e.g. "
            "'a warm, low-pitched female voice, speaking slowly'.",
            param="instructions",
        )


def _validate_base(request: SynthesisRequest, facts: Qwen3ModelFacts) -> SynthesisRequest:
    """The request with its transcript trimmed (None when blank)."""
    if request.voice is not None:
        raise BadRequestError(
            f"This Base model ({facts.model}) has no built-in voices (got voice {request.voice!r}): "
            "it clones the voice in 'ref_audio'. Omit 'voice', or use a server running "
            f"{_CHECKPOINT['CustomVoice']} for built-in voices.",
            param="voice",
        )
    if request.instructions is not None:
        raise BadRequestError(
            "Base ignores instructions (the reference audio sets voice and style): remove 'instructions', "
            f"or use a server running {_CHECKPOINT['VoiceDesign']}.",
            param="instructions",
        )
    audio = request.ref_audio
    if audio is None:
        raise BadRequestError(
            "Base (voice cloning) needs 'ref_audio': a 1–30 s clip of the voice to clone, e.g. "
            "data:audio/wav;base64,... (WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM)",
            param="ref_audio",
        )
    if hasattr(audio, "ref_spk_embedding"):
        return request  # an already prepared clone prompt carries its own transcript and mode
    if not isinstance(audio, AudioChunk):
        raise BadRequestError(
            f"ref_audio must be decoded audio (speakwire.audio.decode), got {type(audio).__name__}",
            param="ref_audio",
        )
    if not REF_AUDIO_MIN_S <= audio.duration_s <= REF_AUDIO_MAX_S:
        raise BadRequestError(
            f"ref_audio is {audio.duration_s:.2f} s long; it must be between {REF_AUDIO_MIN_S:g} and "
            f"{REF_AUDIO_MAX_S:g} s.",
            param="ref_audio",
        )
    request = replace(request, ref_text=request.ref_text.strip() if request.ref_text else None)
    if not request.x_vector_only_mode and not request.ref_text:
        raise BadRequestError(
            "Base needs 'ref_text', the transcript of ref_audio, to clone in context; or set "
            "x_vector_only_mode=true to clone from the speaker embedding alone (no transcript needed, "
            "less similar).",
            param="ref_text",
        )
    return request
