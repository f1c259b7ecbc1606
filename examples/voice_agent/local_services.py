"""``--local``: the three endpoints on this machine, nothing paid for.

- the Voxtral stand-in (``voxtral_standin``, PocketSphinx) and the responder (``responder``), each an app served
  by uvicorn in a thread of this process on a free loopback port;
- a speakwire server, started as its own process with the ``speakwire serve`` command (the example is a client
  of speakwire, as on SageMaker);
- SageMaker's bidirectional stream between the agent and the first and last (``local_sagemaker``): pipecat's
  SageMaker services reach endpoints named ``STT_ENDPOINT`` and ``TTS_ENDPOINT``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

STT_ENDPOINT = "voxtral-local"
TTS_ENDPOINT = "speakwire-local"


@dataclass
class ServedApp:
    """An ASGI app served by uvicorn in a daemon thread."""

    server: uvicorn.Server
    thread: threading.Thread
    port: int

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(app: Any, name: str) -> ServedApp:
    """Serve ``app`` on a free loopback port in a daemon thread; returns once it listens."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (server.started and server.servers):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.02)
    return ServedApp(server, thread, server.servers[0].sockets[0].getsockname()[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class SpeakwireServer:
    """``speakwire serve`` in a child process, with its embedded Piper voice."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_speakwire(timeout: float = 120) -> SpeakwireServer:
    """Start a speakwire server on a free loopback port and wait until ``/ready`` answers 200."""
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="voice-agent-speakwire-")
    command = [sys.executable, "-m", "speakwire", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--max-streams", "8", "--data-dir", data_dir]  # fmt: skip
    log = open(os.path.join(data_dir, "speakwire.log"), "wb")  # noqa: SIM115 (the child process writes it)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    server = SpeakwireServer(process, port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"speakwire serve exited with {process.returncode}: see {data_dir}/speakwire.log")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/ready", timeout=2).status_code == 200:
                return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError("speakwire did not become ready")


@dataclass
class LocalStack:
    """What ``--local`` runs: the endpoints, and where the agent finds them."""

    standin: Any
    responder: ServedApp
    speakwire: SpeakwireServer

    @property
    def llm_url(self) -> str:
        return f"http://127.0.0.1:{self.responder.port}/v1"

    @property
    def stt_url(self) -> str:
        return self.standin.url  # type: ignore[no-any-return]


@contextlib.contextmanager
def local_stack(*, relay: bool = True) -> Iterator[LocalStack]:
    """Start the stand-in, the responder and speakwire; with ``relay``, route pipecat's SageMaker client to them."""
    import local_sagemaker
    import responder
    import voxtral_standin

    standin = voxtral_standin.start()
    answers = serve(responder.create_app(), "responder")
    try:
        speakwire = start_speakwire()
    except Exception:
        standin.stop()
        answers.stop()
        raise
    try:
        if relay:
            local_sagemaker.install({STT_ENDPOINT: standin.port, TTS_ENDPOINT: speakwire.port})
        yield LocalStack(standin, answers, speakwire)
    finally:
        speakwire.stop()
        answers.stop()
        standin.stop()
