"""CartesiaSession: one ``/tts/websocket`` connection carrying many contexts at once.

A context is one stream of speech, fed as its transcripts arrive. Each of its flush groups (the text
between two flushes) is one pipeline ``Utterance``: a flush finishes the utterance, so the segmenter
speaks what it holds, and ``flush_done`` follows that utterance's last audio. Text left waiting
mid-sentence longer than ``max_buffer_delay_ms`` (a finished sentence: a moment) is spoken the same way,
without a ``flush_done``.

Every context has a *speaker* task that turns its utterances' events into ``chunk``/``timestamps``/
``flush_done``/``done`` events, in order; contexts speak side by side. The receive loop never waits
for synthesis, so text arriving mid-speech joins it and ``cancel`` stops one context at once without
touching the others. An error in one context (bad voice, bad format, a failed segment) is that
context's ``error`` event and ends only that context. All sends go through one lock (the session's
``WebSocketChannel``); every task is cancelled and awaited when the client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from speakwire.encoders.off_loop import LoopEncoder, open_encoder
from speakwire.encoders.registry import create_encoder
from speakwire.errors import (
    BadRequestError,
    EngineError,
    PayloadTooLargeError,
    ShuttingDownError,
    SpeakwireError,
    TooBusyError,
)
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.cartesia import protocol as p
from speakwire.server.flow import write_stall
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.state import ServerState
from speakwire.server.stream.protocol import MAX_FRAME_BYTES, MAX_SESSION_CHARS, MAX_TEXT_MESSAGE_BYTES
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.server.websocket_channel import ChannelClosed, WebSocketChannel
from speakwire.synthesis import AudioReady, SegmentFinished, Utterance, UtteranceFinished

logger = logging.getLogger(__name__)

PROTOCOL = "cartesia"
MAX_CONTEXTS = 256
"""Open contexts per connection; each speaking one also holds an admission slot."""
REMEMBERED_ENDED = 1024
"""Ended context ids remembered, so a late empty closing request for one is ignored, not an error."""
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_INTERNAL, CLOSE_TRY_LATER = 1000, 1001, 1008, 1011, 1013


class Unauthorized(SpeakwireError):
    status_code = 401
    error_type = "AuthenticationError"


@dataclass(eq=False, slots=True)
class _Group:
    """One flush group of a context: one utterance, created with its first text."""

    flush_id: int
    utterance: Utterance | None = None
    opened_at: float = 0.0
    closed: bool = False
    flush: bool = False
    """Ends with ``flush_done``."""
    last: bool = False
    """Ends the context with ``done``."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False, slots=True)
class _Context:
    id: str
    spec: p.ContextSpec
    resolved: ResolvedSpeech
    encoder: LoopEncoder
    input: p.ContextInput = field(default_factory=p.ContextInput)
    queue: asyncio.Queue[_Group] = field(default_factory=asyncio.Queue)
    groups: list[_Group] = field(default_factory=list)
    current: _Group | None = None
    speaker: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    chars: int = 0
    tail: str = ""
    """The end of the text fed so far (does it end a sentence?)."""
    samples_sent: int = 0
    ended: bool = False


