"""What each route can answer, for the OpenAPI document: every dialect's error body, and audio by media type.

Every protocol answers its errors in its vendor's shape (``server/errors.py`` for OpenAI, each dialect's
``protocol.py`` for its own), and the API key middleware answers 401 in the shape of the path it guards
(``server/auth.py``). A route's entry in ``routes.ROUTES`` names them with ``errors(DIALECT, 400, 404, ...)``
and ``audio()``, so a client generated from ``/openapi.json`` knows every status and body it can get.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from speakwire.encoders.registry import CONTENT_TYPES

_REF = "#/components/schemas/{model}"

# ----- the error bodies, one model per dialect --------------------------------------------------------------


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class OpenAIError(BaseModel):
    """OpenAI's ``{"error": {"message", "type", "param", "code"}}``: our own routes' shape (``server/errors.py``)."""

    error: OpenAIErrorDetail


class VoiceLibraryError(BaseModel):
    """vLLM-Omni's ``{"success": false, "error": "..."}`` with OpenAI's fields beside it (``voices/protocol.py``)."""

    success: bool
    error: str
    message: str
    type: str
    param: str | None
    code: int


class ElevenLabsErrorDetail(BaseModel):
    status: str = Field(description="voice_not_found, invalid_request, too_many_concurrent_requests, ...")
    message: str


class ElevenLabsError(BaseModel):
    """ElevenLabs' ``{"detail": {"status", "message"}}`` (``elevenlabs/protocol.py``)."""

    detail: ElevenLabsErrorDetail


class ElevenLabsValidationIssue(BaseModel):
    type: str
    loc: list[str | int]
    msg: str
    input: Any = None


class ElevenLabsValidationError(BaseModel):
    """FastAPI's 422 ``{"detail": [...]}``, as ElevenLabs (a FastAPI service) answers an invalid body or query."""

    detail: list[ElevenLabsValidationIssue]


class CartesiaError(BaseModel):
    """Cartesia's ``{error_code, title, message, request_id}`` (``cartesia/protocol.py``)."""

    error_code: str
    title: str
    message: str
    request_id: str


class DeepgramError(BaseModel):
    """Deepgram's ``{err_code, err_msg, request_id}`` (``deepgram/protocol.py``)."""

    err_code: str
    err_msg: str
    request_id: str


class MagpieError(BaseModel):
    """NVIDIA's SageMaker wrapper's ``{"error": "..."}`` (``magpie/protocol.py``)."""

    error: str


class ProbeStatus(BaseModel):
    """A probe's answer: ``healthy``/``ready``, or why not (``loading``, ``failed``, ``unhealthy``, ``draining``)."""

    status: str
    error: str | None = None


# ----- which body each status has, per dialect --------------------------------------------------------------

Responses = dict[int | str, dict[str, Any]]
"""FastAPI's ``responses`` shape: status → OpenAPI response object."""
Dialect = dict[int, type[BaseModel]]
"""Status → the body model of that status, for every status a dialect's routes can answer with an error."""

_WHY = {
    400: "The request is invalid; the body says which field and why.",
    401: "An API key is set and the request did not send it.",
    404: "Unknown model, voice or resource.",
    409: "The name is taken.",
    413: "The body or the text is over a limit.",
    422: "The body or a query parameter does not validate.",
    429: "At capacity: retry after the Retry-After header's seconds.",
    500: "Synthesis failed.",
    503: "Not ready yet, shutting down (retry another instance), or the shared voice library is unreachable.",
    507: "The disk is full: the voice library is left as it was.",
}


def _statuses(body: type[BaseModel], *statuses: int) -> Dialect:
    return dict.fromkeys(statuses, body)


OPENAI = _statuses(OpenAIError, 400, 401, 404, 409, 413, 429, 500, 503)
VOICE_LIBRARY: Dialect = {**_statuses(VoiceLibraryError, 400, 404, 409, 413, 500, 503, 507), 401: OpenAIError}
"""The voice routes answer in vLLM-Omni's shape, except the key middleware's 401 (OpenAI's, as on ``/v1``)."""
ELEVENLABS: Dialect = {**_statuses(ElevenLabsError, 400, 401, 404, 429, 500, 503), 413: OpenAIError,
              422: ElevenLabsValidationError}  # fmt: skip
