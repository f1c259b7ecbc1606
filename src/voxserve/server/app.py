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
from voxserve.server.sagemaker import router as sagemaker_router
from voxserve.server.sagemaker.routing import InvocationsRouter
from voxserve.server.speech import router as speech_router
from voxserve.server.state import ServerState
from voxserve.server.stream import router as stream_router
from voxserve.server.voices import router as voices_router
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
    app.include_router(stream_router.router)
    app.include_router(sagemaker_router.router)
    app.include_router(voices_router.router)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key, trust_invocations=settings.sagemaker)
    # Outermost: /invocations is rewritten before auth and routing see it.
    app.add_middleware(InvocationsRouter, default_route=settings.sagemaker_default_route, api=app)
    return app
