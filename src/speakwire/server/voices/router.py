"""Routes of the voice library: save a cloned voice once, then use it by name in any request.

    GET    /v1/audio/voices                 built-in voices and saved ones (``uploaded_voices``)
    POST   /v1/audio/voices                 save a voice (multipart, or JSON with base64 audio)
    GET    /v1/audio/voices/{name}          one saved voice
    DELETE /v1/audio/voices/{name}          delete it
    GET    /v1/audio/voices/{name}/export   the voice as one ``.swv`` file
    POST   /v1/audio/voices/import          save a voice from a ``.swv`` file
    POST   /v1/audio/voices/{name}/delete   DELETE for clients that can only POST

SageMaker's ``/invocations`` can only POST, and our ``InvocationsRouter`` hands a
POST to a route's POST handler when it has one. So a POST to ``/v1/audio/voices``
with an empty body (or ``{}``) lists, as a GET would — that is how SageMaker
clients (and our UI) read the catalogue — and deleting has a POST form.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from speakwire.engines.base import Engine, EngineInfo
from speakwire.errors import BadRequestError, NotReadyError, SpeakwireError
from speakwire.scheduler import Scheduler
from speakwire.server.state import ServerState
from speakwire.server.voices.library import VoiceLibrary, cannot_clone_message
from speakwire.server.voices.protocol import error_response, read_archive_upload, read_upload
from speakwire.voices.archive import MEDIA_TYPE, SUFFIX
from speakwire.voices.models import CLONING_ENGINES, SavedVoice

router = APIRouter()

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "audio_sample": {"type": "string", "format": "binary", "description": "1–30 s, ≤ 10 MiB"},
                        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
                        "consent": {"type": "string", "description": "Who recorded it, and that they agreed."},
                        "ref_text": {"type": "string", "description": "Transcript; without it: x-vector only."},
                        "speaker_description": {"type": "string"},
                        "language": {"type": "string"},
                    },
                    "required": ["audio_sample", "name", "consent"],
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "audio_sample": {"type": "string", "description": "data:audio/...;base64,... or base64"},
                        "name": {"type": "string"},
                        "consent": {"type": "string"},
                        "ref_text": {"type": "string"},
                        "speaker_description": {"type": "string"},
                        "language": {"type": "string"},
                    },
                }
            },
        },
    }
}


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.speakwire
    return state


def _library(state: ServerState) -> VoiceLibrary:
    if state.voices is None:
        raise NotReadyError("The voice library is not open yet; retry shortly.")
    return state.voices


def _serving(state: ServerState) -> tuple[Engine | None, Scheduler | None]:
    """The engine and its scheduler once ready; the library works without them (store only)."""
    if state.ready and state.engine is not None and state.pipeline is not None:
        return state.engine, state.pipeline.scheduler
    return None, None


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


async def _catalogue(state: ServerState) -> dict[str, object]:
    engine, _, _ = state.require_ready()
    info = engine.info
    saved = await _library(state).list_voices()
    return {
        "voices": list(info.voices),
        "default_voice": info.default_voice or None,
        "aliases": state.voice_aliases(info),
        "engine": info.name,
        "model": info.model,
        "languages": list(info.languages),
        "supports_cloning": info.supports_cloning,
        "uploaded_voices": [describe(voice, info) for voice in saved],
    }


def _info(state: ServerState) -> EngineInfo | None:
    engine, _ = _serving(state)
    return engine.info if engine is not None else None


@router.get("/v1/audio/voices", summary="Voices: the engine's built-in ones, and saved (uploaded) voices.")
async def list_voices(request: Request) -> dict[str, object]:
    return await _catalogue(_state(request))


@router.post(
    "/v1/audio/voices",
    summary="Save a cloned voice (reference clip + consent), usable by name in every request.",
    response_class=JSONResponse,
    openapi_extra=_UPLOAD_BODY,
)
async def create_voice(request: Request) -> Response:
    state = _state(request)
    try:
        upload = await read_upload(request, allow_remote=state.settings.allow_remote_ref_audio)
        if upload is None:
            return JSONResponse(await _catalogue(state))  # an empty POST lists (SageMaker /invocations)
        engine, scheduler = _serving(state)
        voice = await _library(state).add(
            upload.fields, upload.audio, mime_type=upload.mime_type, engine=engine, scheduler=scheduler
        )
    except HTTPException as exc:  # the multipart parser's own 400s
        return error_response(BadRequestError(str(exc.detail)))
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, _info(state))})


@router.post("/v1/audio/voices/import", summary="Save a voice from a .swv file (multipart 'file', or base64 JSON).")
async def import_voice(request: Request) -> Response:
    state = _state(request)
    try:
        upload = await read_archive_upload(request)
        voice = await _library(state).import_archive(upload.data, name=upload.name)
    except HTTPException as exc:
        return error_response(BadRequestError(str(exc.detail)))
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, _info(state))})


@router.get("/v1/audio/voices/{name}", summary="One saved voice.")
async def get_voice(request: Request, name: str) -> Response:
    state = _state(request)
    try:
        voice = await _library(state).get(name)
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, _info(state))})


@router.get("/v1/audio/voices/{name}/export", summary="Download a saved voice as one .swv file.")
async def export_voice(request: Request, name: str) -> Response:
    try:
        voice, data = await _library(_state(request)).export(name)
    except SpeakwireError as exc:
        return error_response(exc)
    disposition = f'attachment; filename="{voice.name}{SUFFIX}"'  # names are plain ASCII tokens
    return Response(data, media_type=MEDIA_TYPE, headers={"Content-Disposition": disposition})


@router.delete("/v1/audio/voices/{name}", summary="Delete a saved voice.")
async def delete_voice(request: Request, name: str) -> Response:
    try:
        voice = await _library(_state(request)).delete(name)
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "message": f"Voice '{voice.name}' deleted successfully"})


@router.post("/v1/audio/voices/{name}/delete", summary="Delete a saved voice (for clients that can only POST).")
async def delete_voice_by_post(request: Request, name: str) -> Response:
    return await delete_voice(request, name)
