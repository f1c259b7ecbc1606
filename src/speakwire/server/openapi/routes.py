"""Every HTTP route's answers and, where it reads its own body, its request: one table for the whole API.

FastAPI documents what it can see: a 200 of JSON, and request schemas of routes that let it parse the body.
Ours answer audio, server-sent events or Prometheus text, read their bodies themselves (to answer a bad one in
their vendor's words), and answer errors in their dialect's shape, so each route's entry here says what it
really answers. ``tests/server/test_openapi_document.py`` checks that no route is left out, and
``tests/server/test_openapi_conformance.py`` holds the server to the document with schemathesis.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from speakwire.server.openapi import bodies
from speakwire.server.openapi.responses import (
    BINARY,
    CARTESIA,
    DEEPGRAM,
    ELEVENLABS,
    MAGPIE,
    OPENAI,
    PROBE_NOT_READY,
    VOICE_LIBRARY,
    Responses,
    audio,
    errors,
    event_stream,
    headers_of,
    success,
)
from speakwire.voice_presets import CARTESIA_VOICE_IDS, DEEPGRAM_AURA_VOICES, ELEVENLABS_VOICE_IDS, MAGPIE_VOICES


@dataclass(frozen=True, slots=True)
class RouteDoc:
    """What one operation answers (merged over FastAPI's, a 200 here replacing its 200), and its request."""

    responses: Responses
    request: dict[str, Any] = field(default_factory=dict)
    """``requestBody`` and query ``parameters`` of a route that parses them itself (``bodies``)."""
    examples: dict[str, Any] = field(default_factory=dict)
    """A request that speaks: ``body`` the JSON body's example, any other key a parameter's (a client's first
    try, and the fuzzer's: its examples phase runs each operation's example before anything it generates)."""


_HELLO = "Hello there."
_JSON: dict[str, Any] = {"type": "object"}
_VOICE = success("The voice.", {"application/json": {"schema": _JSON}})
_ELEVENLABS_REQUEST = {**bodies.ELEVENLABS_BODY, **bodies.ELEVENLABS_QUERY}
_ELEVENLABS_EXAMPLES = {
    "body": {"text": _HELLO, "model_id": "eleven_flash_v2_5"},
    "voice_id": ELEVENLABS_VOICE_IDS[0],
    "output_format": "pcm_24000",
}
_TIMESTAMPED = {
    "type": "object",
    "properties": {
        "audio_base64": {"type": "string"},
        "alignment": {"type": ["object", "null"]},
        "normalized_alignment": {"type": ["object", "null"]},
    },
    "required": ["audio_base64"],
}


def _cartesia_example(container: str) -> dict[str, Any]:
    return {
        "transcript": _HELLO,
        "model_id": "sonic-2",
        "voice": {"mode": "id", "id": CARTESIA_VOICE_IDS[0]},
        "output_format": {"container": container, "encoding": "pcm_s16le", "sample_rate": 24000},
    }


ROUTES: dict[tuple[str, str], RouteDoc] = {
    # Probes and catalogue (server/info.py, server/sagemaker/router.py): the probes are open, /metrics is not.
    ("GET", "/health"): RouteDoc({}),
    ("GET", "/ready"): RouteDoc(PROBE_NOT_READY),
    ("GET", "/ping"): RouteDoc(PROBE_NOT_READY),
    ("POST", "/ping"): RouteDoc(PROBE_NOT_READY),
    ("GET", "/v1/models"): RouteDoc(errors(OPENAI, 401, 503)),
    ("GET", "/metrics"): RouteDoc(
        {
            **success(
                "Prometheus text exposition format 0.0.4.",
                {"text/plain": {"schema": {"type": "string"}}},
            ),
            **errors(OPENAI, 401),
        }
    ),
    # OpenAI (server/speech): its request body is declared by the route itself (SpeechRequest).
    ("POST", "/v1/audio/speech"): RouteDoc(
        {
            **audio(
                "The audio in response_format: streamed as it is made, or one file; with stream_format 'sse', "
                "speech.audio.delta / speech.audio.words / speech.audio.done events.",
                also=event_stream(
                    "speech.audio.delta", "speech.audio.words", "speech.audio.done", "speech.audio.error"
                ),
            ),
            **errors(OPENAI, 400, 401, 404, 413, 429, 500, 503),
        },
        examples={"body": {"input": _HELLO, "model": "tts-1", "voice": "alloy", "response_format": "pcm"}},
    ),
    # The voice library (server/voices): vLLM-Omni's shapes; listing fails only in OpenAI's (the global handler).
    ("GET", "/v1/audio/voices"): RouteDoc(errors(OPENAI, 401, 503)),
    ("POST", "/v1/audio/voices"): RouteDoc({**_VOICE, **errors(VOICE_LIBRARY, 400, 401, 404, 409, 413, 503, 507)}),
    ("POST", "/v1/audio/voices/import"): RouteDoc(
        {**_VOICE, **errors(VOICE_LIBRARY, 400, 401, 409, 413, 503, 507)}, bodies.VOICE_IMPORT_BODY
    ),
    ("GET", "/v1/audio/voices/{name}"): RouteDoc({**_VOICE, **errors(VOICE_LIBRARY, 400, 401, 404, 503)}),
    ("GET", "/v1/audio/voices/{name}/export"): RouteDoc(
        {
            **success("The voice as one .swv file (a zip archive).", {"application/zip": BINARY}),
            **errors(VOICE_LIBRARY, 400, 401, 404, 503),
        }
    ),
    ("DELETE", "/v1/audio/voices/{name}"): RouteDoc({**_VOICE, **errors(VOICE_LIBRARY, 400, 401, 404, 503, 507)}),
    ("POST", "/v1/audio/voices/{name}/delete"): RouteDoc({**_VOICE, **errors(VOICE_LIBRARY, 400, 401, 404, 503, 507)}),
    # ElevenLabs (server/elevenlabs/router.py).
    ("POST", "/v1/text-to-speech/{voice_id}"): RouteDoc(
        {**audio("The whole file in output_format."), **errors(ELEVENLABS)}, _ELEVENLABS_REQUEST, _ELEVENLABS_EXAMPLES
    ),
    ("POST", "/v1/text-to-speech/{voice_id}/stream"): RouteDoc(
        {**audio("The audio in output_format, streamed as it is made."), **errors(ELEVENLABS)},
        _ELEVENLABS_REQUEST,
        _ELEVENLABS_EXAMPLES,
    ),
    ("POST", "/v1/text-to-speech/{voice_id}/with-timestamps"): RouteDoc(
        {
            **success("The file (base64) and its character timings.", {"application/json": {"schema": _TIMESTAMPED}}),
            **errors(ELEVENLABS),
        },
        _ELEVENLABS_REQUEST,
        _ELEVENLABS_EXAMPLES,
    ),
    ("POST", "/v1/text-to-speech/{voice_id}/stream/with-timestamps"): RouteDoc(
        {
            **success(
                "One JSON object per line as the audio is made: audio_base64 and the characters it starts.",
                {"application/x-ndjson": {"schema": {"type": "string"}}},
            ),
            **errors(ELEVENLABS),
        },
        _ELEVENLABS_REQUEST,
        _ELEVENLABS_EXAMPLES,
    ),
    # Cartesia (server/cartesia/router.py).
    ("POST", "/tts/bytes"): RouteDoc(
        {**audio("The audio in output_format, streamed as it is made."), **errors(CARTESIA)},
        bodies.cartesia_body(sse=False),
        {"body": _cartesia_example("wav")},
    ),
    ("POST", "/tts/sse"): RouteDoc(
        {
            **success(
                "chunk and timestamps events as the audio is made, then done (or error).",
                event_stream("chunk", "timestamps", "done", "error"),
            ),
            **errors(CARTESIA),
        },
        bodies.cartesia_body(sse=True),
        {"body": _cartesia_example("raw")},
    ),
    # Deepgram (server/deepgram/router.py).
    ("POST", "/v1/speak"): RouteDoc(
        {**audio("The audio in the query's encoding and container, streamed as it is made."), **errors(DEEPGRAM)},
        {**bodies.DEEPGRAM_BODY, **bodies.DEEPGRAM_QUERY},
        {"body": {"text": _HELLO}, "model": DEEPGRAM_AURA_VOICES[0], "encoding": "linear16", "container": "wav"},
    ),
    # NVIDIA Magpie's SageMaker wrapper (server/magpie/router.py).
    ("POST", "/v1/magpie/invocations"): RouteDoc(
        {
            **success("Raw PCM16 mono at sample_rate_hz.", {"application/octet-stream": BINARY}),
            **errors(MAGPIE),
        },
        bodies.MAGPIE_BODY,
        {"body": {"text": _HELLO, "voice_name": MAGPIE_VOICES[0], "sample_rate_hz": 22050}},
    ),
}


def document_routes(document: dict[str, Any]) -> None:
    """Write each route's ``ROUTES`` entry into FastAPI's ``document`` (in place).

    The entry's statuses are the route's errors: FastAPI's own guess (a 422 for a route with path parameters,
    which ``server/errors.py`` answers as OpenAI's 400) is dropped.
    """
    for (method, path), doc in ROUTES.items():
        operation = document.get("paths", {}).get(path, {}).get(method.lower())
        if operation is None:
            continue  # a route this app does not serve
        declared = {str(status): copy.deepcopy(response) for status, response in doc.responses.items()}
        fastapi_success = {status: r for status, r in operation.get("responses", {}).items() if status.startswith("2")}
        operation["responses"] = {**fastapi_success, **declared}
        for status, response in operation["responses"].items():
            response["headers"] = {**response.get("headers", {}), **headers_of(status)}
        for key, value in copy.deepcopy(doc.request).items():
            if key == "parameters":
                operation["parameters"] = [*operation.get("parameters", []), *value]
            else:
                operation[key] = value
        _set_examples(operation, doc.examples)
    schemas = document.get("components", {}).get("schemas", {})
    if "#/components/schemas/HTTPValidationError" not in json.dumps(document.get("paths")):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _set_examples(operation: dict[str, Any], examples: dict[str, Any]) -> None:
    for name, example in examples.items():
        if name == "body":
            operation["requestBody"]["content"]["application/json"]["example"] = example
            continue
        parameter = next(p for p in operation.get("parameters", []) if p["name"] == name)
        parameter["example"] = example
