"""create_app: the FastAPI application, its routers, and the engine's lifetime."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp

import speakwire
from speakwire.engines.base import Engine
from speakwire.server import info
from speakwire.server.auth import ApiKeyMiddleware
from speakwire.server.body_limit import BodyLimitMiddleware
from speakwire.server.cartesia import router as cartesia_router
from speakwire.server.deepgram import router as deepgram_router
from speakwire.server.drain import InFlightMiddleware
from speakwire.server.elevenlabs import router as elevenlabs_router
from speakwire.server.errors import install_error_handlers
from speakwire.server.magpie import router as magpie_router
from speakwire.server.openapi import document as openapi_document
from speakwire.server.redaction import install_log_redaction
from speakwire.server.request_ids import RequestIdMiddleware
from speakwire.server.sagemaker import router as sagemaker_router
from speakwire.server.sagemaker.routing import InvocationsRouter
from speakwire.server.speech import router as speech_router
from speakwire.server.state import ServerState
from speakwire.server.stream import router as stream_router
from speakwire.server.voices import router as voices_router
from speakwire.server.wyoming.listener import WyomingListener
from speakwire.settings import Settings

logger = logging.getLogger(__name__)


class SpeakwireApp(FastAPI):
    """FastAPI with request ids around everything: ``add_middleware`` puts a middleware inside Starlette's
    ``ServerErrorMiddleware``, whose 500 for an unhandled error would then go out without ``x-request-id``."""

    def build_middleware_stack(self) -> ASGIApp:
        return RequestIdMiddleware(super().build_middleware_stack())


def create_app(settings: Settings | None = None, *, engine: Engine | None = None) -> FastAPI:
    """Build the app; the engine loads in the background at startup (or ``engine`` is used as given)."""
    settings = settings or Settings()
    state = ServerState(settings)
    wyoming = WyomingListener(state) if settings.wyoming_port is not None else None
    if wyoming is not None:
        state.ready_hooks.append(wyoming.start)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        install_log_redaction()  # after uvicorn has configured its loggers
        await state.start(engine)
        try:
            yield
        finally:
            if wyoming is not None:
                await wyoming.stop()  # its connections' synthesis ends before the scheduler closes
            await state.stop()

    app = SpeakwireApp(
        title="speakwire",
        version=speakwire.__version__,
        description="Real-time streaming text-to-speech: OpenAI HTTP, vLLM-Omni WebSocket, SageMaker.",
        lifespan=lifespan,
    )
    app.state.speakwire = state
    install_error_handlers(app)
    app.include_router(info.router)
    app.include_router(speech_router.router)
    app.include_router(stream_router.router)
    app.include_router(sagemaker_router.router)
    app.include_router(voices_router.router)
    app.include_router(cartesia_router.router)
    app.include_router(deepgram_router.router)
    app.include_router(elevenlabs_router.router)
    app.include_router(magpie_router.router)
    openapi_document.install(app, settings, lambda: state.engine.info if state.engine else None)
    if settings.api_key:
        app.add_middleware(
            ApiKeyMiddleware,
            api_key=settings.api_key,
            trust_invocations=settings.sagemaker,
            public_metrics=settings.public_metrics,
        )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Outermost: /invocations is rewritten before auth and routing see it.
    app.add_middleware(InvocationsRouter, default_route=settings.sagemaker_default_route, api=app)
    # Around everything but the request ids (SpeakwireApp): a drain waits for every HTTP response until its last
    # part is sent.
    app.add_middleware(InFlightMiddleware, state=state)
    return app
