"""Routes of the ElevenLabs dialect: the two WebSockets, and ``POST /v1/text-to-speech/{voice_id}[...]``.

HTTP takes ``output_format`` in the query (default ``mp3_44100_128``) and a JSON body ``{text, model_id,
voice_settings, language_code, seed, ...}``; other fields are ignored. ``/v1/text-to-speech/{voice_id}``
answers the whole file, ``/stream`` the audio as it is produced (chunked), ``/with-timestamps`` one JSON object
``{audio_base64, alignment, normalized_alignment}``, and ``/stream/with-timestamps`` one such object per line
as the audio is produced, its times in seconds from the start of the audio (``alignment.py``).

Errors carry ElevenLabs' body ``{"detail": {"status", "message"}}`` (``voice_not_found`` 404, ``invalid_request``
400, ``too_many_concurrent_requests`` 429, ...); an invalid body or ``output_format`` is FastAPI's 422, as
ElevenLabs (a FastAPI service) sends it and the SDK raises as ``UnprocessableEntityError``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, WebSocket
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.off_loop import open_encoder
from speakwire.errors import PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.server.elevenlabs import protocol as p
from speakwire.server.elevenlabs.alignment import CharacterAligner, CharTiming, http_alignment
from speakwire.server.elevenlabs.session import PROTOCOL, ElevenLabsSession
from speakwire.server.flow import StallingResponse, file_response, write_stall
from speakwire.server.options import resolve_speech
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.synthesis import AudioReady, SegmentFinished, Utterance
from speakwire.text.hygiene import clean_text

router = APIRouter()

INPUT_ERRORS = InputErrors(
    param="text",
    empty=None,  # blank text is refused as having nothing to speak
    unspeakable="Text has nothing to speak: it must hold letters or digits.",
    too_long="Text is {length} characters; the limit is {limit}. Split it, or stream it over stream-input.",
    too_long_error=PayloadTooLargeError,  # p.error_status: 400 max_character_limit_exceeded
)


@router.websocket("/v1/text-to-speech/{voice_id}/stream-input")
async def stream_input(websocket: WebSocket, voice_id: str) -> None:
    await ElevenLabsSession(websocket, websocket.app.state.speakwire, voice_id, multi=False).run()


@router.websocket("/v1/text-to-speech/{voice_id}/multi-stream-input")
async def multi_stream_input(websocket: WebSocket, voice_id: str) -> None:
    await ElevenLabsSession(websocket, websocket.app.state.speakwire, voice_id, multi=True).run()


@router.post("/v1/text-to-speech/{voice_id}", summary="ElevenLabs: speech as one audio file.")
async def convert(voice_id: str, request: Request) -> Response:
    try:
        job = await _start(request, voice_id)
        data, _ = await job.whole_file()
    except _Reply as reply:
        return reply.response
    return file_response(data, write_stall(job.state, PROTOCOL), media_type=job.fmt.content_type)


@router.post("/v1/text-to-speech/{voice_id}/with-timestamps", summary="ElevenLabs: one file and its alignment.")
async def convert_with_timestamps(voice_id: str, request: Request) -> Response:
    try:
        job = await _start(request, voice_id)
        data, chars = await job.whole_file()
    except _Reply as reply:
        return reply.response
    alignment = http_alignment(chars)
    body = {"audio_base64": base64.b64encode(data).decode(), "alignment": alignment, "normalized_alignment": alignment}
    return JSONResponse(body)


@router.post("/v1/text-to-speech/{voice_id}/stream", summary="ElevenLabs: audio streamed as it is produced.")
async def stream(voice_id: str, request: Request) -> Response:
    try:
        job = await _start(request, voice_id)
    except _Reply as reply:
        return reply.response
    return StallingResponse(job.audio_stream(), write_stall(job.state, PROTOCOL), media_type=job.fmt.content_type)


@router.post(
    "/v1/text-to-speech/{voice_id}/stream/with-timestamps",
    summary="ElevenLabs: newline-delimited JSON chunks of audio (base64) and character timings.",
)
async def stream_with_timestamps(voice_id: str, request: Request) -> Response:
    try:
        job = await _start(request, voice_id)
    except _Reply as reply:
        return reply.response
    return StallingResponse(job.timestamped_stream(), write_stall(job.state, PROTOCOL),
                            media_type="application/x-ndjson")  # fmt: skip


class _Reply(Exception):
    """An error answered before (or instead of) any audio."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class StreamAborted(Exception):
    """Raised inside a streamed body so the connection drops: a truncated body must not pass for complete."""


def _error(exc: SpeakwireError, voice_id: str) -> _Reply:
    status, name = p.error_status(exc)
    if isinstance(exc, p.InvalidOutputFormat):
        body = p.validation_error_body(["query", "output_format"], exc.message, "enum")
        return _Reply(JSONResponse(body, status_code=422))
    headers = {"Retry-After": str(max(1, round(exc.retry_after_s)))} if isinstance(exc, TooBusyError) else None
    return _Reply(JSONResponse(p.http_error_body(name, p.describe(exc, voice_id)), status_code=status, headers=headers))


