"""Routes of the ElevenLabs dialect: the two WebSockets, and ``POST /v1/text-to-speech/{voice_id}[...]``.

HTTP takes ``output_format`` in the query (default ``mp3_44100_128``) and a JSON body ``{text, model_id,
voice_settings, language_code, seed, ...}``; other fields are ignored. ``/v1/text-to-speech/{voice_id}``
answers the whole file, ``/stream`` the audio as it is produced (chunked), ``/with-timestamps`` one JSON object
``{audio_base64, alignment, normalized_alignment}``, and ``/stream/with-timestamps`` one such object per line
as the audio is produced, its times in seconds from the start of the audio (``alignment.py``). Every response
carries ElevenLabs' ``request-id`` header (the id a client passes back in ``previous_request_ids``): the same id as
``x-request-id``.

Errors carry ElevenLabs' body ``{"detail": {"status", "message"}}`` (``voice_not_found`` 404, ``invalid_request``
400, ``too_many_concurrent_requests`` 429, ...); an invalid body or ``output_format`` is FastAPI's 422, as
ElevenLabs (a FastAPI service) sends it and the SDK raises as ``UnprocessableEntityError``.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from fastapi import APIRouter, Request, WebSocket
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from speakwire.errors import PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, AudioPart, SegmentEnd, UtteranceEnd, WordsPart
from speakwire.server.admission import Admitted, admit
from speakwire.server.audio_response import StreamAborted, streamed_audio, streamed_response
from speakwire.server.elevenlabs import protocol as p
from speakwire.server.elevenlabs.alignment import CharacterAligner, CharTiming, http_alignment
from speakwire.server.elevenlabs.session import PROTOCOL, ElevenLabsSession
from speakwire.server.flow import file_response, write_stall
from speakwire.server.json_message import parse_json
from speakwire.server.options import resolve_speech
from speakwire.server.request_ids import current_request_id
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState
from speakwire.text.hygiene import clean_text

logger = logging.getLogger(__name__)

router = APIRouter()

INPUT_ERRORS = InputErrors(
    param="text",
    empty=None,  # blank text is refused as having nothing to speak
    unspeakable="Text has nothing to speak: it must hold letters or digits.",
    too_long="Text is {length} characters; the limit is {limit}. Split it, or stream it over stream-input.",
    too_long_error=PayloadTooLargeError,  # p.error_status: 400 max_character_limit_exceeded
)

Delivery = Literal["file", "file_with_timestamps", "stream", "stream_with_timestamps"]


@router.websocket("/v1/text-to-speech/{voice_id}/stream-input")
async def stream_input(websocket: WebSocket, voice_id: str) -> None:
    await ElevenLabsSession(websocket, websocket.app.state.speakwire, voice_id, multi=False).run()


@router.websocket("/v1/text-to-speech/{voice_id}/multi-stream-input")
async def multi_stream_input(websocket: WebSocket, voice_id: str) -> None:
    await ElevenLabsSession(websocket, websocket.app.state.speakwire, voice_id, multi=True).run()


@router.post("/v1/text-to-speech/{voice_id}", summary="ElevenLabs: speech as one audio file.")
async def convert(voice_id: str, request: Request) -> Response:
    return await _respond(request, voice_id, "file")


@router.post("/v1/text-to-speech/{voice_id}/with-timestamps", summary="ElevenLabs: one file and its alignment.")
async def convert_with_timestamps(voice_id: str, request: Request) -> Response:
    return await _respond(request, voice_id, "file_with_timestamps")


@router.post("/v1/text-to-speech/{voice_id}/stream", summary="ElevenLabs: audio streamed as it is produced.")
async def stream(voice_id: str, request: Request) -> Response:
    return await _respond(request, voice_id, "stream")


@router.post(
    "/v1/text-to-speech/{voice_id}/stream/with-timestamps",
    summary="ElevenLabs: newline-delimited JSON chunks of audio (base64) and character timings.",
)
async def stream_with_timestamps(voice_id: str, request: Request) -> Response:
    return await _respond(request, voice_id, "stream_with_timestamps")


async def _respond(request: Request, voice_id: str, delivery: Delivery) -> Response:
    """The response of one route, or ElevenLabs' error; with the ``request-id`` header either way."""
    try:
        response = await _deliver(await _start(request, voice_id, delivery), delivery)
    except _Reply as reply:
        response = reply.response
    if (request_id := current_request_id()) is not None:
        response.headers["request-id"] = request_id
    return response


