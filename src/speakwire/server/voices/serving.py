"""The voice library's answers, written once for every way a client asks for them.

The HTTP routes (``router``: ``GET``/``POST /v1/audio/voices``) and the speech stream's ``voice.list`` /
``voice.add`` (Baseten's conventions on the vLLM-Omni WebSocket, ``server.stream``) both list and save voices
here, so a voice saved one way is the same voice, checked by the same rules, described the same way, the other.
Each caller reads its own wire shape into ``VoiceFields`` + audio bytes and writes the answer in its own.
"""

from __future__ import annotations

from speakwire.engines.base import Engine, EngineInfo
from speakwire.errors import NotReadyError
from speakwire.scheduler import Scheduler
from speakwire.server.state import ServerState
from speakwire.server.voices.library import VoiceLibrary, cannot_clone_message
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import CLONING_ENGINES, SavedVoice


def voice_library(state: ServerState) -> VoiceLibrary:
    """The open library.

    Raises:
        NotReadyError: The server is still opening it.
    """
    if state.voices is None:
        raise NotReadyError("The voice library is not open yet; retry shortly.")
    return state.voices


def serving_engine(state: ServerState) -> tuple[Engine | None, Scheduler | None]:
    """The engine and its scheduler once ready; the library works without them (store only)."""
    if state.ready and state.engine is not None and state.pipeline is not None:
        return state.engine, state.pipeline.scheduler
    return None, None


def serving_info(state: ServerState) -> EngineInfo | None:
    engine, _ = serving_engine(state)
    return engine.info if engine is not None else None


def describe(voice: SavedVoice, info: EngineInfo | None) -> dict[str, object]:
    """A saved voice for clients, with which engines can speak it and the models that cached a prompt."""
    body = voice.describe()
    compatibility: dict[str, object] = {
        "engines": list(CLONING_ENGINES),
        "prompts": [{"engine": p.engine, "model": p.model, "created_at": int(p.created_at)} for p in voice.prompts],
    }
    if info is not None:
        compatibility["usable_here"] = info.supports_cloning
        compatibility["prompt_cached_here"] = any((p.engine, p.model) == (info.name, info.model) for p in voice.prompts)
        if not info.supports_cloning:
            compatibility["reason"] = cannot_clone_message(voice.name, info)
    body["compatibility"] = compatibility
    return body


async def catalogue(state: ServerState) -> dict[str, object]:
    """Built-in ``voices`` (with the default and aliases) and saved ``uploaded_voices``, as vLLM-Omni lists them.

    Raises:
        NotReadyError: No engine yet, or the library is not open.
    """
    engine, _, _ = state.require_ready()
    info = engine.info
    saved = await voice_library(state).list_voices()
    return {
        "voices": list(info.voices),
        "default_voice": info.default_voice or None,
        "aliases": dict(state.voice_aliases(info)),
        "engine": info.name,
        "model": info.model,
        "languages": list(info.languages),
        "supports_cloning": info.supports_cloning,
        "uploaded_voices": [describe(voice, info) for voice in saved],
    }


async def save_voice(
    state: ServerState, fields: VoiceFields, audio: bytes, *, mime_type: str | None, audio_param: str = "audio_sample"
) -> SavedVoice:
    """Save a new voice: the library normalises the clip (1–30 s of decodable audio), refuses a taken name, and
    with a ready cloning engine computes its prompt first (``VoiceLibrary.add``).

    Args:
        state: The server's state.
        fields: The voice's checked metadata (``voice_fields``).
        audio: The reference clip as sent, in any accepted format.
        mime_type: The client's label for it, if any.
        audio_param: The clip's field in the client's protocol, named by an error about the audio.

    Raises:
        SpeakwireError: What the client must change (bad or too long audio, a taken name), or not ready.
    """
    engine, scheduler = serving_engine(state)
    return await voice_library(state).add(
        fields, audio, mime_type=mime_type, engine=engine, scheduler=scheduler, audio_param=audio_param
    )