"""413 is the body limit, answered before the dialect reads the body (``server/body_limit.py``)."""
CARTESIA = _statuses(CartesiaError, 400, 401, 404, 413, 429, 500, 503)
DEEPGRAM = _statuses(DeepgramError, 400, 401, 413, 429, 500, 503)
"""An unknown model or voice is Deepgram's 400 ``INVALID_QUERY_PARAMETER``, not a 404."""
MAGPIE = _statuses(MagpieError, 400, 401, 404, 413, 429, 500, 503)


_DIALECTS = (OPENAI, VOICE_LIBRARY, ELEVENLABS, CARTESIA, DEEPGRAM, MAGPIE)
BODY_MODELS: tuple[type[BaseModel], ...] = (
    *dict.fromkeys(model for dialect in _DIALECTS for model in dialect.values()),
    ProbeStatus,
)


def component_schemas() -> dict[str, Any]:
    """The JSON schemas of every body model, for ``components.schemas`` (``errors`` refers to them by name)."""
    _, schemas = models_json_schema([(model, "serialization") for model in BODY_MODELS], ref_template=_REF)
    return dict(schemas.get("$defs", {}))


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}}


def errors(dialect: Dialect, *statuses: int) -> Responses:
    """The responses for these error statuses of ``dialect`` (all of its statuses when none are named)."""
    chosen = statuses or tuple(dialect)
    return {status: {"description": _WHY[status], "content": _json(dialect[status])} for status in chosen}


PROBE_NOT_READY: Responses = {
    503: {"description": "Loading, failed, unhealthy, or draining (with Retry-After).", "content": _json(ProbeStatus)}
}
"""The probes' (``/ready``, ``/ping``) 503."""


# ----- headers every answer carries ------------------------------------------------------------------------

REQUEST_ID = {
    "required": True,
    "description": "The request's id: the client's X-Request-ID when it sent a sane one, else a new one.",
    "schema": {"type": "string"},
}
RETRY_AFTER = {"required": True, "description": "Seconds to wait before retrying.", "schema": {"type": "string"}}


def headers_of(status: str) -> dict[str, Any]:
    """The headers an answer of ``status`` always carries (``server/request_ids.py``; a 429's ``Retry-After``)."""
    return {"x-request-id": REQUEST_ID, **({"Retry-After": RETRY_AFTER} if status == "429" else {})}


# ----- success bodies ---------------------------------------------------------------------------------------

AUDIO_MEDIA_TYPES = tuple(dict.fromkeys([*CONTENT_TYPES.values(), "application/octet-stream"]))
"""Every media type an audio body goes out with: the encoders' (``encoders.registry``), and raw float PCM's."""

BINARY: dict[str, Any] = {"schema": {"type": "string", "format": "binary"}}


def success(description: str, content: dict[str, Any]) -> Responses:
    """A 200 with these media types (``{media_type: {"schema": ...}}``)."""
    return {200: {"description": description, "content": content}}


def audio(description: str, *, also: dict[str, Any] | None = None) -> Responses:
    """A 200 of audio bytes in any of ``AUDIO_MEDIA_TYPES`` (and ``also``'s media types)."""
    return success(description, {**dict.fromkeys(AUDIO_MEDIA_TYPES, BINARY), **(also or {})})


def event_stream(*event_types: str) -> dict[str, Any]:
    """A ``text/event-stream`` content entry whose events carry JSON with one of ``event_types`` as its ``type``.

    The stream is described as the sequence of its events (``{"event", "data"}``, the ``data:`` line's JSON in
    ``contentSchema``), as schemathesis reads a stream against ``schema``; ``itemSchema`` says the same of one event
    for OpenAPI 3.2 readers.
    """
    data = {
        "type": "object",
        "properties": {"type": {"type": "string", "enum": list(event_types)}},
        "required": ["type"],
    }
    event = {
        "type": "object",
        "properties": {
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
            "event": {"type": "string"},
        },
        "required": ["data"],
    }
    description = f"Server-sent events: {', '.join(event_types)}."
    return {"text/event-stream": {"schema": {"type": "array", "items": event, "description": description},
                                  "itemSchema": event}}  # fmt: skip
