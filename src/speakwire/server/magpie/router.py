"""Magpie's HTTP route: the JSON body NVIDIA's SageMaker wrapper takes on ``/invocations``, answered with raw PCM16.

``POST /invocations`` reaches it without a route attribute when its body is Magpie's shape (``text`` and no
``input``; ``server.sagemaker.routing``), or by ``route=/v1/magpie/invocations``. The audio streams as it is
made, through the one HTTP audio path (``server.audio_response``); errors are the wrapper's ``{"error": ...}``.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from speakwire.errors import PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, OutputSpec
from speakwire.server.admission import admit
from speakwire.server.audio_response import streamed_audio
from speakwire.server.flow import write_stall
from speakwire.server.magpie import protocol as p
from speakwire.server.magpie.session import PROTOCOL
from speakwire.server.options import resolve_speech
from speakwire.server.request_ids import scope_request_id
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

router = APIRouter()

MEDIA_TYPE = "application/octet-stream"

INPUT_ERRORS = InputErrors(
    param="text",
    empty=None,  # parse_http_body refuses it as the wrapper does ("text field is required")
    unspeakable="text has nothing to speak: no letters or digits",
    too_long="text is {length} characters; the limit is {limit}",
    too_long_error=PayloadTooLargeError,
)


@router.post(
    p.INVOCATIONS_PATH,
    summary="NVIDIA Magpie's SageMaker body {text, voice_name, language_code, sample_rate_hz} → raw PCM16 mono.",
    response_class=Response,
)
async def synthesize(request: Request) -> Response:
    state: ServerState = request.app.state.speakwire
    request_id = scope_request_id(request.scope)
    try:
        body = p.parse_http_body(await request.body())
        check_input(body.text, state.settings.max_input_chars, INPUT_ERRORS)
        engine, _, _ = state.require_ready()
        resolved = await resolve_speech(state, engine, body.config.speech_options())
        out = await AudioOut.open(OutputSpec("pcm", resolved.output_rate))
        admitted = admit(state, resolved, protocol=PROTOCOL, max_buffer_chars=state.settings.max_input_chars,
                         request_id=request_id)  # fmt: skip
        admitted.say(body.text)
    except p.MagpieError as exc:
        return _error(exc)
    except SpeakwireError as exc:
        response = _error(p.from_speakwire(exc))
        if isinstance(exc, TooBusyError):
            response.headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
        return response
    stall = write_stall(state, PROTOCOL)
    return streamed_audio(admitted, out, stall, media_type=MEDIA_TYPE, headers={"cache-control": "no-store"})


def _error(error: p.MagpieError) -> JSONResponse:
    if error.status >= 500:
        logger.error("magpie invocation: %s", error.message)
    return JSONResponse(p.http_error_body(error), status_code=error.status)
