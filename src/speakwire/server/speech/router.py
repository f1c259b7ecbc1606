"""Routes of the OpenAI-compatible speech API.

``POST /v1/audio/speech`` takes JSON (OpenAI) or ``multipart/form-data`` with the same
fields, where ``ref_audio`` may be an uploaded file (voice cloning without base64).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.responses import Response

from speakwire.errors import BadRequestError, PayloadTooLargeError
from speakwire.server.json_message import parse_json
from speakwire.server.speech.handler import create_speech
from speakwire.server.speech.protocol import SpeechRequest

router = APIRouter()

MAX_UPLOAD_BYTES = 25 * 1024 * 1024
_BOOL_FIELDS = {"stream", "x_vector_only_mode"}
_NUMBER_FIELDS = {"speed": float, "sample_rate": int, "max_new_tokens": int, "seed": int,
                  "initial_codec_chunk_frames": int}  # fmt: skip

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": SpeechRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        **{k: {"type": "string"} for k in SpeechRequest.model_fields},
                        "input": SpeechRequest.model_json_schema()["properties"]["input"],
                        "ref_audio": {"type": "string", "format": "binary"},
                    },
                    "required": ["input"],
                }
            },
        },
    }
}


async def _form_fields(request: Request) -> dict[str, Any]:
    form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
    fields: dict[str, Any] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            data = await value.read()
            if len(data) > MAX_UPLOAD_BYTES:
                raise PayloadTooLargeError(f"{key} is over {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB.", param=key)
            mime = value.content_type or "application/octet-stream"
            fields[key] = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        elif key in _BOOL_FIELDS:
            fields[key] = value.lower() in ("1", "true", "yes", "on")
        elif key in _NUMBER_FIELDS:
            try:
                fields[key] = _NUMBER_FIELDS[key](value)
            except ValueError as exc:
                raise BadRequestError(f"'{key}' must be a number, got {value!r}.", param=key) from exc
        else:
            fields[key] = value
    return fields


@router.post(
    "/v1/audio/speech",
    summary="Generate speech (OpenAI-compatible): a whole file, a raw chunked stream, or SSE events.",
    response_class=Response,
    openapi_extra=_OPENAPI_BODY,
)
async def speech(request: Request) -> Response:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        fields = await _form_fields(request)
    else:
        raw = await request.body()
        try:
            fields = parse_json(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequestError(f"Request body is not valid JSON: {exc}") from exc
        if not isinstance(fields, dict):
            raise BadRequestError("Request body must be a JSON object.")
    try:
        body = SpeechRequest.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from exc
    return await create_speech(request.app.state.speakwire, body, accept=request.headers.get("accept", ""))
