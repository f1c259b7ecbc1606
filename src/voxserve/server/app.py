"""create_app: the FastAPI application, its routers, and the engine's lifetime."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import voxserve
from voxserve.engines.base import Engine
from voxserve.server import info
from voxserve.server.auth import ApiKeyMiddleware
from voxserve.server.errors import install_error_handlers
from voxserve.server.speech import router as speech_router
from voxserve.server.state import ServerState
from voxserve.settings import Settings

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, engine: Engine | None = None) -> FastAPI:
    """Build the app; the engine loads in the background at startup (or ``engine`` is used as given)."""
    settings = settings or Settings()
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start(engine)
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="voxserve",
        version=voxserve.__version__,
        description="Real-time streaming text-to-speech: OpenAI HTTP, vLLM-Omni WebSocket, SageMaker.",
        lifespan=lifespan,
    )
    app.state.vox = state
    install_error_handlers(app)
    app.include_router(info.router)
    app.include_router(speech_router.router)
    for name in ("stream", "sagemaker"):
        _include_optional(app, name)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    return app


def _include_optional(app: FastAPI, name: str) -> None:
    """Routers built in later modules (WebSocket stream, SageMaker) plug in here when present."""
    import importlib

    try:
        module = importlib.import_module(f"voxserve.server.{name}.router")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"voxserve.server.{name}"):
            return
        raise
    app.include_router(module.router)
