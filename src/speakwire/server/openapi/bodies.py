"""Request schemas of the routes that read their own body (each dialect parses it as its vendor does).

Those routes take the raw ``Request`` so they can answer a bad body in their vendor's words, which leaves
FastAPI nothing to document; these are their schemas, as strict as the parsing in each dialect's
``protocol.py``: the enumerations and ranges are read from the same tables the parsers check against.
"""

from __future__ import annotations

from typing import Any

from speakwire.server.cartesia import protocol as cartesia
from speakwire.server.deepgram import protocol as deepgram
from speakwire.server.elevenlabs import protocol as elevenlabs
from speakwire.server.openapi.limits import speech_text, spoken_language
from speakwire.server.options import MAX_SAMPLE_RATE, MAX_SPEED, MIN_SAMPLE_RATE, MIN_SPEED
from speakwire.voices.names import NAME_PATTERN

_SPEED = {"type": "number", "minimum": MIN_SPEED, "maximum": MAX_SPEED}
_NAME = {"type": "string", "description": "A served model or voice, or a name stock clients send (aliased)."}


def json_body(schema: dict[str, Any], *, also: dict[str, Any] | None = None) -> dict[str, Any]:
    """``openapi_extra`` declaring a required JSON request body (and ``also``'s other media types)."""
    content = {"application/json": {"schema": schema}, **(also or {})}
    return {"requestBody": {"required": True, "content": content}}


