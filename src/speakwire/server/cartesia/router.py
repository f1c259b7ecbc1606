"""Cartesia's routes: the WebSocket ``/tts/websocket``, and ``POST /tts/bytes`` and ``POST /tts/sse``.

``/tts/bytes`` streams the audio in the requested container (raw, wav or mp3) as it is produced;
``/tts/sse`` sends ``chunk``/``timestamps``/``done`` events. Errors before the first byte are
Cartesia's JSON (``{error_code, title, message, request_id}``) with the matching status; a failure
mid-stream drops a ``/tts/bytes`` connection (so a truncated body is not taken for complete audio)
and is an ``error`` event on ``/tts/sse``. ``Cartesia-Version`` is accepted whatever its value.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse, Response

from speakwire.errors import BadRequestError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, AudioPart, OutputSpec, SegmentEnd, UtteranceEnd, WordsPart
from speakwire.server.admission import Admitted, admit
from speakwire.server.audio_response import streamed_audio, streamed_response
from speakwire.server.cartesia import protocol as p
from speakwire.server.cartesia.session import PROTOCOL, CartesiaSession
from speakwire.server.flow import write_stall
from speakwire.server.json_message import parse_json
from speakwire.server.options import resolve_speech
from speakwire.server.request_ids import scope_request_id
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

router = APIRouter()

INPUT_ERRORS = InputErrors(
    param="transcript",
    empty=None,  # p.parse_http_request refuses an empty or blank transcript in its own words
    unspeakable="transcript has nothing to speak: no letters or digits once control characters, invisible "
    "formatting characters and invalid code points are removed.",
    too_long="transcript is {length} characters; the limit is {limit}. Split it, or stream it over the "
    "WebSocket /tts/websocket.",
)


@router.websocket("/tts/websocket")
async def tts_websocket(websocket: WebSocket) -> None:
    await CartesiaSession(websocket, websocket.app.state.speakwire).run()


@router.post("/tts/bytes", summary="Cartesia text to speech: audio bytes (raw, wav or mp3), streamed.")
async def tts_bytes(request: Request) -> Response:
    return await _speak(request, sse=False)


@router.post("/tts/sse", summary="Cartesia text to speech: server-sent chunk, timestamps and done events.")
async def tts_sse(request: Request) -> Response:
    return await _speak(request, sse=True)


async def _speak(request: Request, *, sse: bool) -> Response:
    state: ServerState = request.app.state.speakwire
    request_id = scope_request_id(request.scope)  # the error's request_id is our x-request-id
    try:
        body = await _json_body(request)
        speech = p.parse_http_request(body, sse=sse)
        check_input(speech.transcript, state.settings.max_input_chars, INPUT_ERRORS)
        engine, _, _ = state.require_ready()
        resolved = await resolve_speech(state, engine, speech.spec.options)
        spec = OutputSpec(speech.spec.output.encoder_format, resolved.output_rate, gain=speech.spec.volume)
        out = await AudioOut.open(spec)
        # Checked against max_input_chars above, which may exceed the utterance's default buffer.
        admitted = admit(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars,
                         request_id=request_id)  # fmt: skip
    except SpeakwireError as exc:
        return _error_response(exc, request_id)
    try:
        admitted.say(speech.transcript)
    except SpeakwireError as exc:
        return _error_response(exc, request_id)
    stall = write_stall(state, PROTOCOL)
    headers = {"Cache-Control": "no-store"}
    if sse:
        stream = _sse_stream(out, admitted, speech)
        return streamed_response(admitted, stream, stall, media_type="text/event-stream", headers=headers)
    return streamed_audio(admitted, out, stall, media_type=out.content_type, headers=headers)


async def _json_body(request: Request) -> object:
    raw = await request.body()
    try:
        return parse_json(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"Request body is not valid JSON: {exc}") from exc


def _error_response(exc: SpeakwireError, request_id: str) -> JSONResponse:
    response = JSONResponse(p.http_error_body(exc, request_id=request_id), status_code=exc.status_code)
    if isinstance(exc, TooBusyError):
        response.headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    if exc.status_code >= 500:
        logger.error("%s: %s", exc.error_type, exc.message)
    return response


async def _sse_stream(out: AudioOut, admitted: Admitted, speech: p.HttpRequest) -> AsyncIterator[bytes]:
    """``chunk`` and ``timestamps`` events as the audio is made, then ``done`` (or the failure's ``error``)."""
    context_id, spec, request_id = speech.context_id, speech.spec, admitted.request_id
    produced_at = time.monotonic()
    async for part in out.parts(admitted.utterance):
        if isinstance(part, AudioPart):
            now = time.monotonic()
            step_ms, produced_at = (now - produced_at) * 1000, now
            if part.data:
                yield p.sse_frame(p.chunk_event(context_id, part.data, step_ms, None, request_id))
            if spec.add_timestamps and part.words:
                yield p.sse_frame(p.timestamps_event(context_id, part.words, 0.0, None, request_id))
        elif isinstance(part, WordsPart):  # an aligner's words, as soon as they are in (after their audio)
            if spec.add_timestamps and part.words:
                yield p.sse_frame(p.timestamps_event(context_id, part.words, 0.0, None, request_id))
        elif isinstance(part, SegmentEnd) and part.error is not None:
            yield p.sse_frame(p.error_event(part.error, request_id=request_id, context_id=context_id))
            return
        elif isinstance(part, UtteranceEnd):
            if part.data:
                yield p.sse_frame(p.chunk_event(context_id, part.data, 0.0, None, request_id))
            yield p.sse_frame(p.done_event(context_id))
