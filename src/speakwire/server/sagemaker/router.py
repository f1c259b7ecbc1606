"""SageMaker's routes: ``/ping`` (GET and POST; 200 only when ready, not draining) and the bidirectional WebSocket.

``POST /invocations`` itself is handled by ``routing.InvocationsRouter``, which rewrites it
to the route the request names. The bidirectional stream's default path serves NVIDIA Magpie's realtime
protocol when the client's first message is one of its events (pipecat's ``NvidiaSageMakerTTSService``), and
the speech stream (vLLM-Omni's protocol) otherwise (``first_message``).
"""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, Request, WebSocket
from starlette.responses import JSONResponse

from speakwire.server.limits import CLOSE_POLICY
from speakwire.server.magpie.protocol import is_realtime_event
from speakwire.server.magpie.session import MagpieSession
from speakwire.server.sagemaker.first_message import (
    GREETING_GRACE_S,
    ReplayingWebSocket,
    message_text,
    read_first_message,
)
from speakwire.server.state import ServerState
from speakwire.server.stream.session import StreamSession
from speakwire.server.websocket_channel import ChannelClosed

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
    else the same session as /v1/audio/speech/stream.

    A client silent for ``GREETING_GRACE_S`` is greeted as Magpie (a NIM client waits for that greeting); one
    silent for the whole config timeout is closed 1008, once, rather than waited for by the session again.
    """
    state: ServerState = websocket.app.state.speakwire
    timeout_s = state.settings.ws_config_timeout_s
    await websocket.accept()
    replaying = ReplayingWebSocket(websocket)
    magpie = MagpieSession(replaying, state)
    first = await read_first_message(websocket, min(GREETING_GRACE_S, timeout_s))
    if first is None and timeout_s > GREETING_GRACE_S and not state.draining:
        try:
            await magpie.greet()
        except ChannelClosed:
            return
        first = await read_first_message(websocket, timeout_s - GREETING_GRACE_S)
    if first is None and not state.draining:  # (draining: the session below refuses it its protocol's way)
        reason = f"No message within {timeout_s:g} s: send session.config or a Magpie realtime event first."
        with contextlib.suppress(Exception):
            await websocket.close(CLOSE_POLICY, reason[:120])
        return
    replaying.replay(first)
    if is_realtime_event(message_text(first)):
        await magpie.run()
    else:
        # In SageMaker mode IAM authenticated the stream, as /invocations (server.auth): no key, whichever session.
        await StreamSession(replaying, state, protocol="sagemaker", iam_authenticated=state.settings.sagemaker).run()
