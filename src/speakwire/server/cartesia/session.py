"""CartesiaSession: one ``/tts/websocket`` connection carrying many contexts at once; the I/O of ``protocol``.

``protocol.CartesiaConnection`` says what each message asks; this adapter resolves a context's voice,
admits its utterances and speaks them. Each flush group of a context (the text between two flushes) is one
utterance: a flush finishes it, so the segmenter speaks what it holds, and ``flush_done`` follows its last
audio. Text left waiting mid-sentence longer than ``max_buffer_delay_ms`` (a finished sentence: a moment)
is spoken the same way, without a ``flush_done``.

A context's groups are spoken in order by its own ``SpeakerChain`` (contexts speak side by side), one
speaker per group, mapping the output stage's parts to ``chunk``/``timestamps``/``flush_done``/``done``.
The receive loop never waits for synthesis, so text arriving mid-speech joins it and ``cancel`` stops one
context at once. An error in one context (bad voice, bad format, a failed segment) is that context's
``error`` event and ends only that context. Each utterance's request id (``<connection id>-<n>``) rides on
its ``chunk``, ``timestamps`` and ``error`` events; errors about no utterance carry the connection's id.

Cartesia has no keep-alive message: it closes a WebSocket idle for 5 minutes, and its clients count on that
window (``IDLE_S``), so an idle connection here lasts as long (or ``ws_idle_timeout_s``, when that is longer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from speakwire.errors import EngineError, ShuttingDownError, SpeakwireError
from speakwire.output import AudioOut, AudioPart, OutputSpec, SegmentEnd, UtteranceEnd, WordsPart
from speakwire.server.admission import Admitted, admit
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.cartesia import protocol as p
from speakwire.server.limits import CLOSE_POLICY, CLOSE_TRY_LATER, MAX_FRAME_BYTES, MAX_SESSION_CHARS
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.session import WebSocketSession
from speakwire.server.speakers import SpeakerChain
from speakwire.server.state import ServerState
from speakwire.server.websocket_channel import ChannelClosed

logger = logging.getLogger(__name__)

PROTOCOL = "cartesia"

IDLE_S = 300.0
"""How long a connection with no open context may stay silent: Cartesia's own rule ("We close idle WebSocket
connections after 5 minutes", docs.cartesia.ai/use-the-api/concurrency-limits-and-timeouts). Its clients send
nothing to keep a connection open: LiveKit's ``cartesia.TTS`` (livekit-plugins-cartesia 1.8.9) reuses a pooled
connection for up to 300 s after its last use, and the ``cartesia`` SDK sends only WebSocket pings, which an
ASGI application never sees. Closing such a connection at the server-wide ``ws_idle_timeout_s`` (30 s) would
fail the next turn of an agent whose user paused for half a minute."""


class Unauthorized(SpeakwireError):
    status_code = 401
    error_type = "AuthenticationError"


@dataclass(eq=False, slots=True)
class _Group:
    """One flush group of a context: its utterance is admitted with its first text."""

    flush_id: int
    admitted: Admitted | None = None
    opened_at: float = 0.0
    closed: bool = False
    flush: bool = False
    """Ends with ``flush_done``."""
    last: bool = False
    """Ends the context with ``done``."""


@dataclass(eq=False, slots=True)
class _Context:
    id: str
    spec: p.ContextSpec
    resolved: ResolvedSpeech
    out: AudioOut
    """One output for all the context's groups: one timeline, one codec stream (``keep_open``)."""
    current: _Group = field(default_factory=lambda: _Group(1))
    chain: SpeakerChain = field(default_factory=SpeakerChain)
    timer: asyncio.TimerHandle | None = None
    ended: bool = False