async def _body(request: Request) -> p.TextToSpeechBody:
    raw = await request.body()
    try:
        fields = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        body = p.validation_error_body(["body"], f"JSON decode error: {exc}", "json_invalid")
        raise _Reply(JSONResponse(body, status_code=422)) from None
    try:
        return p.TextToSpeechBody.model_validate(fields)
    except ValidationError as exc:
        detail = [
            {"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"], "input": _jsonable(e.get("input"))}
            for e in exc.errors()
        ]
        raise _Reply(JSONResponse({"detail": detail}, status_code=422)) from None


def _jsonable(value: object) -> object:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


async def _start(request: Request, voice_id: str) -> _Job:
    """Validate everything, then start synthesis; raises ``_Reply`` with ElevenLabs' error."""
    state: ServerState = request.app.state.speakwire
    try:
        fmt = p.parse_output_format(request.query_params.get("output_format"))
    except SpeakwireError as exc:
        raise _error(exc, voice_id) from None
    body = await _body(request)
    text = body.text
    try:
        check_input(text, state.settings.max_input_chars, INPUT_ERRORS)
        settings = p.parse_voice_settings(body.voice_settings)
        engine, _, _ = state.require_ready()
        options = p.speech_options(voice_id, fmt, model_id=body.model_id, language_code=body.language_code,
                                   voice_settings=settings, seed=body.seed)  # fmt: skip
        resolved = await resolve_speech(state, engine, options)
        # Checked against max_input_chars above, which may exceed the utterance's default buffer.
        utterance = open_utterance(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars)
    except SpeakwireError as exc:
        raise _error(exc, voice_id) from None
    try:
        aligner = CharacterAligner()
        aligner.add_text(clean_text(text))
        utterance.feed(text)
        utterance.finish()
    except SpeakwireError as exc:
        close_utterance(state, utterance, PROTOCOL)  # no _Job will close it: give the slot back now
        raise _error(exc, voice_id) from None
    except BaseException:
        close_utterance(state, utterance, PROTOCOL)
        raise
    return _Job(state, utterance, fmt, aligner)


@dataclasses.dataclass(slots=True)
class _Job:
    """One HTTP request's utterance, delivered one of three ways; each closes the utterance however it ends."""

    state: ServerState
    utterance: Utterance
    fmt: p.OutputFormat
    aligner: CharacterAligner

    async def whole_file(self) -> tuple[bytes, list[CharTiming]]:
        parts: list[Float32Array] = []
        chars: list[CharTiming] = []
        produced = 0
        try:
            async for event in self.utterance.events():
                if isinstance(event, AudioReady):
                    parts.append(event.samples)
                    produced += len(event.samples)
                    chars += self.aligner.place(event.words, produced / self.fmt.sample_rate)
                elif isinstance(event, SegmentFinished) and event.error is not None:
                    raise _error(event.error, "")
        finally:
            close_utterance(self.state, self.utterance, PROTOCOL)
        chars += self.aligner.finish(produced / self.fmt.sample_rate)
        return await asyncio.to_thread(self._encode_file, parts), chars

    def _encode_file(self, parts: list[Float32Array]) -> bytes:
        """The whole file from the stream's chunks in order (see ``encode_file``: no joined copy is made)."""
        encoder = self.fmt.encoder(streaming=False)
        return encoder.header() + b"".join(encoder.encode(part) for part in parts) + encoder.finish()

    async def audio_stream(self) -> AsyncIterator[bytes]:
        async for data, _ in self._chunks():
            if data:
                yield data

    async def timestamped_stream(self) -> AsyncIterator[bytes]:
        async for data, chars in self._chunks():
            if data or chars:
                alignment = http_alignment(chars)
                line = {"audio_base64": base64.b64encode(data).decode(), "alignment": alignment,
                        "normalized_alignment": alignment}  # fmt: skip
                yield (json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n").encode()

    async def _chunks(self) -> AsyncIterator[tuple[bytes, list[CharTiming]]]:
        """Encoded audio as it is produced, with the characters whose words start in it."""
        rate = self.fmt.sample_rate
        encoder = await open_encoder(self.fmt.codec, lambda: self.fmt.encoder(streaming=True))
        held = encoder.header()
        chars: list[CharTiming] = []
        produced = 0
        try:
            async for event in self.utterance.events():
                if isinstance(event, AudioReady):
                    produced += len(event.samples)
                    chars += self.aligner.place(event.words, produced / rate)
                    data = held + await encoder.encode(event.samples)
                    held = b""
                    if data:
                        yield data, chars
                        chars = []
                elif isinstance(event, SegmentFinished) and event.error is not None:
                    raise StreamAborted(event.error.message)
            yield held + await encoder.finish(), chars + self.aligner.finish(produced / rate)
        finally:
            close_utterance(self.state, self.utterance, PROTOCOL)
