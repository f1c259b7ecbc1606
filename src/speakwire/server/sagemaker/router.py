"""SageMaker's routes: ``/ping`` (GET and POST; 200 only when ready, not draining) and the bidirectional WebSocket.

``POST /invocations`` itself is handled by ``routing.InvocationsRouter``, which rewrites it
to the route the request names. The bidirectional stream's default path serves NVIDIA Magpie's realtime
protocol when the client's first message is one of its events (pipecat's ``NvidiaSageMakerTTSService``), and
the speech stream (vLLM-Omni's protocol) otherwise (``first_message``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse

from speakwire.server.magpie.protocol import is_realtime_event
from speakwire.server.magpie.session import MagpieSession
from speakwire.server.sagemaker.first_message import ReplayingWebSocket, message_text, read_first_message
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
    """SageMaker's default bidirectional path: Magpie's realtime session if the first message is one of its events,
    else the same session as /v1/audio/speech/stream (which also answers a client that sent nothing in time)."""
    state: ServerState = websocket.app.state.speakwire
    await websocket.accept()
    first = await read_first_message(websocket, state.settings.ws_config_timeout_s)
    replaying = ReplayingWebSocket(websocket, first)
    if is_realtime_event(message_text(first)):
        await MagpieSession(replaying, state).run()
    else:
        await StreamSession(replaying, state, protocol="sagemaker").run()