class CartesiaSession(WebSocketSession):
    protocol = PROTOCOL

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        super().__init__(websocket, state)
        self.connection = p.CartesiaConnection()
        self._contexts: dict[str, _Context] = {}
        self._ending: list[SpeakerChain] = []
        """Speakers of ended contexts that may still be finishing (``cancel_all`` waits for them too)."""
        self._utterances = 0

    # ----- lifetime hooks ---------------------------------------------------------------

    async def accept(self) -> bool:
        expected = self.state.settings.api_key
        if expected and not key_matches(expected, offered_key(self.ws.headers, self.ws.query_params)):
            await self._deny()
            return False
        await self.ws.accept()
        return True

    async def refuse_draining(self, error: ShuttingDownError) -> None:
        """The error a stream refused gets, then 1013 (``server.drain``)."""
        with contextlib.suppress(ChannelClosed):
            await self._error(error)
        await self.close(CLOSE_TRY_LATER, "server shutting down")

    def busy(self) -> bool:
        """A context is open: the connection is not idle, however quiet the client."""
        return bool(self._contexts)

    async def next_message(self) -> str | bytes | None:
        """The next client message, or None after Cartesia's idle window (``IDLE_S``) with no context open."""
        return await self.channel.receive_idle(max(self.state.settings.ws_idle_timeout_s, IDLE_S), self.busy)

    async def say_going_away(self, message: str) -> None:
        """An ``error`` for each open context (or one for the connection)."""
        contexts: list[str | None] = [*self._contexts] or [None]
        for context_id in contexts:
            await self._error(ShuttingDownError(message), context_id)

    async def cancel_all(self) -> None:
        for ctx in list(self._contexts.values()):
            self._forget(ctx)
        chains, self._ending = self._ending, []
        for chain in chains:
            await chain.cancel_all()

    async def _deny(self) -> None:
        """Refuse the handshake with HTTP 401, as Cartesia does (the SDK raises ``InvalidStatus``)."""
        error = Unauthorized(
            "Missing or invalid API key: send 'Authorization: Bearer <key>', 'X-API-Key' or ?api_key=."
        )
        body = p.http_error_body(error, request_id=self.request_id)
        response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        try:
            await self.ws.send_denial_response(response)
        except RuntimeError:  # a server without the denial-response extension: close before accept (403)
            await self.ws.close(CLOSE_POLICY)

    async def _error(self, exc: SpeakwireError, context_id: str | None = None, request_id: str | None = None) -> None:
        event = p.error_event(exc, request_id=request_id or self.request_id, context_id=context_id)
        await self.channel.send_json(event)

    # ----- client messages --------------------------------------------------------------

    async def dispatch(self, message: str | bytes) -> None:
        action = self.connection.receive(message)
        if isinstance(action, p.Refuse):
            ctx = self._contexts.get(action.context_id) if action.context_id else None
            if ctx is not None:
                await self._end_context(ctx)  # the SDK stops reading a context at its error
            await self._error(action.error, action.context_id)
        elif isinstance(action, p.Cancel):
            ctx = self._contexts.get(action.context_id)
            if ctx is not None:
                await self._end_context(ctx)  # barge-in: nothing more is sent for it
        elif isinstance(action, p.OpenContext):
            try:
                ctx = await self._open_context(action)
            except SpeakwireError as exc:
                self.connection.end(action.context_id)
                await self._error(exc, action.context_id)
                return
            await self._apply(ctx, action.step, action.hold_s)
        elif isinstance(action, p.Feed) and (ctx := self._contexts.get(action.context_id)) is not None:
            await self._apply(ctx, action.step, action.hold_s)

    async def _open_context(self, action: p.OpenContext) -> _Context:
        engine, _, _ = self.state.require_ready()
        resolved = await resolve_speech(self.state, engine, action.spec.options)
        spec = OutputSpec(action.spec.output.encoder_format, resolved.output_rate, gain=action.spec.volume)
        ctx = _Context(action.context_id, action.spec, resolved, await AudioOut.open(spec))
        self._contexts[ctx.id] = ctx
        return ctx

    async def _apply(self, ctx: _Context, step: p.ContextStep, hold_s: float | None) -> None:
        """Feed, flush and close as one request asks; a refusal (at capacity) ends the context."""
        try:
            if step.text:
                self._feed(ctx, step.text)
        except SpeakwireError as exc:
            await self._end_context(ctx)
            await self._error(exc, ctx.id)
            return
        if step.flush_id is not None:
            self._close_group(ctx, flush=True)
            ctx.current = _Group(step.flush_id + 1)
        if step.close:
            self._close_group(ctx, last=True)
        elif hold_s is not None:
            self._arm_buffer_timer(ctx, hold_s)

    def _feed(self, ctx: _Context, text: str) -> None:
        group = ctx.current
        if group.admitted is None:
            self._utterances += 1
            group.admitted = admit(self.state, ctx.resolved, protocol=PROTOCOL, max_buffer_chars=MAX_SESSION_CHARS,
                                   request_id=f"{self.request_id}-{self._utterances}")  # fmt: skip
            group.opened_at = time.monotonic()
            ctx.chain.start(group.admitted, lambda _: self._speak(ctx, group))
        group.admitted.utterance.feed(text)

    def _close_group(self, ctx: _Context, *, flush: bool = False, last: bool = False) -> None:
        group = ctx.current
        group.flush |= flush
        group.last |= last
        group.closed = True
        if group.admitted is not None:
            group.admitted.utterance.finish()
        else:  # nothing to say: its speaker only answers the flush or the end, in turn
            ctx.chain.start(None, lambda _: self._speak(ctx, group))
        if ctx.timer is not None:
            ctx.timer.cancel()
            ctx.timer = None

    def _arm_buffer_timer(self, ctx: _Context, delay_s: float) -> None:
        """Text the segmenter still holds when no more arrives in time is spoken anyway (``buffer_delay_s``)."""
        if ctx.timer is not None:
            ctx.timer.cancel()
        ctx.timer = asyncio.get_running_loop().call_later(delay_s, self._roll_over, ctx, ctx.current)

    def _roll_over(self, ctx: _Context, group: _Group) -> None:
        ctx.timer = None
        if ctx.ended or ctx.current is not group or group.closed or group.admitted is None:
            return
        self._close_group(ctx)
        ctx.current = _Group(group.flush_id)

    # ----- ending contexts ----------------------------------------------------------------

    def _forget(self, ctx: _Context) -> None:
        """Drop the context and give back every utterance it holds (cancelling unfinished ones); idempotent."""
        if ctx.ended:
            return
        ctx.ended = True
        if ctx.timer is not None:
            ctx.timer.cancel()
            ctx.timer = None
        if self._contexts.get(ctx.id) is ctx:
            del self._contexts[ctx.id]
        self.connection.end(ctx.id)
        for speaker in ctx.chain.speaking:
            if speaker.admitted is not None:
                speaker.admitted.close()
        if ctx.chain.busy:
            self._ending = [chain for chain in self._ending if chain.busy] + [ctx.chain]

    async def _end_context(self, ctx: _Context) -> None:
        """Stop the context now and wait until its speakers are gone."""
        self._forget(ctx)
        await ctx.chain.cancel_all()

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(self, ctx: _Context, group: _Group) -> None:
        """One group, in turn: its audio, then its ``flush_done`` and (the last) the context's ``done``."""
        if ctx.ended:
            return
        try:
            if group.admitted is not None and not await self._speak_audio(ctx, group, group.admitted):
                return
            if group.flush:
                await self.channel.send_json(p.flush_done_event(ctx.id, group.flush_id))
            if group.last:
                await self.channel.send_json(p.done_event(ctx.id))
                self._forget(ctx)
        except ChannelClosed:
            raise
        except Exception as exc:
            logger.exception("cartesia context %s failed", ctx.id)
            self._forget(ctx)
            request_id = group.admitted.request_id if group.admitted is not None else None
            with contextlib.suppress(ChannelClosed):
                await self._error(EngineError(f"Internal error: {type(exc).__name__}"), ctx.id, request_id)

    async def _speak_audio(self, ctx: _Context, group: _Group, admitted: Admitted) -> bool:
        """Send the group's audio as it is made; False when the context ended (cancelled or failed)."""
        request_id, rate = admitted.request_id, ctx.resolved.output_rate
        produced_at = group.opened_at
        async for part in ctx.out.parts(admitted.utterance, keep_open=True):
            if isinstance(part, AudioPart):
                now = time.monotonic()
                step_ms, produced_at = (now - produced_at) * 1000, now
                for start in range(0, len(part.data), MAX_FRAME_BYTES):
                    piece = part.data[start : start + MAX_FRAME_BYTES]
                    await self.channel.send_json(p.chunk_event(ctx.id, piece, step_ms, group.flush_id, request_id))
                    step_ms = 0.0
                if ctx.spec.add_timestamps and part.words:
                    offset_s = ctx.out.utterance_start / rate  # the context's audio before this utterance
                    event = p.timestamps_event(ctx.id, part.words, offset_s, group.flush_id, request_id)
                    await self.channel.send_json(event)
            elif isinstance(part, WordsPart):  # an aligner's words, as soon as they are in (after their audio)
                if ctx.spec.add_timestamps and part.words:
                    offset_s = ctx.out.utterance_start / rate
                    event = p.timestamps_event(ctx.id, part.words, offset_s, group.flush_id, request_id)
                    await self.channel.send_json(event)
            elif isinstance(part, SegmentEnd) and part.error is not None:
                self._forget(ctx)
                await self._error(part.error, ctx.id, request_id)
                return False
            elif isinstance(part, UtteranceEnd):
                return not part.cancelled
        return True
