"""The voice API's wire shapes: what uploads and imports may send, and how answers and errors look.

Uploads come as ``multipart/form-data`` (the audio as a file part) or as JSON
with the audio inline (a ``data:`` URI or plain base64) — the latter for clients
that can only send JSON, such as SageMaker's ``/invocations``. Every field is
named in an error when it is wrong, and unknown fields are refused rather than
ignored: a ``transcript`` sent instead of ``ref_text`` would otherwise silently
make an x-vector-only voice.

Answers follow vLLM-Omni: ``{"success": true, "voice": {...}}`` and
``{"success": false, "error": "Voice 'x' not found"}``. Its ``error`` is a string
where our other routes have OpenAI's ``{"error": {"message", ...}}`` object; one
key cannot be both, so voice-library errors keep vLLM-Omni's shape (the clients
of these routes are vLLM-Omni clients) and carry OpenAI's ``message``, ``type``,
``param`` and ``code`` beside it, at the top level.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message

from speakwire.audio.decode import parse_audio_reference
from speakwire.errors import BadRequestError, PayloadTooLargeError, SpeakwireError
from speakwire.server.json_message import parse_json
from speakwire.voices.archive import MAX_ARCHIVE_BYTES
from speakwire.voices.audio import MAX_AUDIO_BYTES
from speakwire.voices.fields import VoiceFields, voice_fields

UPLOAD_FIELDS = ("audio_sample", "name", "consent", "ref_text", "speaker_description", "language")
IMPORT_FIELDS = ("file", "name")
_SLACK = 1024 * 1024
"""Room for the other fields and multipart framing above the payload's own limit."""
_DATA_URI_TYPE = re.compile(r"^data:([^;,]*)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Upload:
    fields: VoiceFields
    audio: bytes
    mime_type: str | None


@dataclass(frozen=True, slots=True)
class ArchiveUpload:
    data: bytes
    name: str | None


def error_response(exc: SpeakwireError) -> JSONResponse:
    """vLLM-Omni's ``{"success": false, "error": "..."}``, with OpenAI's error fields beside it."""
    body = {
        "success": False,
        "error": exc.message,
        "message": exc.message,
        "type": exc.error_type,
        "param": exc.param,
        "code": exc.status_code,
    }
    return JSONResponse(body, status_code=exc.status_code)


async def read_upload(request: Request, *, allow_remote: bool) -> Upload | None:
    """The new voice a ``POST /v1/audio/voices`` carries; None for an empty body (a listing, see the router)."""
    fields = await _fields(request, limit=MAX_AUDIO_BYTES * 4 // 3 + _SLACK, accepted=UPLOAD_FIELDS)
    if not fields:
        return None
    if "speaker_embedding" in fields:
        raise BadRequestError(
            "speaker_embedding uploads are not supported; send the reference clip as audio_sample.",
            param="speaker_embedding",
        )
    _refuse_unknown(fields, UPLOAD_FIELDS)
    metadata = voice_fields(
        name=fields.get("name"),
        consent=fields.get("consent"),
        ref_text=fields.get("ref_text"),
        speaker_description=fields.get("speaker_description"),
        language=fields.get("language"),
    )
    audio, mime_type = await _payload(fields.get("audio_sample"), "audio_sample", MAX_AUDIO_BYTES, allow_remote)
    return Upload(metadata, audio, mime_type)


async def read_archive_upload(request: Request) -> ArchiveUpload:
    """The ``.swv`` file a ``POST /v1/audio/voices/import`` carries (a file part, or base64 JSON ``file``)."""
    fields = await _fields(request, limit=MAX_ARCHIVE_BYTES * 4 // 3 + _SLACK, accepted=IMPORT_FIELDS)
    _refuse_unknown(fields, IMPORT_FIELDS)
    data, _ = await _payload(fields.get("file"), "file", MAX_ARCHIVE_BYTES, False)
    name = fields.get("name")
    if name is not None and not isinstance(name, str):
        raise BadRequestError("'name' must be a string.", param="name")
    return ArchiveUpload(data, name or None)


async def _fields(request: Request, *, limit: int, accepted: tuple[str, ...]) -> dict[str, Any]:
    """Form or JSON fields; a file part becomes ``(bytes, content type)``. Refuses bodies over ``limit``."""
    body = await _read_body(request, limit)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        replay = Request(request.scope, _replay(body))
        form = await replay.form(max_files=4, max_fields=32, max_part_size=limit)
        fields: dict[str, Any] = {}
        for key, value in form.multi_items():
            if key in fields:
                raise BadRequestError(f"'{key}' was sent more than once.", param=key)
            if isinstance(value, UploadFile):
                fields[key] = (await value.read(), value.content_type)
            else:
                fields[key] = value
        await form.close()
        return fields
    if not body.strip():
        return {}
    try:
        parsed = parse_json(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(
            f"Request body is neither multipart/form-data nor valid JSON: {exc}. Send the fields "
            f"{', '.join(accepted)}.",
        ) from exc
    if not isinstance(parsed, dict):
        raise BadRequestError("Request body must be a JSON object.")
    return parsed


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(_too_large(int(declared), limit))
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise PayloadTooLargeError(_too_large(len(body), limit))
    return bytes(body)


def _too_large(size: int, limit: int) -> str:
    return f"Request body is {size / 2**20:.1f} MiB; the limit here is {limit / 2**20:.0f} MiB."


def _replay(body: bytes) -> Any:
    """An ASGI ``receive`` that hands the already-read body to Starlette's form parser."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _refuse_unknown(fields: dict[str, Any], accepted: tuple[str, ...]) -> None:
    unknown = sorted(set(fields) - set(accepted))
    if unknown:
        raise BadRequestError(
            f"Unrecognized field(s): {', '.join(unknown)}. Accepted: {', '.join(accepted)}.", param=unknown[0]
        )


async def _payload(value: Any, param: str, limit: int, allow_remote: bool) -> tuple[bytes, str | None]:
    """Bytes and media type of a file field: an uploaded part, a ``data:`` URI, or plain base64."""
    if isinstance(value, tuple):
        data, mime_type = value
    elif isinstance(value, str) and value.strip():
        data = await _decode_string(value, param, limit, allow_remote)
        match = _DATA_URI_TYPE.match(value.strip())
        mime_type = match.group(1) if match else None
    elif value is None or value == "":
        what = "the reference clip (1–30 s; WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM)"
        raise BadRequestError(
            f"'{param}' is required: {what if param == 'audio_sample' else 'the .swv voice file'}, as a "
            "multipart file part or, in JSON, as a data URI or base64.",
            param=param,
        )
    else:
        raise BadRequestError(f"'{param}' must be a file part, a data URI or base64.", param=param)
    if len(data) > limit:
        raise PayloadTooLargeError(
            f"{param} is {len(data) / 2**20:.1f} MiB; the limit is {limit // 2**20} MiB.", param=param
        )
    return data, mime_type


async def _decode_string(value: str, param: str, limit: int, allow_remote: bool) -> bytes:
    if param != "audio_sample":
        try:
            text = value.split(",", 1)[1] if value.lstrip().startswith("data:") else value
            return base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError, IndexError) as exc:
            raise BadRequestError(f"'{param}' is neither a data URI nor valid base64.", param=param) from exc
    try:
        return await asyncio.to_thread(parse_audio_reference, value, allow_remote=allow_remote, max_bytes=limit)
    except SpeakwireError as exc:
        raise type(exc)(exc.message.replace("ref_audio", param), param=param) from exc
