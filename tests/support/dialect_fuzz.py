"""What a fuzzed dialect session is checked against: the server's log, its close codes, and its idle counts.

The fuzzers (``tests/fuzz``) drive one real server, in this process on a thread, with sequences of valid and
invalid client messages. Every run must end with the protocol's own errors or close codes only, no ``ERROR``
line or traceback in the server's log, and the server back where it was before the run: no open session, no
admitted stream, no engine work, and as many asyncio tasks, threads and open file descriptors as when idle.
Counting tasks, threads and descriptors works because the server shares this process (``LiveServer``).

``ClientLoop`` runs the fuzzing clients' event loop on a thread of its own, so a client reads what the server
sends while hypothesis decides the next step (a real client reads all the time; one that stops would hit the
write-stall rule instead of the path under test).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from support.live_server import LiveServer

T = TypeVar("T")

SETTLE_S = 20.0
"""How long a server may take to give everything back after a run (generous: a loaded 2-core CI machine)."""
POOL_THREAD = re.compile(r"^(.+)_\d+$")
"""A ``ThreadPoolExecutor``'s worker (``asyncio_0``, ``speakwire-encode_0``): it stays after its work, up to the pool's
bound, so pools are checked against their bound rather than the idle count."""
POOL_BOUND = min(32, (os.cpu_count() or 1) + 4)
"""``ThreadPoolExecutor``'s default ``max_workers``."""


class ServerLog(logging.Handler):
    """Every log record of ERROR or above, or carrying a traceback, from any logger of this process."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            with self._lock_records:
                self.records.append(record)

    def take(self) -> list[str]:
        """The records since the last call, formatted with their tracebacks."""
        with self._lock_records:
            records, self.records = self.records, []
        formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
        return [formatter.format(record) for record in records]

    def __enter__(self) -> ServerLog:
        # uvicorn's loggers do not propagate to the root (uvicorn_log_config): listen to both.
        for name in ("", "uvicorn"):
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("", "uvicorn"):
            logging.getLogger(name).removeHandler(self)


@dataclass(frozen=True)
class Counts:
    """What a server holds; idle, every count but the threads and descriptors is the one it started with."""

    sessions: int
    streams: int
    engine_busy: int
    engine_queued: int
    active_gauge: float
    tasks: int
    threads: tuple[str, ...]
    """Threads other than the default executor's, by name."""
    pool_threads: dict[str, int]
    """Executor workers per pool (``POOL_THREAD``)."""
    fds: int

    def differences(self, idle: Counts) -> list[str]:
        """How this differs from ``idle`` (the default executor's threads may be more, up to its bound)."""
        names = ("sessions", "streams", "engine_busy", "engine_queued", "active_gauge", "tasks", "fds")
        out = [
            f"{n}: {getattr(self, n)} (idle: {getattr(idle, n)})" for n in names if getattr(self, n) != getattr(idle, n)
        ]
        # More threads than when idle is a leak; fewer is not (the allocator's memory-release timer comes and goes).
        if new := sorted(set(self.threads) - set(idle.threads)):
            out.append(f"threads not there when idle: {new}")
        out += [f"{pool}: {n} threads" for pool, n in self.pool_threads.items() if n > POOL_BOUND]
        return out


class WatchedServer:
    """A live server, its log, and its idle counts."""

    def __init__(self, live: LiveServer, log: ServerLog) -> None:
        self.live = live
        self.log = log
        self.loop: asyncio.AbstractEventLoop = live.server.servers[0].get_loop()
        self.idle: Counts | None = None

    def counts(self) -> Counts:
        state = self.live.state
        pipeline = state.pipeline

        async def tasks() -> int:
            return len(asyncio.all_tasks()) - 1  # not this one

        names = sorted(t.name for t in threading.enumerate())
        return Counts(
            sessions=len(state.sessions),
            streams=pipeline.active,
            engine_busy=pipeline.scheduler.busy,
            engine_queued=pipeline.scheduler.queued,
            active_gauge=_active_gauge(self.live),
            tasks=asyncio.run_coroutine_threadsafe(tasks(), self.loop).result(10),
            threads=tuple(n for n in names if not POOL_THREAD.match(n)),
            pool_threads=dict(Counter(m.group(1) for n in names if (m := POOL_THREAD.match(n)))),
            fds=len(os.listdir("/proc/self/fd")),
        )

    def mark_idle(self) -> None:
        """Take the idle counts now (after a warm-up, so lazily made threads and caches exist)."""
        self.idle = self.counts()

    def settle_until_quiet(self) -> None:
        """Wait until nothing is open or admitted and the task count has held still for a moment."""
        deadline = time.monotonic() + SETTLE_S
        previous, still_since = None, time.monotonic()
        while time.monotonic() < deadline:
            counts = self.counts()
            if (counts.sessions, counts.streams, counts.engine_busy, counts.engine_queued) != (0, 0, 0, 0):
                previous, still_since = None, time.monotonic()
            elif counts != previous:
                previous, still_since = counts, time.monotonic()
            elif time.monotonic() - still_since > 0.5:
                return
            time.sleep(0.02)

    def settle(self) -> list[str]:
        """Wait until the server is back to its idle counts; what still differs after ``SETTLE_S``."""
        assert self.idle is not None, "mark_idle first"
        deadline = time.monotonic() + SETTLE_S
        while True:
            differences = self.counts().differences(self.idle)
            if not differences or time.monotonic() > deadline:
                return differences
            time.sleep(0.02)


