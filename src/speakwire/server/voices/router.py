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

from speakwire.errors import BadRequestError, SpeakwireError
from speakwire.languages import names_pattern
from speakwire.server.state import ServerState
from speakwire.server.voices.protocol import error_response, read_archive_upload, read_upload
from speakwire.server.voices.serving import catalogue, describe, save_voice, serving_info, voice_library
from speakwire.voices.archive import MEDIA_TYPE, SUFFIX
from speakwire.voices.fields import LANGUAGES, MAX_CONSENT_CHARS, MAX_DESCRIPTION_CHARS, MAX_REF_TEXT_CHARS
from speakwire.voices.names import NAME_PATTERN

router = APIRouter()

_FIELDS: dict[str, dict[str, object]] = {
    "name": {"type": "string", "pattern": NAME_PATTERN},
    "consent": {
        "type": "string", "minLength": 1, "maxLength": MAX_CONSENT_CHARS, "pattern": r"\S",
        "description": "Who recorded it, and that they agreed.",
    },
    "ref_text": {
        "type": "string", "maxLength": MAX_REF_TEXT_CHARS, "description": "Transcript; without it: x-vector only.",
    },
    "speaker_description": {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS},
    "language": {"type": "string", "pattern": names_pattern(LANGUAGES), "description": ", ".join(LANGUAGES)},
}  # fmt: skip
"""The voice's metadata as ``voices.fields`` checks it (the reference audio must also decode: no schema says so)."""
_REQUIRED = ["audio_sample", "name", "consent"]
_UPLOAD_BODY = {
    "requestBody": {
        "required": False,
        "description": "The voice to save. An empty POST lists the voices instead (SageMaker's /invocations routes "
        "an empty body here).",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "audio_sample": {"type": "string", "format": "binary", "description": "1–30 s, ≤ 10 MiB"},
                        **_FIELDS,
                    },
                    "required": _REQUIRED,
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "audio_sample": {"type": "string", "description": "data:audio/...;base64,... or base64"},
                        **_FIELDS,
                    },
                    "required": _REQUIRED,
                }
            },
        },
    }
}


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.speakwire
    return state


@router.get("/v1/audio/voices", summary="Voices: the engine's built-in ones, and saved (uploaded) voices.")
async def list_voices(request: Request) -> dict[str, object]:
    return await catalogue(_state(request))


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
            return JSONResponse(await catalogue(state))  # an empty POST lists (SageMaker /invocations)
        voice = await save_voice(state, upload.fields, upload.audio, mime_type=upload.mime_type)
    except HTTPException as exc:  # the multipart parser's own 400s
        return error_response(BadRequestError(str(exc.detail)))
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, serving_info(state))})


@router.post("/v1/audio/voices/import", summary="Save a voice from a .swv file (multipart 'file', or base64 JSON).")
async def import_voice(request: Request) -> Response:
    state = _state(request)
    try:
        upload = await read_archive_upload(request)
        voice = await voice_library(state).import_archive(upload.data, name=upload.name)
    except HTTPException as exc:
        return error_response(BadRequestError(str(exc.detail)))
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, serving_info(state))})


@router.get("/v1/audio/voices/{name}", summary="One saved voice.")
async def get_voice(request: Request, name: str) -> Response:
    state = _state(request)
    try:
        voice = await voice_library(state).get(name)
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "voice": describe(voice, serving_info(state))})


@router.get("/v1/audio/voices/{name}/export", summary="Download a saved voice as one .swv file.")
async def export_voice(request: Request, name: str) -> Response:
    try:
        voice, data = await voice_library(_state(request)).export(name)
    except SpeakwireError as exc:
        return error_response(exc)
    disposition = f'attachment; filename="{voice.name}{SUFFIX}"'  # names are plain ASCII tokens
    return Response(data, media_type=MEDIA_TYPE, headers={"Content-Disposition": disposition})


@router.delete("/v1/audio/voices/{name}", summary="Delete a saved voice.")
async def delete_voice(request: Request, name: str) -> Response:
    try:
        voice = await voice_library(_state(request)).delete(name)
    except SpeakwireError as exc:
        return error_response(exc)
    return JSONResponse({"success": True, "message": f"Voice '{voice.name}' deleted successfully"})


@router.post("/v1/audio/voices/{name}/delete", summary="Delete a saved voice (for clients that can only POST).")
async def delete_voice_by_post(request: Request, name: str) -> Response:
    return await delete_voice(request, name)
