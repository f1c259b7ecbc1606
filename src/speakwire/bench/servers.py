"""Servers under test as child processes, and what is measured around them (CPU, server metrics).

The runner starts each server itself (speakwire, then Piper's own Flask server) on a free loopback
port, waits until it says it is ready, and always stops it again: a benchmark must never leave a
process behind or listen beyond loopback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerProcess:
    """A child process serving HTTP on loopback; a context manager that waits for readiness and stops it.

    Args:
        name: For messages and the log file name.
        argv: The command (``sys.executable`` first, usually).
        ready_url: GET until it answers 200 (``/ready`` for speakwire: 200 only after warm-up).
        log_dir: stdout and stderr go to ``<log_dir>/<name>.log`` (kept for post-mortems).
    """

    def __init__(
        self, name: str, argv: Sequence[str], *, ready_url: str, log_dir: Path, ready_timeout_s: float = 180.0
    ):
        self.name = name
        self.argv = list(argv)
        self.ready_url = ready_url
        self.log_path = log_dir / f"{name}.log"
        self.ready_timeout_s = ready_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

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
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.ready_url, timeout=2).status_code == 200:
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


def speakwire_server(port: int, log_dir: Path, *, workers: int | None = None, max_streams: int = 64) -> ServerProcess:
    """``python -m speakwire serve`` on 127.0.0.1:port with the embedded voice."""
    argv = [sys.executable, "-m", "speakwire", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--max-streams", str(max_streams), "--log-level", "warning"]  # fmt: skip
    if workers:
        argv += ["--workers", str(workers)]
    return ServerProcess("speakwire", argv, ready_url=f"http://127.0.0.1:{port}/ready", log_dir=log_dir)


def piper_server(port: int, log_dir: Path, model_path: Path) -> ServerProcess:
    """Piper's own server (``python -m piper.http_server``), same voice file, loopback only.

    It needs Flask, which piper-tts does not install (``pip install -r bench/requirements.txt``).
    """
    argv = [sys.executable, "-m", "piper.http_server", "-m", str(model_path), "--host", "127.0.0.1",
            "--port", str(port)]  # fmt: skip
    return ServerProcess("piper-http", argv, ready_url=f"http://127.0.0.1:{port}/info", log_dir=log_dir)


class CpuMeter:
    """CPU seconds a process used between ``start()`` and ``stop()``, as % of the whole machine.

    Uses psutil when installed (a bench-only dependency); without it every reading is None.
    """

    def __init__(self, pid: int | None) -> None:
        self._process = None
        self._cores = os.cpu_count() or 1
        self._begin: tuple[float, float] | None = None
        if pid is None:
            return
        try:
            import psutil
        except ImportError:
            return
        with contextlib.suppress(psutil.Error):
            self._process = psutil.Process(pid)

    def _cpu_seconds(self) -> float | None:
        if self._process is None:
            return None
        try:
            times = self._process.cpu_times()
        except Exception:  # the process is gone: no reading rather than a failed benchmark
            return None
        return float(times.user + times.system)

    def start(self) -> None:
        cpu = self._cpu_seconds()
        self._begin = None if cpu is None else (time.perf_counter(), cpu)

    def stop(self) -> float | None:
        cpu = self._cpu_seconds()
        if cpu is None or self._begin is None:
            return None
        wall = time.perf_counter() - self._begin[0]
        return 100.0 * (cpu - self._begin[1]) / wall / self._cores if wall > 0 else None


def server_counter(base_url: str, name: str) -> float | None:
    """Sum of a Prometheus counter over all its label sets, read from ``/metrics``; None if unavailable."""
    try:
        body = httpx.get(f"{base_url.rstrip('/')}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    total, found = 0.0, False
    for line in body.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            metric, _, value = line.rpartition(" ")
            if metric == name or metric.startswith(name + "{"):
                with contextlib.suppress(ValueError):
                    total += float(value)
                    found = True
    return total if found else None
