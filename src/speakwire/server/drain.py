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
2. Let what is in flight finish: wait until no utterance is admitted (``SynthesisPipeline.active`` is 0) and
   no HTTP response is still sending (``ServerState.http_in_flight``, counted by ``InFlightMiddleware`` until
   the response's last part is sent: a whole WAV file, whose utterance is closed before its body goes out, or
   a voice upload), for at most ``Settings.drain_timeout_s``: how long open streams may take.
3. Close every WebSocket session still open with code 1001 (going away) after the protocol's final event
   saying why (``GoingAway.going_away``): an idle one at once, one still speaking when the time is up cut there.
   A Wyoming connection still open is one of these sessions too (TCP has no close code): its requests end the
   Wyoming way, an ``error`` ``shutting_down`` then ``audio-stop`` / ``synthesize-stopped``, and it closes.
4. Hand over to uvicorn's shutdown (``should_exit``). Every connection still open is then cut here
   (``DrainingServer._cut``, one log line saying which case): at once if the drain timed out with an HTTP
   response still in flight (an HTTP stream still synthesizing, a download too slow for the drain timeout),
   otherwise ``GRACE_AFTER_DRAIN_S`` later, for the last bytes of responses that have sent their last part.
   Its transport is aborted, so the client sees the body end before its end and takes no cut stream for
   complete audio, and the app, told the client left, returns. uvicorn's own way, cancelling the response's
   task when its graceful timeout runs out, would log a ``CancelledError`` traceback for each; its timeout is
   ``CUT_WAIT_S`` after the cut, a last resort. Then the lifespan shutdown (Wyoming, scheduler, engine).
5. Exit 0: the SIGTERM that started the drain is not re-raised.