class CartesiaSession:
    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.ws = websocket
        self.state = state
        self._id = str(uuid.uuid4())
        self._channel = WebSocketChannel(websocket, write_stall(state, PROTOCOL))
        self._contexts: dict[str, _Context] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()

    # ----- lifetime ---------------------------------------------------------------------

    async def run(self) -> None:
        expected = self.state.settings.api_key
        if expected and not key_matches(expected, offered_key(self.ws.headers, self.ws.query_params)):
            await self._deny()
            return
        await self.ws.accept()
        if self.state.draining:  # SIGTERM: the error a stream refused gets, then 1013 (server.drain)
            with contextlib.suppress(ChannelClosed):
                await self._error(ShuttingDownError())
            await self._close(CLOSE_TRY_LATER, "server shutting down")
            return
        try:
            with self.state.open_session(self):
                idle = self.state.settings.ws_idle_timeout_s
                while (message := await self._channel.receive_idle(idle, self._busy)) is not None:
                    await self._dispatch(message)
                await self._close(CLOSE_NORMAL, "idle")
        except ChannelClosed:
            pass
        except Exception:
            logger.exception("cartesia session failed")
            await self._close(CLOSE_INTERNAL, "internal error")
        finally:
            for ctx in list(self._contexts.values()):
                await self._end_context(ctx)

    async def going_away(self) -> None:
        """The drain is over (``server.drain``): an ``error`` for each open context (or one), then close 1001."""
        error = ShuttingDownError("Server is shutting down; reconnect to continue (another instance will answer).")
        with contextlib.suppress(ChannelClosed):
            contexts: list[str | None] = [*self._contexts] or [None]
            for context_id in contexts:
                await self._error(error, context_id)
        await self._close(CLOSE_GOING_AWAY, "server shutting down")

    async def _deny(self) -> None:
        """Refuse the handshake with HTTP 401, as Cartesia does (the SDK raises ``InvalidStatus``)."""
        error = Unauthorized(
            "Missing or invalid API key: send 'Authorization: Bearer <key>', 'X-API-Key' or ?api_key=."
        )
        body = p.http_error_body(error, request_id=self._id)
        response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        try:
            await self.ws.send_denial_response(response)
        except RuntimeError:  # a server without the denial-response extension: close before accept (403)
            await self.ws.close(CLOSE_POLICY)

    def _busy(self) -> bool:
        """A context is open: the connection is not idle, however quiet the client."""
        return bool(self._contexts)

    # ----- sending ----------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> None:
        await self._channel.send_json(event)

    async def _error(self, exc: SpeakwireError, context_id: str | None = None) -> None:
        request_id = f"{self._id}:{context_id}:{uuid.uuid4()}" if context_id else self._id
        await self._send(p.error_event(exc, request_id=request_id, context_id=context_id))

    async def _close(self, code: int, reason: str = "") -> None:
        await self._channel.close(code, reason)

    # ----- client messages --------------------------------------------------------------

    async def _dispatch(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            await self._error(BadRequestError("Binary frames are not accepted; send JSON text messages."))
            return
        if len(message) * 4 > MAX_TEXT_MESSAGE_BYTES and len(message.encode(errors="replace")) > MAX_TEXT_MESSAGE_BYTES:
            await self._error(PayloadTooLargeError(f"A message may hold at most {MAX_TEXT_MESSAGE_BYTES} bytes."))
            return
        try:
            command = p.parse_message(message)
        except p.MessageError as exc:
            await self._fail(exc, exc.context_id)
            return
        if isinstance(command, p.Cancel):
            ctx = self._contexts.get(command.context_id)
            if ctx is not None:
                await self._end_context(ctx)  # barge-in: nothing more is sent for it
            return
        await self._generate(command)

    async def _generate(self, request: p.Generate) -> None:
        context_id = request.context_id or str(uuid.uuid4())
        ctx = self._contexts.get(context_id)
        if ctx is None:
            if context_id in self._ended and not request.transcript:
                return  # e.g. no_more_inputs() after the context failed or was cancelled
            try:
                ctx = await self._open_context(context_id, request)
            except SpeakwireError as exc:
                self._remember_ended(context_id)
                await self._error(exc, context_id)
                return
        try:
            self._apply(ctx, ctx.input.receive(request))
        except SpeakwireError as exc:
            await self._fail(exc, ctx.id)

    async def _open_context(self, context_id: str, request: p.Generate) -> _Context:
        if len(self._contexts) >= MAX_CONTEXTS:
            raise TooBusyError(f"At most {MAX_CONTEXTS} contexts may be open on one connection.")
        spec = p.parse_spec(request.fields)
        engine, _, _ = self.state.require_ready()
        resolved = await resolve_speech(self.state, engine, spec.options)
        fmt, rate = spec.output.encoder_format, resolved.output_rate
        encoder = await open_encoder(fmt, lambda: create_encoder(fmt, rate, streaming=True))
        ctx = _Context(context_id, spec, resolved, encoder)
        ctx.current = self._new_group(ctx)
        ctx.speaker = asyncio.create_task(self._speak(ctx), name=f"cartesia-context-{context_id}")
        self._contexts[context_id] = ctx
        return ctx

    def _apply(self, ctx: _Context, step: p.ContextStep) -> None:
        """Feed, flush and close as one request asks; raises SpeakwireError (busy, too long)."""
        if step.text:
            self._feed(ctx, step.text)
        if step.flush_id is not None:
            self._close_group(ctx, flush=True)
            ctx.current = self._new_group(ctx)
        if step.close:
            self._close_group(ctx, last=True)
        elif step.text:
            self._arm_buffer_timer(ctx)

    def _feed(self, ctx: _Context, text: str) -> None:
        ctx.chars += len(text)
        if ctx.chars > MAX_SESSION_CHARS:
            raise PayloadTooLargeError(
                f"A context may hold at most {MAX_SESSION_CHARS} characters; start a new context.", param="transcript"
            )
        group = ctx.current
        assert group is not None
        if group.utterance is None:
            group.utterance = open_utterance(self.state, ctx.resolved, protocol=PROTOCOL,
                                             max_buffer_chars=MAX_SESSION_CHARS)  # fmt: skip
            group.opened_at = time.monotonic()
            group.changed.set()
        group.utterance.feed(text)
        ctx.tail = (ctx.tail + text)[-16:]

    def _new_group(self, ctx: _Context) -> _Group:
        group = _Group(ctx.input.flush_id)
        ctx.groups.append(group)
        ctx.queue.put_nowait(group)
        return group

    def _close_group(self, ctx: _Context, *, flush: bool = False, last: bool = False) -> None:
        group = ctx.current
        assert group is not None
        group.flush |= flush
        group.last |= last
        group.closed = True
        if group.utterance is not None:
            group.utterance.finish()
        group.changed.set()
        if ctx.timer is not None:
            ctx.timer.cancel()
            ctx.timer = None

    def _arm_buffer_timer(self, ctx: _Context) -> None:
        """Text the segmenter still holds when no more arrives in time is spoken anyway (``buffer_delay_s``)."""
        if ctx.timer is not None:
            ctx.timer.cancel()
        delay = p.buffer_delay_s(ctx.spec, ctx.tail)
        ctx.timer = asyncio.get_running_loop().call_later(delay, self._roll_over, ctx, ctx.current)

    def _roll_over(self, ctx: _Context, group: _Group | None) -> None:
        ctx.timer = None
        if ctx.ended or ctx.current is not group or group is None or group.closed or group.utterance is None:
            return
        self._close_group(ctx)
        ctx.current = self._new_group(ctx)

    async def _fail(self, exc: SpeakwireError, context_id: str | None) -> None:
        """``exc`` as an error event; a context it names is ended first (the SDK stops reading it)."""
        ctx = self._contexts.get(context_id) if context_id else None
        if ctx is not None:
            await self._end_context(ctx)
        elif context_id:
            self._remember_ended(context_id)
        await self._error(exc, context_id)

    # ----- ending contexts ----------------------------------------------------------------

    def _forget(self, ctx: _Context) -> None:
        """Drop the context and release every utterance it holds (cancelling unfinished ones); idempotent."""
        if ctx.ended:
            return
        ctx.ended = True
        if ctx.timer is not None:
            ctx.timer.cancel()
            ctx.timer = None
        if self._contexts.get(ctx.id) is ctx:
            del self._contexts[ctx.id]
        self._remember_ended(ctx.id)
        for group in ctx.groups:
            if group.utterance is not None:
                close_utterance(self.state, group.utterance, PROTOCOL)
        ctx.groups.clear()

    async def _end_context(self, ctx: _Context) -> None:
        """Stop the context now and wait until its speaker is gone."""
        self._forget(ctx)
        speaker = ctx.speaker
        if speaker is not None and speaker is not asyncio.current_task() and not speaker.done():
            speaker.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await speaker

    def _remember_ended(self, context_id: str) -> None:
        self._ended[context_id] = None
        self._ended.move_to_end(context_id)
        while len(self._ended) > REMEMBERED_ENDED:
            self._ended.popitem(last=False)

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(self, ctx: _Context) -> None:
        try:
            while True:
                group = await ctx.queue.get()
                if not await self._speak_group(ctx, group):
                    return
                if group.flush:
                    await self._send(p.flush_done_event(ctx.id, group.flush_id))
                if group.last:
                    await self._send(p.done_event(ctx.id))
                    return
        except ChannelClosed:
            pass
        except Exception as exc:
            logger.exception("cartesia context %s failed", ctx.id)
            self._forget(ctx)
            with contextlib.suppress(ChannelClosed):
                await self._error(EngineError(f"Internal error: {type(exc).__name__}"), ctx.id)
        finally:
            self._forget(ctx)

    async def _speak_group(self, ctx: _Context, group: _Group) -> bool:
        """Send one group's audio; False when the context ended (cancelled or failed)."""
        while group.utterance is None and not group.closed:
            await group.changed.wait()
            group.changed.clear()
        utterance = group.utterance
        if utterance is None:
            return True
        rate = ctx.resolved.output_rate
        offset_s = ctx.samples_sent / rate
        volume = ctx.spec.volume
        produced_at = group.opened_at
        try:
            async for event in utterance.events():
                if isinstance(event, AudioReady):
                    now = time.monotonic()
                    step_ms, produced_at = (now - produced_at) * 1000, now
                    samples = event.samples if volume == 1.0 else event.samples * volume
                    data = await ctx.encoder.encode(samples)
                    ctx.samples_sent += len(event.samples)
                    for start in range(0, len(data), MAX_FRAME_BYTES):
                        piece = data[start : start + MAX_FRAME_BYTES]
                        await self._send(p.chunk_event(ctx.id, piece, step_ms, group.flush_id))
                        step_ms = 0.0
                    if ctx.spec.add_timestamps and event.words:
                        await self._send(p.timestamps_event(ctx.id, event.words, offset_s, group.flush_id))
                elif isinstance(event, SegmentFinished) and event.error is not None:
                    self._forget(ctx)
                    await self._error(event.error, ctx.id)
                    return False
                elif isinstance(event, UtteranceFinished):
                    return not event.cancelled
        finally:
            close_utterance(self.state, utterance, PROTOCOL)
        return True