def _active_gauge(live: LiveServer) -> float:
    """The sum of ``speakwire_active_streams`` over its labels, as /metrics renders it (read in process: a request
    to /metrics would itself be a task of the server's while it is counted)."""
    text = live.state.metrics.render().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("speakwire_active_streams{"))  # fmt: skip


class ClientLoop:
    """An event loop on a thread of its own, for the fuzzing clients; ``run`` waits for one coroutine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-client-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class WsRecord:
    """One WebSocket connection of a run: what the server sent, and how the connection ended."""

    url: str
    received: list[str | bytes] = field(default_factory=list)
    refused: str | None = None
    """The handshake was refused (HTTP status), or the connection could not open."""
    client_closed: int | None = None
    """The close code the client sent first; 1006 when it dropped the TCP connection instead."""
    server_close: tuple[int, str] | None = None
    """The close frame the server sent (its own, or its answer to the client's)."""
    sends_after_close: int = 0


class WsClient:
    """A fuzzing WebSocket client: sends anything, reads everything into its record."""

    def __init__(
        self, url: str, *, headers: dict[str, str] | None = None, subprotocols: list[str] | None = None
    ) -> None:
        self.record = WsRecord(url)
        self.headers = headers
        """Handshake headers (an API key's, for one)."""
        self.subprotocols = [Subprotocol(s) for s in subprotocols] if subprotocols else None
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self._ws is not None and self._reader is not None and not self._reader.done()

    async def connect(self) -> bool:
        try:
            self._ws = await connect(self.record.url, max_size=None, open_timeout=20, ping_interval=None,
                                     close_timeout=20, additional_headers=self.headers,
                                     subprotocols=self.subprotocols)  # fmt: skip
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            self.record.refused = f"{type(exc).__name__}: {exc}"
            return False
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return True

    async def _read(self) -> None:
        assert self._ws is not None
        with contextlib.suppress(ConnectionClosed):
            async for message in self._ws:
                self.record.received.append(message)

    async def send(self, frame: str | bytes) -> None:
        if not self.open:
            self.record.sends_after_close += 1
            return
        assert self._ws is not None
        try:
            await self._ws.send(frame)
        except ConnectionClosed:
            self.record.sends_after_close += 1

    async def close(self, code: int | None) -> None:
        """End the connection: a close frame with ``code``, or (None) drop the TCP connection; wait until done."""
        ws = self._ws
        if ws is None:
            return
        if self.open and code is None:
            self.record.client_closed = 1006
            ws.transport.abort()
        elif self.open:
            self.record.client_closed = code
            await ws.close(code)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 30)
        received = ws.protocol.close_rcvd
        if received is not None:
            self.record.server_close = (received.code, received.reason)

    async def wait_closed(self, timeout: float) -> None:
        """Until the server has ended the connection (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self.open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def wait_for(self, predicate: Any, timeout: float) -> None:
        """Until a received message satisfies ``predicate`` (or the connection ends, or ``timeout``)."""
        seen = len(self.record.received)
        deadline = time.monotonic() + timeout
        while self.open and time.monotonic() < deadline:
            if any(predicate(m) for m in self.record.received[seen:]):
                return
            await asyncio.sleep(0.01)


def close_problems(record: WsRecord, allowed: frozenset[int]) -> list[str]:
    """A server close that is not one of the protocol's own codes (1011 never is), or a dropped connection."""
    if record.refused is not None:
        return [f"{record.url}: handshake refused: {record.refused}"]
    if record.server_close is None:
        if record.client_closed == 1006:
            return []
        return [f"{record.url}: the server dropped the connection without a close frame"]
    code, reason = record.server_close
    if code == record.client_closed or code in allowed - {1011}:
        return []
    return [f"{record.url}: server closed {code} ({reason!r}); the protocol's codes are {sorted(allowed)}"]
