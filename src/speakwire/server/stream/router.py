"""WebSocket routes of the speech stream (the SageMaker bidirectional path reuses the same session)."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from speakwire.server.stream.session import StreamSession

router = APIRouter()


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(websocket: WebSocket) -> None:
    await StreamSession(websocket, websocket.app.state.speakwire).run()
