"""Turn the body of a ``/v1/audio/speech`` reply into a WAV file that any player reads.

``InvokeEndpointWithResponseStream`` hands the body over in ``PayloadPart`` pieces cut at
arbitrary byte boundaries — mid-header, mid-sample, mid-line — so nothing is parsed until
the pieces are joined. The joined body is then one of:

- a WAV file, possibly with the streaming convention of ``0xFFFFFFFF`` size fields, which
  tools that trust the header (Python's ``wave``, ``soundfile``) reject: the sizes are
  rewritten to the real lengths;
- Server-Sent Events, which later vLLM-Omni versions send for ``stream: true`` even when
  raw audio was asked for: the base64 ``speech.audio.delta`` payloads are concatenated;
- a JSON error, which becomes an exception carrying the server's message.
"""

from __future__ import annotations

import base64
import json
import struct

_RIFF_HEADER = struct.Struct("<4sI4s")
_CHUNK_HEADER = struct.Struct("<4sI")


class SpeechResponseError(RuntimeError):
    """The endpoint's reply is an error or not audio."""


def speech_response_wav(body: bytes) -> bytes:
    """The WAV file carried by ``body`` (joined payload parts), with consistent size fields.

    Raises:
        SpeechResponseError: The body is an error message, an SSE error event, or not audio.
    """
    stripped = body.lstrip()
    if stripped.startswith((b"data:", b"event:", b":")):
        return finalize_wav(_audio_from_sse(stripped))
    if body.startswith(b"RIFF"):
        return finalize_wav(body)
    raise SpeechResponseError(f"the endpoint did not return audio: {_describe(body)}")


def finalize_wav(data: bytes) -> bytes:
    """Rewrite the RIFF and ``data`` sizes to the bytes actually present.

    Streamed WAVs announce an unknown length (``0xFFFFFFFF``) or a guess; the ``data``
    chunk is the last one in every file a TTS server writes, so its true size is
    everything after its header (rounded down to whole samples of the ``fmt`` chunk).
    """
    if len(data) < _RIFF_HEADER.size or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise SpeechResponseError(f"not a WAV file: {_describe(data)}")
    offset = _RIFF_HEADER.size
    block_align = 1
    while offset + _CHUNK_HEADER.size <= len(data):
        chunk_id, size = _CHUNK_HEADER.unpack_from(data, offset)
        body_start = offset + _CHUNK_HEADER.size
        if chunk_id == b"fmt " and size >= 16:
            block_align = max(1, struct.unpack_from("<H", data, body_start + 12)[0])
        if chunk_id == b"data":
            payload = len(data) - body_start
            payload -= payload % block_align
            header = bytearray(data[: body_start + payload])
            struct.pack_into("<I", header, 4, len(header) - 8)
            struct.pack_into("<I", header, offset + 4, payload)
            return bytes(header)
        offset = body_start + size + (size % 2)  # chunks are word-aligned
    raise SpeechResponseError("WAV file without a data chunk")


def _audio_from_sse(body: bytes) -> bytes:
    audio = bytearray()
    for raw_line in body.splitlines():
        line = raw_line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise SpeechResponseError(f"malformed SSE event: {payload[:120]!r}") from exc
        kind = event.get("type")
        if kind == "speech.audio.delta":
            audio.extend(base64.b64decode(event.get("audio", "")))
        elif kind == "speech.audio.error" or "error" in event:
            error = event.get("error") or {}
            message = error.get("message") if isinstance(error, dict) else error
            raise SpeechResponseError(f"the endpoint reported an error: {message or event}")
    if not audio:
        raise SpeechResponseError("the SSE stream carried no audio")
    return bytes(audio)


def _describe(body: bytes) -> str:
    try:
        parsed = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{len(body)} bytes starting {body[:60]!r}"
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return str(parsed["error"].get("message", parsed["error"]))
    return json.dumps(parsed)[:300]