def query(*parameters: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` declaring query parameters, each ``{"name", "schema", "description"}``."""
    return {"parameters": [{"in": "query", "required": False, **parameter} for parameter in parameters]}


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


def _null_is_absent(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``null`` allowed for each optional field: the parsers take ``null`` as "not sent"."""
    properties = {
        name: schema if name in body["required"] else {"anyOf": [schema, {"type": "null"}]}
        for name, schema in body["properties"].items()
    }
    return {**body, "properties": properties}


# ----- ElevenLabs: POST /v1/text-to-speech/{voice_id}[/stream][/with-timestamps] ----------------------------

ELEVENLABS_BODY = json_body(
    _null_is_absent(
        _object(
            {
                "text": speech_text("Text to speak."),
                "model_id": {"type": "string", "description": "eleven_* ids mean the served model."},
                "language_code": {"type": "string", **spoken_language()},
                "voice_settings": {
                    "type": "object",
                    "properties": {"speed": {"anyOf": [_SPEED, {"type": "null"}]}},
                    "description": "Only speed has an effect here; the other settings are accepted and ignored.",
                },
                "seed": {"type": "integer"},
            },
            "text",
        )
    )
)
ELEVENLABS_QUERY = query(
    {
        "name": "output_format",
        "schema": {
            "type": "string",
            "enum": [*elevenlabs.OUTPUT_FORMATS, ""],
            "default": elevenlabs.DEFAULT_OUTPUT_FORMAT,
        },
        "description": "codec_rate[_kbps]; empty: the default.",
    }
)


# ----- Cartesia: POST /tts/bytes, /tts/sse -------------------------------------------------------------------


_CARTESIA_ENCODINGS = {"raw": list(cartesia.ENCODINGS), "wav": ["pcm_f32le", "pcm_s16le"], "mp3": None}
"""The encodings each container is served with (``cartesia.protocol.parse_output_format``); mp3 takes none."""


def _cartesia_output(containers: tuple[str, ...]) -> dict[str, Any]:
    rate = {"type": "integer", "enum": list(cartesia.SAMPLE_RATES)}
    variants = []
    for container in containers:
        encodings = _CARTESIA_ENCODINGS[container]
        properties: dict[str, Any] = {"container": {"type": "string", "enum": [container]}, "sample_rate": rate}
        if encodings is None:
            variants.append(_object(properties, "container", "sample_rate"))
        else:
            properties["encoding"] = {"type": "string", "enum": encodings}
            variants.append(_object(properties, "container", "encoding", "sample_rate"))
    return {"oneOf": variants} if len(variants) > 1 else variants[0]


def cartesia_body(*, sse: bool) -> dict[str, Any]:
    speed = {"anyOf": [{"type": "string", "enum": list(cartesia.SPEED_WORDS)}, _SPEED]}
    return json_body(
        _null_is_absent(
            _object(
                {
                    "transcript": speech_text("Text to speak."),
                    "model_id": {"type": "string", "description": "sonic* ids mean the served model."},
                    "voice": {
                        "anyOf": [
                            {"type": "string", "minLength": 1, "pattern": r"\S"},
                            _object(
                                {
                                    "mode": {"type": "string", "enum": ["id"]},
                                    "id": {"type": "string", "minLength": 1, "pattern": r"\S"},
                                },
                                "id",
                            ),
                        ]
                    },
                    "output_format": _cartesia_output(("raw",) if sse else ("raw", "wav", "mp3")),
                    "language": {"type": "string", **spoken_language()},
                    "speed": speed,
                    "generation_config": _null_is_absent(
                        _object(
                            {
                                "speed": speed,
                                "volume": {
                                    "type": "number",
                                    "minimum": cartesia.MIN_VOLUME,
                                    "maximum": cartesia.MAX_VOLUME,
                                },
                            }
                        )
                    ),
                    "add_timestamps": {"type": "boolean"},
                    "context_id": {"type": "string"},
                    "max_buffer_delay_ms": {"type": "integer", "minimum": 0, "maximum": cartesia.MAX_BUFFER_DELAY_MS},
                    "seed": {"type": "integer"},
                },
                "transcript",
                "voice",
                "output_format",
            )
        )
    )


# ----- Deepgram: POST /v1/speak ------------------------------------------------------------------------------

DEEPGRAM_BODY = json_body(
    _object({"text": speech_text("Text to speak.")}, "text"),
    also={"text/plain": {"schema": speech_text("Text to speak, as the whole body.")}},
)
DEEPGRAM_QUERY = query(
    {"name": "model", "schema": _NAME, "description": "aura-* models name a voice; others must be served."},
    {"name": "encoding", "schema": {"type": "string", "enum": list(deepgram.REST_ENCODINGS), "default": "mp3"}},
    {
        "name": "container",
        "schema": {"type": "string", "enum": ["wav", "none", "ogg"]},
        "description": "wav or none for linear16, mulaw and alaw; ogg for opus; none otherwise.",
    },
    {
        "name": "sample_rate",
        "schema": {"type": "integer", "enum": deepgram.REST_SAMPLE_RATES},
        "description": "Per encoding, as Deepgram lists them: "
        + "; ".join(f"{encoding} {', '.join(map(str, rates))}" for encoding, rates in deepgram.REST_RATES.items())
        + ".",
    },
    {"name": "speed", "schema": _SPEED},
    {"name": "seed", "schema": {"type": "integer"}},
)


# ----- NVIDIA Magpie: POST /v1/magpie/invocations ------------------------------------------------------------

MAGPIE_BODY = json_body(
    _null_is_absent(
        _object(
            {
                "text": speech_text("Text to speak."),
                "voice_name": {"type": "string"},
                "language_code": {"type": "string", **spoken_language()},
                "sample_rate_hz": {"type": "integer", "minimum": MIN_SAMPLE_RATE, "maximum": MAX_SAMPLE_RATE},
            },
            "text",
        )
    )
)


# ----- the voice library: POST /v1/audio/voices/import ------------------------------------------------------

_IMPORT_NAME = {
    "type": "string",
    "pattern": f"^(?:{NAME_PATTERN[1:-1]})?$",
    "description": "Save it under this name instead of its own (empty: its own).",
}

VOICE_IMPORT_BODY = json_body(
    _object(
        {
            "file": {
                "type": "string",
                "minLength": 1,
                "pattern": r"^\s*(?:data:[^,]*,[\s\S]*|[A-Za-z0-9+/=\s]+)$",
                "description": "The .swv file as a data URI or base64.",
            },
            "name": _IMPORT_NAME,
        },
        "file",
    ),
    also={
        "multipart/form-data": {
            "schema": _object(
                {"file": {"type": "string", "format": "binary"}, "name": _IMPORT_NAME},
                "file",
            )
        }
    },
)
