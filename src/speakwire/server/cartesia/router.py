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
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse, Response

from speakwire.encoders.off_loop import LoopEncoder, open_encoder
from speakwire.encoders.registry import create_encoder
from speakwire.errors import BadRequestError, SpeakwireError, TooBusyError
from speakwire.server.cartesia import protocol as p
from speakwire.server.cartesia.session import PROTOCOL, CartesiaSession
from speakwire.server.flow import StallingResponse, write_stall
from speakwire.server.options import resolve_speech
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.synthesis import AudioReady, SegmentFinished, Utterance, UtteranceFinished

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


class StreamAborted(Exception):
    """Raised inside a ``/tts/bytes`` stream so the server drops the connection."""


async def _speak(request: Request, *, sse: bool) -> Response:
    state: ServerState = request.app.state.speakwire
    request_id = str(uuid.uuid4())
    utterance: Utterance | None = None
    try:
        body = await _json_body(request)
        speech = p.parse_http_request(body, sse=sse)
        check_input(speech.transcript, state.settings.max_input_chars, INPUT_ERRORS)
        engine, _, _ = state.require_ready()
        resolved = await resolve_speech(state, engine, speech.spec.options)
        fmt, rate = speech.spec.output.encoder_format, resolved.output_rate
        encoder = await open_encoder(fmt, lambda: create_encoder(fmt, rate, streaming=True))
        # Checked against max_input_chars above, which may exceed the utterance's default buffer.
        utterance = open_utterance(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars)
        utterance.feed(speech.transcript)
        utterance.finish()
    except SpeakwireError as exc:
        if utterance is not None:
            close_utterance(state, utterance, PROTOCOL)
        return _error_response(exc, request_id)
    except BaseException:
        if utterance is not None:
            close_utterance(state, utterance, PROTOCOL)
        raise
    if sse:
        stream = _sse_stream(utterance, encoder, speech, request_id)
        media_type = "text/event-stream"
    else:
        stream = _bytes_stream(utterance, encoder, speech.spec.volume)
        media_type = encoder.content_type
    return StallingResponse(
        _closing(state, utterance, stream), write_stall(state, PROTOCOL), media_type=media_type,
        headers={"Cache-Control": "no-store"},
    )  # fmt: skip


async def _json_body(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"Request body is not valid JSON: {exc}") from exc


def _error_response(exc: SpeakwireError, request_id: str) -> JSONResponse:
    response = JSONResponse(p.http_error_body(exc, request_id=request_id), status_code=exc.status_code)
    if isinstance(exc, TooBusyError):
        response.headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    if exc.status_code >= 500:
        logger.error("%s: %s", exc.error_type, exc.message)
    return response


async def _closing(state: ServerState, utterance: Utterance, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Release the utterance however the response ends: done, failed, or the client went away (cancel)."""
    try:
        async for data in stream:
            yield data
    finally:
        close_utterance(state, utterance, PROTOCOL)


async def _bytes_stream(utterance: Utterance, encoder: LoopEncoder, volume: float) -> AsyncIterator[bytes]:
    pending = encoder.header()  # sent together with the first audio, so the first byte is audio
    async for event in utterance.events():
        if isinstance(event, AudioReady):
            data = pending + await encoder.encode(event.samples if volume == 1.0 else event.samples * volume)
            pending = b""
            if data:
                yield data
        elif isinstance(event, SegmentFinished) and event.error is not None:
            logger.error("aborting /tts/bytes stream: %s", event.error.message)
            raise StreamAborted(event.error.message)
    yield pending + await encoder.finish()


async def _sse_stream(
    utterance: Utterance, encoder: LoopEncoder, speech: p.HttpRequest, request_id: str
) -> AsyncIterator[bytes]:
    context_id, spec = speech.context_id, speech.spec
    produced_at = time.monotonic()
    async for event in utterance.events():
        if isinstance(event, AudioReady):
            now = time.monotonic()
            step_ms, produced_at = (now - produced_at) * 1000, now
            data = await encoder.encode(event.samples if spec.volume == 1.0 else event.samples * spec.volume)
            if data:
                yield p.sse_frame(p.chunk_event(context_id, data, step_ms, None))
            if spec.add_timestamps and event.words:
                yield p.sse_frame(p.timestamps_event(context_id, event.words, 0.0, None))
        elif isinstance(event, SegmentFinished) and event.error is not None:
            yield p.sse_frame(p.error_event(event.error, request_id=request_id, context_id=context_id))
            return
        elif isinstance(event, UtteranceFinished):
            yield p.sse_frame(p.done_event(context_id))
