"""Probes and catalogue routes: /health, /ready, /v1/models, /metrics (voices: ``server/voices``)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from speakwire.server.state import ServerState

router = APIRouter()


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.speakwire
    return state


@router.get("/health", summary="Liveness: the process answers.")
async def health() -> dict[str, str]:
    return {"status": "healthy"}


@router.get("/ready", summary="Readiness: 200 once the engine is loaded and has synthesized once.")
async def ready(request: Request) -> JSONResponse:
    state = _state(request)
    if state.draining:  # SIGTERM: a load balancer stops sending here while the streams in flight finish
        return JSONResponse({"status": "draining"}, status_code=503, headers={"Retry-After": "1"})
    if (error := state.engine_error) is not None:
        return JSONResponse({"status": "unhealthy", "error": error}, status_code=503)
    if state.ready:
        body: dict[str, object] = {"status": "ready", "engine": state.engine.info.name if state.engine else None}
        if state.capacity is not None and state.pipeline is not None:
            state.refresh_capacity()  # the live figure and the limit admission would use now
            pipeline = state.pipeline
            body["capacity"] = state.capacity.to_dict()
            body["load"] = {
                "active_streams": pipeline.active,
                "load_ratio": round(pipeline.active / max(pipeline.max_streams, 1), 3),
                "queued_segments": pipeline.scheduler.queued,
                "busy_workers": pipeline.scheduler.busy,
            }
        return JSONResponse(body)
    body = {"status": "failed" if state.load_error else "loading", "error": state.load_error}
    return JSONResponse(body, status_code=503)


@router.get("/v1/models", summary="Models served (OpenAI shape), aliases included.")
async def models(request: Request) -> dict[str, object]:
    state = _state(request)
    engine, _, _ = state.require_ready()
    created = int(time.time())
    ids = dict.fromkeys([*state.served_models(engine.info), *state.model_aliases()])
    data = [{"id": mid, "object": "model", "created": created, "owned_by": "speakwire"} for mid in ids]
    return {"object": "list", "data": data}


@router.get("/metrics", summary="Prometheus metrics.")
async def metrics(request: Request) -> Response:
    state = _state(request)
    state.refresh_capacity()  # the capacity gauges show the work done until now
    body = state.metrics.render() if state.metrics is not None else b""
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
