"""Servers under test as child processes, and the addresses benchmarks reach them at.

Every benchmark starts its servers through ``ServerProcess``: on a free loopback port, its output in a log
file, ready only when it says so, and always stopped again (SIGTERM, then SIGKILL), so a benchmark never
leaves a process behind or listens beyond loopback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def websocket_url(http_url: str, path: str = "") -> str:
    """``http://host:port`` (or https) as ``ws://host:port`` (or wss) with ``path`` appended."""
    base = http_url.rstrip("/")
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(plain):
            base = secure + base[len(plain) :]
    return base + path


def answers_200(url: str) -> Callable[[], bool]:
    """A readiness check: GET ``url`` answers 200."""

    def check() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url, timeout=2).status_code == 200
        return False

    return check


class ServerProcess:
    """A child process serving on loopback; a context manager that waits for readiness and stops it.

    Args:
        name: For messages and the log file name.
        argv: The command (``sys.executable`` first, usually).
        port: The port it listens on (``url`` is ``http://127.0.0.1:<port>``).
        log_dir: stdout and stderr go to ``<log_dir>/<name>.log`` (kept for post-mortems).
        ready: Called until it returns True; by default GET ``<url>/ready`` answers 200 (speakwire: only
            after warm-up).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        port: int,
        log_dir: Path,
        ready: Callable[[], bool] | None = None,
        ready_timeout_s: float = 180.0,
    ):
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.log_path = log_dir / f"{name}.log"
        self.ready = ready or answers_200(f"{self.url}/ready")
        self.ready_timeout_s = ready_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self._process.returncode} before it was ready; see {self.log_path}"
                )
            if self.ready():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not ready within {self.ready_timeout_s:g} s; see {self.log_path}")

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (uvicorn and Flask shut down cleanly on it), then SIGKILL if it does not exit in time."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def speakwire_server(
    log_dir: Path,
    *serve_args: str,
    workers: int | None = None,
    max_streams: int | None = None,
    name: str = "speakwire",
) -> ServerProcess:
    """``python -m speakwire serve`` on a free loopback port (the embedded voice unless ``serve_args`` say).

    Args:
        log_dir: Where ``<name>.log`` goes.
        serve_args: More ``speakwire serve`` arguments (``--engine qwen3``, ``--wyoming-port``, ...).
        workers: ``--workers`` (default: the server's own, one per core).
        max_streams: ``--max-streams`` (default: the admission limit the server derives from its capacity).
        name: For messages and the log file.
    """
    port = free_port()
    argv = [sys.executable, "-m", "speakwire", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning"]  # fmt: skip
    if workers:
        argv += ["--workers", str(workers)]
    if max_streams is not None:
        argv += ["--max-streams", str(max_streams)]
    return ServerProcess(name, [*argv, *serve_args], port=port, log_dir=log_dir)


def piper_server(log_dir: Path, model_path: Path) -> ServerProcess:
    """Piper's own server (``python -m piper.http_server``), same voice file, on a free loopback port.

    It needs Flask, which piper-tts does not install (the ``[bench]`` extra: ``pip install 'speakwire[bench]'``).
    """
    port = free_port()
    argv = [sys.executable, "-m", "piper.http_server", "-m", str(model_path), "--host", "127.0.0.1",
            "--port", str(port)]  # fmt: skip
    return ServerProcess(
        "piper-http", argv, port=port, log_dir=log_dir, ready=answers_200(f"http://127.0.0.1:{port}/info")
    )