The time budget. Steps 3 and 4 share one deadline, ``CLOSE_S`` after the drain timeout (``close_by``): the
sessions' going-away is cut there (a Wyoming client still taking its last events is dropped), and the grace
of step 4 is ``GRACE_AFTER_DRAIN_S`` or what is left before ``close_by``, whichever is less. So, from the
SIGTERM, with the default drain timeout and at worst (everything still in flight at every deadline)::

    25     drain_timeout_s: streams and HTTP bodies finish                     -> 25.0
    +1.5   CLOSE_S: going-away, then the grace, together, up to close_by       -> 26.5
    +0.1   uvicorn's main loop tick to see should_exit (cut happens in its
           0.1 s sleep after connection.shutdown(), within close_by + 0.1)  -> 26.6
    +0.5   CUT_WAIT_S: the cut responses return (uvicorn's backstop)           -> 27.1
    +<0.9  lifespan shutdown: Wyoming stop (its connections are closed by
           now), scheduler and engine close, interpreter exit                  -> < 28

which leaves SageMaker's SIGKILL (30 s after SIGTERM) 2 s away. A longer ``SPEAKWIRE_DRAIN_TIMEOUT`` moves
every later deadline by as much (outside SageMaker, or with a longer stop timeout).

A second SIGTERM, or SIGINT (Ctrl+C) at any time, skips the drain: uvicorn's own shutdown as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from types import FrameType
from typing import NamedTuple

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from speakwire.server.state import ServerState

logger = logging.getLogger(__name__)

CLOSE_S = 1.5
"""After the drain timeout, the time steps 3 and 4 have together (going-away, then the grace) before the cut."""

GRACE_AFTER_DRAIN_S = 2
"""A drain that ended with no HTTP response in flight: how long connections have to send their last bytes
before the cut (at most until ``close_by``)."""

CUT_WAIT_S = 0.5
"""After the cut, how long uvicorn waits for the cut responses to return before it cancels them (logging each)."""

POLL_S = 0.05
"""How often the drain looks whether what is in flight is done (only while draining)."""


class InFlightMiddleware:
    """Counts each HTTP request in ``ServerState.http_in_flight`` until its response has sent its last part.

    The drain (step 2) waits for these as for utterances: a whole-file response gives its utterance back
    before its body is sent, and an upload holds no utterance at all.
    """

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.state.http_in_flight += 1
        try:
            await self.app(scope, receive, send)  # returns after its last send: the body's last part is out
        finally:
            self.state.http_in_flight -= 1


class DrainEnd(NamedTuple):
    """How a drain ended, for step 4."""

    timed_out: bool
    """Something was still in flight at the drain timeout."""
    close_by: float
    """Loop time by which steps 3 and 4 are over: every connection still open then is cut."""


async def drain(state: ServerState, timeout_s: float, *, close_s: float = CLOSE_S) -> DrainEnd:
    """Steps 1-3: stop admitting, wait up to ``timeout_s`` for what is in flight, close the sessions left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    close_by = deadline + close_s
    # Step 1: nothing new is admitted from here on; /ping and /ready turn 503.
    state.draining = True
    pipeline = state.pipeline

    def utterances() -> int:
        return pipeline.active if pipeline is not None else 0

    logger.info(
        "SIGTERM: draining: admitting nothing new; %d utterance(s) in flight, %d HTTP response(s) sending, "
        "%d session(s) open; waiting up to %g s", utterances(), state.http_in_flight, len(state.sessions), timeout_s,
    )  # fmt: skip
    # Step 2: the utterances and HTTP responses in flight finish, each whole, unless the time runs out.
    # Polled, not signalled: an event set on release would put work on every utterance's path for a moment
    # that comes once in a process's life.
    while (utterances() > 0 or state.http_in_flight > 0) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_S)
    left, sending = utterances(), state.http_in_flight
    if left or sending:
        logger.warning(
            "drain timeout (%g s): %d utterance(s) still in flight are cut, %d HTTP response(s) still sending",
            timeout_s, left, sending,
        )  # fmt: skip
    # Step 3: every session still open hears why, then closes (a WebSocket with 1001); their own ``finally``
    # cancels what is left. All by ``close_by``: one still at it then is left to the cut (step 4).
    sessions = list(state.sessions)
    if sessions:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(close_by):
                await asyncio.gather(*(session.going_away() for session in sessions), return_exceptions=True)
    logger.info("drain done: %d session(s) closed after their final event, %d utterance(s) cut", len(sessions), left)
    return DrainEnd(timed_out=bool(left or sending), close_by=close_by)


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` that drains on the first SIGTERM (see the module) before its own shutdown."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[DrainEnd] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        task = self._drain
        drained = task is not None and task.done() and not task.cancelled() and task.exception() is None
        end = task.result() if task is not None and drained else None
        cut: asyncio.TimerHandle | None = None
        if end is not None:
            # Step 4: at once when the drain timed out with an HTTP response still sending, else after the grace.
            loop = asyncio.get_running_loop()
            at_timeout = end.timed_out and self.state.http_in_flight > 0
            delay = 0.0 if at_timeout else max(0.0, min(GRACE_AFTER_DRAIN_S, end.close_by - loop.time()))
            timeout_s = self.state.settings.drain_timeout_s
            when = f"at the drain timeout ({timeout_s:g} s)" if at_timeout else f"{delay:.2g} s after the drain"
            cut = loop.call_later(delay, self._cut, when)
            self.config.timeout_graceful_shutdown = delay + CUT_WAIT_S  # type: ignore[assignment]
        try:
            await super().shutdown(sockets)
        finally:
            if cut is not None:
                cut.cancel()

    def _cut(self, when: str) -> None:
        """Step 4's end: drop every connection still open (an HTTP body still sending), saying when."""
        connections = list(self.server_state.connections)
        if not connections:
            return
        logger.warning(
            "drain: %d connection(s) still sending %s are cut short (their bodies end early)", len(connections), when
        )
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

    def _drained(self, task: asyncio.Task[DrainEnd]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("drain failed; shutting down now", exc_info=task.exception())
        # Step 4: uvicorn's shutdown; ``shutdown`` sets when the cut comes, uvicorn's timeout is a backstop after it.
        self.config.timeout_graceful_shutdown = GRACE_AFTER_DRAIN_S + CUT_WAIT_S  # type: ignore[assignment]
        self.should_exit = True
