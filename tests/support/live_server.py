"""A real speakwire server on a free loopback port, in a background thread, for tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from speakwire.cli.serve import uvicorn_config
from speakwire.engines.base import Engine
from speakwire.server.app import create_app
from speakwire.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LiveServer:
    settings: Settings
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.settings.port}/v1/audio/speech/stream"

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.server.config.app.state.speakwire  # type: ignore[union-attr]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


TEST_MAX_STREAMS = 64
"""Admission limit of test servers unless a test sets its own or asks for the measured one: the capacity
measured at warm-up moves with the load of a shared test machine, and most tests are not about it."""


def start_server(
    settings: Settings | None = None,
    *,
    engine: Engine | None = None,
    ready_timeout: float = 60,
    measured_capacity: bool = False,
    wrap: Callable[[Any], Any] | None = None,
) -> LiveServer:
    """``wrap``: an ASGI layer put around the whole app (outside every middleware), as a transport would see it;
    it must pass attribute reads (``state``) through to the app."""
    settings = settings or Settings()
    if settings.max_streams is None and not measured_capacity:
        settings.max_streams = TEST_MAX_STREAMS
    settings.host, settings.port = "127.0.0.1", free_port()
    app = create_app(settings, engine=engine)
    served = app if wrap is None else wrap(app)
    server = uvicorn.Server(uvicorn_config(served, host=settings.host, port=settings.port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="speakwire-test-server", daemon=True)
    thread.start()
    live = LiveServer(settings, server, thread)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{live.url}/ready", timeout=2).status_code == 200:
                return live
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    live.stop()
    raise RuntimeError("test server did not become ready")
