"""WebSocketSession: the one lifetime every WebSocket dialect shares; a dialect fills in its protocol.

Written once here: the handshake hook, refusing new sessions while draining, registration for the drain
(``ServerState.open_session``), the receive loop with the idle rule, an internal error closed the
dialect's way, going-away at the end of a drain, fatal errors, and cancelling every utterance however the
connection ends (``speakers.SpeakerChain`` for dialects that speak one utterance after another). The
connection's request id is bound for the whole session, so log lines and the utterances' ids name it.

A dialect subclass parses and answers messages with its sans-I/O protocol object and implements the
hooks: ``dispatch`` (required), ``busy``, ``accept``, ``refuse_draining``, ``start``, ``next_message``,
``on_idle``, ``say_going_away``, ``cancel_all``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import ClassVar, NoReturn

from starlette.websockets import WebSocket

from speakwire.errors import ShuttingDownError
from speakwire.server.flow import write_stall
from speakwire.server.limits import CLOSE_GOING_AWAY, CLOSE_INTERNAL, CLOSE_NORMAL, CLOSE_TRY_LATER
from speakwire.server.request_ids import bound, scope_request_id
from speakwire.server.state import ServerState
from speakwire.server.websocket_channel import ChannelClosed, WebSocketChannel

logger = logging.getLogger(__name__)

GOING_AWAY_MESSAGE = "Server is shutting down; reconnect to continue (another instance will answer)."


class WebSocketSession:
    """One WebSocket connection of a dialect; ``run`` is its whole life."""

    protocol: str = "websocket"
    """The dialect's name in metrics and logs (a class default; one route may name another, SageMaker's)."""
    internal_error_reason: ClassVar[str] = "internal error"
    going_away_reason: ClassVar[str] = "server shutting down"

    def __init__(self, websocket: WebSocket, state: ServerState, *, protocol: str | None = None) -> None:
        if protocol is not None:
            self.protocol = protocol
        self.ws = websocket
        self.state = state
        self.request_id = scope_request_id(websocket.scope)
        """The connection's id: the client's ``X-Request-ID`` if it sent one, else a new one."""
        self.channel = WebSocketChannel(websocket, write_stall(state, self.protocol))

    # ----- the lifetime, once for every dialect -----------------------------------------------------

    async def run(self) -> None:
        with bound(self.request_id):
            if not await self.accept():
                return
            if self.state.draining:  # SIGTERM: a new session is refused as a stream at capacity is (server.drain)
                with contextlib.suppress(ChannelClosed):
                    await self.refuse_draining(ShuttingDownError())
                return
            try:
                with self.state.open_session(self):
                    await self.start()
                    while (message := await self.next_message()) is not None:
                        await self.dispatch(message)
                    await self.on_idle()
            except ChannelClosed:
                pass
            except Exception:
                logger.exception("%s session failed", self.protocol)
                await self.close(CLOSE_INTERNAL, self.internal_error_reason)
            finally:
                await self.cancel_all()

    async def going_away(self) -> None:
        """The drain is over (``server.drain``): the dialect's notice, then close 1001."""
        with contextlib.suppress(ChannelClosed):
            await self.say_going_away(GOING_AWAY_MESSAGE)
        await self.close(CLOSE_GOING_AWAY, self.going_away_reason)

    async def close(self, code: int, reason: str = "") -> None:
        """Close with ``code`` (the reason cut to fit a close frame); never raises."""
        await self.channel.close(code, reason[:120])

    async def fatal(self, code: int, reason: str) -> NoReturn:
        """Close with ``code`` and end the session (the dialect sent its error message first)."""
        await self.close(code, reason)
        raise ChannelClosed

    # ----- hooks ----------------------------------------------------------------------------------

    async def accept(self) -> bool:
        """Check the handshake and accept; False when the dialect refused it (its own HTTP or close)."""
        await self.ws.accept()
        return True

    async def refuse_draining(self, error: ShuttingDownError) -> None:
        """Tell a new client the server is draining (default: close 1013 with the reason)."""
        await self.close(CLOSE_TRY_LATER, error.message)

    async def start(self) -> None:
        """What the dialect does before reading messages (a greeting, waiting for its configuration)."""

    async def next_message(self) -> str | bytes | None:
        """The next client message, or None once the connection is idle (``ws_idle_timeout_s``)."""
        return await self.channel.receive_idle(self.state.settings.ws_idle_timeout_s, self.busy)

    async def dispatch(self, message: str | bytes) -> None:
        """Act on one client message (raise ``ChannelClosed`` to end the session)."""
        raise NotImplementedError

    def busy(self) -> bool:
        """Synthesis is running or text still open: never idle then, however quiet the client."""
        return False

    async def on_idle(self) -> None:
        """The connection was idle too long: close it the dialect's way (default 1000)."""
        await self.close(CLOSE_NORMAL, "idle")

    async def say_going_away(self, message: str) -> None:
        """The dialect's message before the going-away close (default: none)."""

    async def cancel_all(self) -> None:
        """Stop every utterance of the session and wait for its speakers (the connection is over)."""
