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
from speakwire.server.openapi.limits import engine_capability
from speakwire.server.speech.handler import create_speech
from speakwire.server.speech.protocol import SpeechRequest

router = APIRouter()

MAX_UPLOAD_BYTES = 25 * 1024 * 1024
_FORM_TRUE = frozenset({"1", "true", "yes", "on"})
_FORM_FALSE = frozenset({"0", "false", "no", "off"})


def _form_field_schema(field: dict[str, Any]) -> dict[str, Any]:
    """A JSON body field's schema as a form field: the same type and bounds, without ``null`` (an empty form
    field is "not sent", as ``null`` is in JSON) and without objects (a form field is text or a file)."""
    schema = {key: value for key, value in field.items() if key not in ("anyOf", "default", "title")}
    branches = [b for b in field.get("anyOf", ()) if b.get("type") not in ("null", "object", "array")]
    if len(branches) == 1:
        schema = {**branches[0], **schema}
    elif branches:
        schema["anyOf"] = branches
    return schema


_JSON_FIELDS = SpeechRequest.model_json_schema()["properties"]
_FORM_TYPES = {name: _form_field_schema(field).get("type") for name, field in _JSON_FIELDS.items()}
"""Each field's JSON type as a form field reads it (``boolean``, ``number``, ``integer``, ``string``, ...): the
form is parsed by the same model's types, so a field added to ``SpeechRequest`` is read right without a list here."""
_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": SpeechRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        **{
                            name: _form_field_schema(field)
                            for name, field in _JSON_FIELDS.items()
                            if name != "speaker_embedding"  # a list: JSON only
                        },
                        "ref_audio": {"type": "string", "format": "binary", **engine_capability("supports_cloning")},
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
        elif not value.strip() and key != "input":
            continue  # an empty field is not sent, as null is in JSON (an HTML form sends its blank inputs)
        elif _FORM_TYPES.get(key) == "boolean":
            fields[key] = _form_bool(key, value)
        elif _FORM_TYPES.get(key) in ("number", "integer"):
            fields[key] = _form_number(key, value)
        else:
            fields[key] = value
    return fields


def _form_bool(key: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in _FORM_TRUE | _FORM_FALSE:
        raise BadRequestError(f"'{key}' must be true or false, got {value!r}.", param=key)
    return word in _FORM_TRUE


def _form_number(key: str, value: str) -> float | int:
    """A form field's number; an integer field takes ``20`` or ``20.0`` (JSON Schema's integers), not ``20.5``."""
    integer = _FORM_TYPES[key] == "integer"
    kind = "an integer" if integer else "a number"
    try:
        number = float(value)
    except ValueError:
        raise BadRequestError(f"'{key}' must be {kind}, got {value!r}.", param=key) from None
    if not integer:
        return number
    if not number.is_integer():
        raise BadRequestError(f"'{key}' must be {kind}, got {value!r}.", param=key)
    return int(number)


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
