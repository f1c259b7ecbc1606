"""Scale-in without cutting a sentence: what ``speakwire serve`` does between SIGTERM and its exit.

SageMaker (like Kubernetes or ECS) sends SIGTERM to a container it scales in and kills it 30 s later. Left to
itself, uvicorn (0.54, ``Server.shutdown``) answers SIGTERM at once and in this order: it closes the listening
socket (a new client gets a refused connection, not an answer telling it to retry elsewhere), calls
``shutdown()`` on every connection, which for a WebSocket means close code 1012 there and then, in the middle of
whatever sentence it was speaking, and for an HTTP response only "no keep-alive"; it then waits up to
``timeout_graceful_shutdown`` for the HTTP responses, cancels what is left, and runs the lifespan shutdown. It
also re-raises the SIGTERM it caught once it is done, so the process dies of the signal instead of exiting 0.

``DrainingServer`` puts a drain in front of that. On the first SIGTERM:

1. Stop admitting (``ServerState.draining``): every new stream or request is refused the way each protocol
   refuses one at capacity, as ``ShuttingDownError`` (HTTP 503 with ``Retry-After``; a new WebSocket session is
   accepted and closed 1013 with the protocol's busy error, ``try again later``), and ``/ping`` and ``/ready``
   answer 503 so the load balancer stops sending here. The socket stays open, so refusals are answers.
2. Let the utterances in flight finish: wait until none is admitted (``SynthesisPipeline.active`` is 0), for at
   most ``Settings.drain_timeout_s`` (25 s: SageMaker's 30 s less room for the steps below).
3. Close every WebSocket session still open with code 1001 (going away) after the protocol's final event
   saying why (``GoingAway.going_away``): an idle one at once, one still speaking when the time is up cut there.
   A Wyoming connection still open is one of these sessions too (TCP has no close code): its requests end the
   Wyoming way, an ``error`` ``shutting_down`` then ``audio-stop`` / ``synthesize-stopped``, and it closes.
4. Hand over to uvicorn's shutdown (``should_exit``): by now its connections are HTTP responses sending their
   last bytes, and any HTTP stream still synthesizing past the drain timeout. ``GRACE_AFTER_DRAIN_S`` after
   the shutdown begins, every connection still open is cut here (``DrainingServer._cut``, one log line): its
   transport is aborted, so the client sees the body end before its end and takes no cut stream for complete
   audio, and the app, told the client left, returns. uvicorn's own way, cancelling the response's task
   when its graceful timeout runs out, would log a ``CancelledError`` traceback for each; its timeout is now
   ``CUT_WAIT_S`` later, a last resort. Then the lifespan shutdown (Wyoming, scheduler, engine).
5. Exit 0: the SIGTERM that started the drain is not re-raised.

A second SIGTERM, or SIGINT (Ctrl+C) at any time, skips the drain: uvicorn's own shutdown as before.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from types import FrameType

import uvicorn

from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

GRACE_AFTER_DRAIN_S = 2
"""Once the drain is over, how long responses whose audio is all made have to finish sending before the cut."""

CUT_WAIT_S = 1
"""After the cut, how long uvicorn waits for the cut responses to return before it cancels them (logging each)."""

POLL_S = 0.05
"""How often the drain looks whether the utterances in flight are done (only while draining)."""


async def drain(state: ServerState, timeout_s: float) -> None:
    """Steps 1-3: stop admitting, wait up to ``timeout_s`` for the utterances in flight, close the sessions left."""
    # Step 1: nothing new is admitted from here on; /ping and /ready turn 503.
    state.draining = True
    pipeline = state.pipeline
    in_flight = pipeline.active if pipeline is not None else 0
    logger.info(
        "SIGTERM: draining: admitting nothing new; %d utterance(s) in flight, %d session(s) open; "
        "waiting up to %g s", in_flight, len(state.sessions), timeout_s,
    )  # fmt: skip
    # Step 2: the utterances in flight finish, each with all its audio, unless the time runs out.
    # Polled, not signalled: an event set on release would put work on every utterance's path for a moment
    # that comes once in a process's life.
    deadline = time.monotonic() + timeout_s
    while pipeline is not None and pipeline.active > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_S)
    left = pipeline.active if pipeline is not None else 0
    if left:
        logger.warning("drain timeout (%g s): %d utterance(s) still in flight are cut", timeout_s, left)
    # Step 3: every session still open hears why, then closes (a WebSocket with 1001); their own ``finally``
    # cancels what is left.
    sessions = list(state.sessions)
    if sessions:
        await asyncio.gather(*(session.going_away() for session in sessions), return_exceptions=True)
    logger.info("drain done: %d session(s) closed after their final event, %d utterance(s) cut", len(sessions), left)


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` that drains on the first SIGTERM (see the module) before its own shutdown."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        drained = self._drain is not None and self._drain.done()
        cut = asyncio.get_running_loop().call_later(GRACE_AFTER_DRAIN_S, self._cut) if drained else None
        try:
            await super().shutdown(sockets)
        finally:
            if cut is not None:
                cut.cancel()

    def _cut(self) -> None:
        """Step 4's end: drop every connection still open after the grace (an HTTP stream past the drain timeout)."""
        connections = list(self.server_state.connections)
        if not connections:
            return
        logger.warning(
            "drain: %d connection(s) still sending %g s after the drain are cut short (their bodies end early)",
            len(connections), GRACE_AFTER_DRAIN_S,
        )  # fmt: skip
        for connection in connections:
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()  # the protocol sees the loss: the app's receive() says the client left

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn installs this with signal.signal: it runs on the loop's thread between two bytecodes, so it
        # only schedules the drain (call_soon_threadsafe also wakes a loop asleep in select).
        if sig == signal.SIGTERM and self._drain is None and self.started and not self.should_exit:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                # Not recorded in _captured_signals: uvicorn would re-raise it after shutdown (step 5).
                loop.call_soon_threadsafe(self._start_drain)
                return
        super().handle_exit(sig, frame)  # a second SIGTERM, SIGINT, or before startup: uvicorn's own way

    def _start_drain(self) -> None:
        if self._drain is not None or self.should_exit:
            return
        self._drain = asyncio.create_task(drain(self.state, self.state.settings.drain_timeout_s))
        self._drain.add_done_callback(self._drained)

    def _drained(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("drain failed; shutting down now", exc_info=task.exception())
        # Step 4: uvicorn's shutdown; ``shutdown`` cuts what is left after the grace, uvicorn's timeout is a backstop.
        self.config.timeout_graceful_shutdown = GRACE_AFTER_DRAIN_S + CUT_WAIT_S
        self.should_exit = True
