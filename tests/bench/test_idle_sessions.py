"""The idle-sessions benchmark's core (``bench.idle_sessions``) at a small scale, against a real server on loopback.

Sessions of every dialect are opened and configured as their clients do and left idle; a live vLLM-Omni stream
still gets its audio meanwhile; once they close, the server is back to its idle counts. The server runs in this
process (``support.live_server``), so its sessions, asyncio tasks, threads and descriptors are counted directly
(``support.dialect_fuzz.WatchedServer``; descriptors are the process's, the clients' sockets included). Counts
only, no timing: the benchmark measures memory and first audio.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench.idle_sessions import (
    DIALECTS,
    IdleSession,
    close_sessions,
    live_first_audio,
    open_sessions,
    spread,
    warm_up,
)

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.dialect_fuzz import ClientLoop, ServerLog, WatchedServer
from support.live_server import free_port, start_server

SESSIONS = 6 * len(DIALECTS)


@pytest.fixture(scope="module")
def watched(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedServer]:
    settings = Settings(wyoming_port=free_port(), ws_idle_timeout_s=600, data_dir=str(tmp_path_factory.mktemp("v")))
    with ServerLog() as log:
        live = start_server(settings, engine=piper_engine)
        try:
            yield WatchedServer(live, log)
        finally:
            live.stop()


@pytest.fixture(scope="module")
def client_loop() -> Iterator[ClientLoop]:
    loop = ClientLoop()
    yield loop
    loop.close()


def test_idle_sessions_of_every_dialect_hold_one_task_each_and_leave_nothing_behind(
    watched: WatchedServer, client_loop: ClientLoop
) -> None:
    url, wyoming_port = watched.live.url, watched.live.settings.wyoming_port
    client_loop.run(warm_up(url, wyoming_port, list(DIALECTS)))  # what the server makes once exists when idle
    watched.settle_until_quiet()
    watched.mark_idle()
    idle = watched.idle
    assert idle is not None

    plan = spread(SESSIONS, list(DIALECTS))
    sessions: list[IdleSession] = []
    for name, count in plan.items():
        opened = client_loop.run(open_sessions(DIALECTS[name], count, url, wyoming_port, concurrency=8, timeout_s=30))
        assert not opened.refused, opened.refused
        assert len(opened.sessions) == count
        sessions += opened.sessions
    acknowledged = {d.name for d in DIALECTS.values() if d.ack is not None or not d.path}
    for session in sessions:
        if session.dialect in acknowledged and session.ws is not None:
            assert any(DIALECTS[session.dialect].ack(m) for m in session.received), session.dialect  # type: ignore[misc]

    held = watched.counts()
    assert held.sessions == SESSIONS  # every dialect's session (Wyoming's connections too) is registered
    assert (held.streams, held.engine_busy, held.engine_queued) == (0, 0, 0)  # idle: nothing admitted
    # One task per idle session (its connection's handler), none of its own beyond that: no wait_for task
    # around the receive (Python 3.11), no timer task, no speaker.
    assert held.tasks - idle.tasks == SESSIONS
    assert held.fds - idle.fds == 2 * SESSIONS  # the server's socket and the client's, nothing more
    assert not set(held.threads) - set(idle.threads)

    live = client_loop.run(live_first_audio(url, 2, pause_s=0.0))
    assert (live["n"], live["errors"]) == (2, [])
    ended = {s.dialect: s.ended() for s in sessions if s.ended() is not None}
    assert not ended, f"the server closed idle sessions: {ended}"

    client_loop.run(close_sessions(sessions, concurrency=16))
    assert watched.settle() == []
    assert watched.log.take() == []
