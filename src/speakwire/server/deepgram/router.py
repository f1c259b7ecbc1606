"""Routes of the Deepgram Aura dialect: the ``/v1/speak`` WebSocket and ``POST /v1/speak``.

REST audio is streamed as it is produced, in the query's encoding and container, with the
``dg-*`` headers Deepgram sends; errors are Deepgram's ``{"err_code", "err_msg", "request_id"}``.
``dg-request-id`` and the error's ``request_id`` are the request's ``x-request-id`` (``server.request_ids``).
A request without a valid key is refused by ``ApiKeyMiddleware`` before it gets here (401, OpenAI's
body: the SDK raises ``ApiError(status_code=401)`` either way).
"""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse, Response

from speakwire.encoders.registry import CONTENT_TYPES
from speakwire.errors import PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, OutputSpec
from speakwire.server.admission import admit
from speakwire.server.audio_response import streamed_audio
from speakwire.server.deepgram import protocol as p
from speakwire.server.deepgram.session import PROTOCOL, DeepgramSpeakSession
from speakwire.server.flow import write_stall
from speakwire.server.options import SpeechOptions, resolve_speech
from speakwire.server.request_ids import scope_request_id
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

router = APIRouter()

INPUT_ERRORS = InputErrors(
    param="text",  # not a query field, so p.from_speakwire answers 400 BAD_REQUEST (and 413 PAYLOAD_TOO_LARGE)
    empty="Text cannot be empty.",
    unspeakable="Text has nothing to speak: no letters or digits.",
    too_long="Text is {length} characters; the limit is {limit}. Split the text.",
    too_long_error=PayloadTooLargeError,
)


@router.websocket("/v1/speak")
async def speak_stream(websocket: WebSocket) -> None:
    await DeepgramSpeakSession(websocket, websocket.app.state.speakwire).run()


@router.post("/v1/speak", summary="Generate speech (Deepgram Aura-compatible): audio streamed as it is made.")
async def speak(request: Request) -> Response:
    state: ServerState = request.app.state.speakwire
    request_id = scope_request_id(request.scope)  # dg-request-id is our x-request-id: one id per request
    try:
        params = p.parse_rest_query(request.query_params)
        text = p.parse_rest_body(await request.body(), request.headers.get("content-type", "application/json"))
        check_input(text, state.settings.max_input_chars, INPUT_ERRORS)
        engine, _, _ = state.require_ready()
        model, voice = p.speech_target(params.model, state.served_models(engine.info))
        options = SpeechOptions(model=model, voice=voice, response_format=params.response_format,
                                speed=params.speed, sample_rate=params.sample_rate, seed=params.seed)  # fmt: skip
        resolved = await resolve_speech(state, engine, options)
        spec = OutputSpec(resolved.response_format, resolved.output_rate, prefix=params.wav_prefix())
        out = await AudioOut.open(spec)
        # Checked against max_input_chars above, which may exceed the utterance's default buffer.
        admitted = admit(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars,
                         request_id=request_id)  # fmt: skip
    except p.DeepgramError as exc:
        return _error(exc, request_id)
    except SpeakwireError as exc:
        response = _error(p.from_speakwire(exc), request_id)
        if isinstance(exc, TooBusyError):
            response.headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
        return response
    try:
        admitted.say(text)
    except SpeakwireError as exc:
        return _error(p.from_speakwire(exc), request_id)
    speaker = resolved.request.voice or engine.info.model
    headers = {
        "dg-request-id": request_id,
        "dg-model-name": params.model or speaker,
        "dg-model-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"speakwire:{engine.info.model}:{speaker}")),
        "dg-char-count": str(len(text)),
        "cache-control": "no-store",
    }
    fmt = resolved.response_format
    media_type = "audio/wav" if params.container == "wav" else CONTENT_TYPES[fmt]
    return streamed_audio(admitted, out, write_stall(state, PROTOCOL), media_type=media_type, headers=headers)


def _error(error: p.DeepgramError, request_id: str) -> JSONResponse:
    if error.status >= 500:
        logger.error("deepgram speak: %s", error.message)
    return JSONResponse(p.error_body(error, request_id), status_code=error.status,
                        headers=p.error_headers(error, request_id))  # fmt: skip