async def _deliver(job: _Job, delivery: Delivery) -> Response:
    stall = write_stall(job.state, PROTOCOL)
    if delivery == "stream":
        return streamed_audio(job.admitted, job.out, stall, media_type=job.fmt.content_type)
    if delivery == "stream_with_timestamps":
        return streamed_response(job.admitted, job.timestamped_stream(), stall, media_type="application/x-ndjson")
    data, chars = await job.whole_file()
    if delivery == "file":
        return file_response(data, stall, media_type=job.fmt.content_type)
    return JSONResponse(_timestamped(data, chars))


class _Reply(Exception):
    """An error answered before (or instead of) any audio."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


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
        fields = parse_json(raw)
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


async def _start(request: Request, voice_id: str, delivery: Delivery) -> _Job:
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
        aligner = CharacterAligner()
        aligner.add_text(clean_text(text))
        settings = p.parse_voice_settings(body.voice_settings)
        engine, _, _ = state.require_ready()
        options = p.speech_options(voice_id, fmt, model_id=body.model_id, language_code=body.language_code,
                                   voice_settings=settings, seed=body.seed)  # fmt: skip
        resolved = await resolve_speech(state, engine, options)
        out = await AudioOut.open(fmt.output("stream" if delivery.startswith("stream") else "file"))
        # Checked against max_input_chars above, which may exceed the utterance's default buffer.
        admitted = admit(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars)
    except SpeakwireError as exc:
        raise _error(exc, voice_id) from None
    try:
        admitted.say(text)  # gives the slot back itself if the text is refused
    except SpeakwireError as exc:
        raise _error(exc, voice_id) from None
    return _Job(state, admitted, out, fmt, aligner)


@dataclass(slots=True)
class _Job:
    """One HTTP request's utterance and its output; the delivery gives the slot back however it ends."""

    state: ServerState
    admitted: Admitted
    out: AudioOut
    fmt: p.OutputFormat
    aligner: CharacterAligner

    async def whole_file(self) -> tuple[bytes, list[CharTiming]]:
        """The file and every character's timing; a failed segment is answered with its error."""
        rate = self.fmt.sample_rate
        data, chars = b"", []
        async with self.admitted:
            async for part in self.out.parts(self.admitted.utterance):
                if isinstance(part, AudioPart | WordsPart):  # an aligner's words: placed up to their sentence's end
                    chars += self.aligner.place(part.words, (part.start + part.samples) / rate)
                elif isinstance(part, SegmentEnd) and part.error is not None:
                    raise _error(part.error, "")
                elif isinstance(part, UtteranceEnd):
                    data = part.data
                    chars += self.aligner.finish(part.samples / rate)
        return data, chars

    async def timestamped_stream(self) -> AsyncIterator[bytes]:
        """One JSON line per piece of encoded audio, with the characters whose words start in it.

        An aligner's words come after their sentence's audio: their characters ride on the next line (times are
        seconds from the start of the audio, so a line may carry characters of audio sent before it).
        """
        rate = self.fmt.sample_rate
        chars: list[CharTiming] = []
        async for part in self.out.parts(self.admitted.utterance):
            if isinstance(part, WordsPart):
                chars += self.aligner.place(part.words, (part.start + part.samples) / rate)
            elif isinstance(part, AudioPart):
                chars += self.aligner.place(part.words, (part.start + part.samples) / rate)
                if part.data:
                    yield _line(part.data, chars)
                    chars = []
            elif isinstance(part, SegmentEnd) and part.error is not None:
                logger.error("aborting the elevenlabs audio stream: %s", part.error.message)
                raise StreamAborted(part.error.message)
            elif isinstance(part, UtteranceEnd):
                chars += self.aligner.finish(part.samples / rate)
                if part.data or chars:
                    yield _line(part.data, chars)


def _timestamped(data: bytes, chars: list[CharTiming]) -> dict[str, object]:
    alignment = http_alignment(chars)
    return {"audio_base64": base64.b64encode(data).decode(), "alignment": alignment, "normalized_alignment": alignment}


def _line(data: bytes, chars: list[CharTiming]) -> bytes:
    return (json.dumps(_timestamped(data, chars), separators=(",", ":"), ensure_ascii=False) + "\n").encode()
