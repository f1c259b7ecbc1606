"""SageMaker's routes: ``/ping`` (GET and POST; 200 only when ready, not draining) and the bidirectional WebSocket.

``POST /invocations`` itself is handled by ``routing.InvocationsRouter``, which rewrites it
to the route the request names.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse

from speakwire.server.state import ServerState
from speakwire.server.stream.session import StreamSession

router = APIRouter()


@router.get("/ping", summary="SageMaker health check: 200 once ready.")
async def ping(request: Request) -> JSONResponse:
    return _ping(request.app.state.speakwire)


@router.post("/ping", summary="SageMaker health check (POST form).")
async def ping_post(request: Request) -> JSONResponse:
    return _ping(request.app.state.speakwire)


def _ping(state: ServerState) -> JSONResponse:
    if state.draining:  # SIGTERM came (server.drain): stop routing here while the streams in flight finish
        return JSONResponse({"status": "draining"}, 503, headers={"Retry-After": "1"})
    if (error := state.engine_error) is not None:
        return JSONResponse({"status": "unhealthy", "error": error}, 503)
    if state.ready:
        return JSONResponse({"status": "healthy"})
    return JSONResponse({"status": "failed" if state.load_error else "loading", "error": state.load_error}, 503)


@router.websocket("/invocations-bidirectional-stream")
async def bidirectional_stream(websocket: WebSocket) -> None:
    """SageMaker's default bidirectional path: the same session as /v1/audio/speech/stream."""
    await StreamSession(websocket, websocket.app.state.speakwire, protocol="sagemaker").run()
