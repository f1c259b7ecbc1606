"""Routes of the OpenAI-compatible speech API."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from voxserve.server.speech.handler import create_speech
from voxserve.server.speech.protocol import SpeechRequest

router = APIRouter()


@router.post(
    "/v1/audio/speech",
    summary="Generate speech (OpenAI-compatible): a whole file, a raw chunked stream, or SSE events.",
    response_class=Response,
)
async def speech(body: SpeechRequest, request: Request) -> Response:
    return await create_speech(request.app.state.vox, body)
