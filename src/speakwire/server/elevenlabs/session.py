"""ElevenLabsSession: one WebSocket connection of ``stream-input`` or ``multi-stream-input``.

A ``WebSocketSession`` (the lifetime, drain and cancel-all are written there) over the sans-I/O
``StreamInputProtocol``. The receive loop never waits for synthesis: text goes into its context's open
utterance as it arrives, and each context has a ``SpeakerChain`` that sends the audio of that context's
utterances in order. ``flush`` finishes the open utterance (the segmenter then cuts the rest of its text, so it
is spoken now) and later text opens the next one, which may already synthesize while the one before is sent.
Contexts speak independently, as ElevenLabs' do; every message goes out whole (``WebSocketChannel``) and names
its ``contextId``, and a context's ``isFinal`` (the chain's last speaker) is its last message.

Each utterance has a request id, ``{connection id}-{n}``, sent as ``requestId`` on its audio messages and its
``synthesis_failed`` error (fields the SDK and pipecat ignore); the connection's id is the upgrade's
``x-request-id``. Errors are answered the ElevenLabs way, which the SDK turns into ``ApiError``: an error
message ``{"message", "error", "code"}`` as the last message, then a non-1000 close (1008, or 1013 when busy).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import time
from typing import Any, NoReturn

from starlette.websockets import WebSocket

from speakwire.errors import BadRequestError, NotReadyError, PayloadTooLargeError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, AudioPart, SegmentEnd, UtteranceEnd, WordsPart
from speakwire.server.admission import Admitted, admit
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.elevenlabs import protocol as p
from speakwire.server.elevenlabs.alignment import CharacterAligner, CharTiming, ws_alignment
from speakwire.server.limits import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_LATER,
    MAX_SESSION_CHARS,
    MAX_TEXT_MESSAGE_BYTES,
)
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.session import WebSocketSession
from speakwire.server.speakers import SpeakerChain
from speakwire.server.state import ServerState
from speakwire.server.websocket_channel import ChannelClosed
from speakwire.text.hygiene import clean_text

logger = logging.getLogger(__name__)

PROTOCOL = "elevenlabs"


@dataclasses.dataclass(eq=False, slots=True)
class _Run:
    """One utterance of a context (the text between two flushes) and the alignment of its text."""

    admitted: Admitted
    aligner: CharacterAligner = dataclasses.field(default_factory=CharacterAligner)
    stopped: bool = False
    """Closed before it was flushed: nothing more of it is sent."""


@dataclasses.dataclass(eq=False, slots=True)
class _Context:
    id: str | None
    resolved: ResolvedSpeech
    last_activity: float
    speakers: SpeakerChain = dataclasses.field(default_factory=SpeakerChain)
    """The context's utterances, spoken in order, then its ``isFinal`` once it is closed."""
    open: _Run | None = None
    """The utterance taking text (nothing flushed it yet)."""


class ElevenLabsSession(WebSocketSession):
    protocol = PROTOCOL

    def __init__(self, websocket: WebSocket, state: ServerState, voice_id: str, *, multi: bool) -> None:
        super().__init__(websocket, state)
        self.voice_id = voice_id
        self.multi = multi
        self._protocol = p.StreamInputProtocol(multi=multi)
        self._query: p.StreamQuery | None = None
        self._resolved: ResolvedSpeech | None = None
        self._contexts: dict[str | None, _Context] = {}
        self._draining: set[_Context] = set()
        """Closed contexts whose speakers still send their flushed audio and ``isFinal``."""
        self._utterances = 0

    # ----- the session's hooks ------------------------------------------------------------

    async def refuse_draining(self, error: SpeakwireError) -> None:
        await self._fatal_error(error)  # as a stream at capacity is: the error, then 1013 (server.drain)

    async def start(self) -> None:
        """Authenticate (headers, query, or the first message), resolve voice, model and format."""
        api_key = self.state.settings.api_key
        first: p.Command | None = None
        if api_key and not key_matches(api_key, offered_key(self.ws.headers, self.ws.query_params)):
            first = await self._first_command()
            offered = first.api_key if isinstance(first, p.InitContext) else None
            if not key_matches(api_key, offered):
                await self._fatal(p.INVALID_API_KEY, "invalid_api_key", CLOSE_POLICY)
        try:
            self._query = query = p.parse_stream_query(self.ws.query_params)
            engine, _, _ = self.state.require_ready()
            options = p.speech_options(self.voice_id, query.output_format, model_id=query.model_id,
                                       language_code=query.language_code, seed=query.seed)  # fmt: skip
            self._resolved = await resolve_speech(self.state, engine, options)
        except SpeakwireError as exc:
            await self._fatal_error(exc)
        if first is not None:
            await self._act(first)

    async def next_message(self) -> str | bytes | None:
        """The next client message; None once ElevenLabs' inactivity rule ends the connection (``on_idle``)."""
        while True:
            remaining = self._next_deadline() - time.monotonic()
            try:
                return await self.channel.receive_within(max(remaining, 0.001))
            except TimeoutError:
                if self._expire():
                    return None

    async def dispatch(self, message: str | bytes) -> None:
        await self._act(await self._parse(message))

    async def on_idle(self) -> None:
        await self._fatal(p.inactivity_message(self._timeout()), "input_timeout_exceeded", CLOSE_POLICY)

    async def say_going_away(self, message: str) -> None:
        await self._send(p.error_message(message, "shutting_down", CLOSE_GOING_AWAY))

    async def close(self, code: int, reason: str = "") -> None:
        await self.channel.close(code, p.safe_reason(reason))

    async def cancel_all(self) -> None:
        contexts = [*self._contexts.values(), *self._draining]
        self._contexts.clear()
        self._draining.clear()
        await asyncio.gather(*(ctx.speakers.cancel_all() for ctx in contexts))

    # ----- receiving ------------------------------------------------------------------------

    async def _first_command(self) -> p.Command:
        timeout = self.state.settings.ws_config_timeout_s
        try:
            raw = await self.channel.receive_within(timeout)
        except TimeoutError:
            await self._fatal(p.inactivity_message(timeout), "input_timeout_exceeded", CLOSE_POLICY)
        return await self._parse(raw)

    async def _parse(self, raw: str | bytes) -> p.Command:
        if len(raw) > MAX_TEXT_MESSAGE_BYTES // 4 and len(_utf8(raw)) > MAX_TEXT_MESSAGE_BYTES:
            await self._fatal(f"Message exceeds {MAX_TEXT_MESSAGE_BYTES} bytes.", "message_too_big", CLOSE_TOO_BIG)
        try:
            return self._protocol.receive(raw)
        except BadRequestError as exc:
            await self._fatal(exc.message, getattr(exc, "error", "invalid_input_message"), CLOSE_POLICY)

    # ----- inactivity -------------------------------------------------------------------

    def _timeout(self) -> float:
        return self._query.inactivity_timeout_s if self._query else p.DEFAULT_INACTIVITY_TIMEOUT_S

    def _next_deadline(self) -> float:
        timeout = self._timeout()
        if self.multi and (self._contexts or self._draining):
            times = [ctx.last_activity for ctx in self._contexts.values()]
            return min(times, default=time.monotonic()) + timeout
        return self.channel.last_activity + timeout

    def _expire(self) -> bool:
        """ElevenLabs' inactivity rule: a context (or the connection) that got no message for the timeout
        ends; True when the connection does. Audio still being spoken counts as activity, so only an idle
        one expires."""
        now, timeout = time.monotonic(), self._timeout()
        for ctx in list(self._contexts.values()):
            if now - ctx.last_activity < timeout:
                continue
            if not _idle(ctx):
                ctx.last_activity = now
            elif self.multi:
                self._close_context(ctx)
        if self.multi and (self._contexts or self._draining):
            return False
        if self._contexts and not all(_idle(ctx) for ctx in self._contexts.values()):
            self.channel.last_activity = now
            return False
        return now - self.channel.last_activity >= timeout

    # ----- sending ----------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        await self.channel.send_json(message)

    async def _fatal(self, message: str, error: str, close_code: int) -> NoReturn:
        with contextlib.suppress(ChannelClosed):
            await self._send(p.error_message(message, error))
        await self.fatal(close_code, message)

    async def _fatal_error(self, exc: SpeakwireError) -> NoReturn:
        _, error = p.error_status(exc)
        busy = isinstance(exc, TooBusyError | NotReadyError)
        await self._fatal(p.describe(exc, self.voice_id), error, CLOSE_TRY_LATER if busy else CLOSE_POLICY)

    # ----- client commands --------------------------------------------------------------

    async def _act(self, command: p.Command) -> None:
        if isinstance(command, p.InitContext | p.SendText):
            ctx = self._contexts.get(command.context_id) or self._new_context(command)
            await self._feed(ctx, command.text, flush=command.flush)
        elif isinstance(command, p.Flush):
            if (flushed := self._touch(command.context_id)) is not None:
                _flush(flushed)
        elif isinstance(command, p.KeepAlive):
            self._touch(command.context_id)
        elif isinstance(command, p.CloseContext):
            if (closed := self._contexts.get(command.context_id)) is not None:
                self._close_context(closed)
        elif isinstance(command, p.EndOfInput):
            await self._end_of_input()
        elif isinstance(command, p.CloseSocket):
            await self._close_socket()

    def _touch(self, context_id: str | None) -> _Context | None:
        ctx = self._contexts.get(context_id)
        if ctx is not None:
            ctx.last_activity = time.monotonic()
        return ctx

    def _new_context(self, command: p.InitContext | p.SendText) -> _Context:
        assert self._resolved is not None
        resolved = self._resolved
        settings = command.voice_settings if isinstance(command, p.InitContext) else None
        if settings is not None and settings.speed is not None:
            request = dataclasses.replace(resolved.request, speed=settings.speed)
            resolved = dataclasses.replace(resolved, request=request)
        ctx = _Context(command.context_id, resolved, last_activity=time.monotonic())
        self._contexts[ctx.id] = ctx
        return ctx

    async def _feed(self, ctx: _Context, text: str, *, flush: bool) -> None:
        ctx.last_activity = time.monotonic()
        if ctx.open is None and text.strip():
            ctx.open = await self._start_run(ctx)
            text = text.lstrip()  # the init message's " " and a chunk's leading space start no utterance
        if ctx.open is not None and text:
            ctx.open.aligner.add_text(clean_text(text))  # the pipeline's word offsets count the cleaned text
            try:
                ctx.open.admitted.utterance.feed(text)
            except PayloadTooLargeError as exc:
                await self._fatal(exc.message, "max_character_limit_exceeded", CLOSE_TOO_BIG)
        if flush:
            _flush(ctx)

    async def _start_run(self, ctx: _Context) -> _Run:
        self._utterances += 1
        request_id = f"{self.request_id}-{self._utterances}"
        try:
            admitted = admit(self.state, ctx.resolved, protocol=PROTOCOL, max_buffer_chars=MAX_SESSION_CHARS,
                             request_id=request_id)  # fmt: skip
        except SpeakwireError as exc:
            await self._fatal_error(exc)
        run = _Run(admitted)
        ctx.speakers.start(admitted, lambda _: self._speak(ctx, run))
        return run

    def _close_context(self, ctx: _Context) -> None:
        """Unflushed text is dropped and its audio stops now; flushed text is still spoken; then isFinal."""
        self._contexts.pop(ctx.id, None)
        if ctx.open is not None:
            ctx.open.stopped = True
            ctx.open.admitted.utterance.cancel()
            ctx.open = None
        self._draining.add(ctx)
        ctx.speakers.start(None, lambda _: self._final(ctx))

    async def _end_of_input(self) -> NoReturn:
        """stream-input's ``{"text": ""}``: speak everything, send isFinal, close with 1000."""
        ctx = self._contexts.get(None)
        if ctx is None:
            await self._send(p.final_message(None, multi=False))
        else:
            _flush(ctx)
            self._close_context(ctx)
        await self._finish_draining()

    async def _close_socket(self) -> NoReturn:
        """multi-stream-input's ``close_socket``: every context ends as on close_context, then close 1000."""
        for ctx in list(self._contexts.values()):
            self._close_context(ctx)
        await self._finish_draining()

    async def _finish_draining(self) -> NoReturn:
        """Wait until every closed context has sent its last audio and isFinal, then close with 1000.

        The client is still read meanwhile (what it sends is ignored), so a client that leaves stops the
        synthesis at once instead of when the speakers next try to send.
        """
        waiting = {s.task for ctx in self._draining for s in ctx.speakers.speaking}
        reader = asyncio.create_task(self._read_until_disconnect())
        try:
            while waiting and not reader.done():
                await asyncio.wait([reader, *waiting], return_when=asyncio.FIRST_COMPLETED)
                waiting = {s for s in waiting if not s.done()}
        finally:
            reader.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await reader
        if not waiting:
            await self.close(CLOSE_NORMAL)
        raise ChannelClosed

    async def _read_until_disconnect(self) -> None:
        with contextlib.suppress(ChannelClosed):
            while True:
                await self.channel.receive()

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(self, ctx: _Context, run: _Run) -> None:
        """Send one utterance's audio, each message with the alignment of the words that start in it.

        Once the engine has timed a word of this utterance, audio in which no word starts (the middle of a long
        word in a streamed window, a sentence's last few resampled samples) waits for the next chunk, unless
        nothing more is coming yet: clients that place each chunk's words by adding up the previous chunks'
        alignment (pipecat's ``calculate_word_times``) would otherwise lose its duration.

        Words from an aligner (Qwen3) come after their sentence's audio, and no audio is held for them: the audio
        goes out at once with no alignment, and each sentence's words follow (possibly after later sentences'
        audio) in a message with empty audio whose alignment spans the audio from the end of the previous
        alignment to the end of that sentence. pipecat and LiveKit read ``alignment`` apart from ``audio`` and
        advance their clock by each alignment's span, so the spans still add up to the audio and every word lands
        where it is heard; no span reaches past the audio already sent.
        """
        assert self._query is not None
        fmt = self._query.output_format
        rate = fmt.sample_rate
        out = await AudioOut.open(fmt.output())
        utterance = run.admitted.utterance
        after_audio = utterance.aligned_words
        unsent = b""
        chars: list[CharTiming] = []
        produced = sent = 0
        """Samples out of the encoder / covered by messages already sent (alignment is relative to these)."""
        aligned = False
        async for part in out.parts(utterance):
            if run.stopped:
                continue
            if isinstance(part, AudioPart) and after_audio:
                produced += part.samples
                if part.data:
                    await self._send_audio(ctx, run, part.data, [], 0.0, 0.0)
            elif isinstance(part, WordsPart):
                # A sentence's aligned words: their alignment spans the audio from the last one's end to their
                # sentence's end (already sent: later sentences' audio may have gone out before them).
                sentence_end = part.start + part.samples - out.utterance_start
                placed = run.aligner.place(part.words, sentence_end / rate)
                if placed:
                    await self._send_audio(ctx, run, b"", placed, sent / rate, sentence_end / rate)
                    sent = sentence_end
            elif isinstance(part, AudioPart):
                produced += part.samples
                aligned = aligned or bool(part.words)
                chars += run.aligner.place(part.words, produced / rate)
                unsent += part.data
                if unsent and (chars or not aligned):
                    await self._send_audio(ctx, run, unsent, chars, sent / rate, produced / rate)
                    unsent, chars, sent = b"", [], produced
            elif isinstance(part, SegmentEnd):
                if unsent and (chars or not aligned or utterance.idle):
                    await self._send_audio(ctx, run, unsent, chars, sent / rate, produced / rate)
                    unsent, chars, sent = b"", [], produced
                if part.error is not None:
                    logger.warning("elevenlabs: segment %d failed: %s", part.index, part.error.message)
                    message = p.error_message(f"Synthesis failed: {part.error.message}", "synthesis_failed")
                    message["requestId"] = run.admitted.request_id
                    await self._send({**message, "contextId": ctx.id} if self.multi else message)
            elif isinstance(part, UtteranceEnd) and not part.cancelled:
                unsent += part.data
                chars += run.aligner.finish(produced / rate)
                if unsent or (after_audio and chars):  # an aligner's: the text no word reached, to the end
                    await self._send_audio(ctx, run, unsent, chars, sent / rate, produced / rate)
        ctx.last_activity = self.channel.last_activity = time.monotonic()  # inactivity counts from here

    async def _send_audio(
        self, ctx: _Context, run: _Run, data: bytes, chars: list[CharTiming], start_s: float, end_s: float
    ) -> None:
        if run.stopped:
            return
        alignment = ws_alignment(chars, start_s, end_s)
        message = p.audio_message(base64.b64encode(data).decode(), alignment, ctx.id, multi=self.multi)
        await self._send({**message, "requestId": run.admitted.request_id})

    async def _final(self, ctx: _Context) -> None:
        try:
            await self._send(p.final_message(ctx.id, multi=self.multi))
        finally:
            self._draining.discard(ctx)


def _flush(ctx: _Context) -> None:
    """Speak the open utterance's text now, even its unfinished last sentence; later text opens another."""
    if ctx.open is not None:
        ctx.open.admitted.utterance.finish()
        ctx.open = None


def _idle(ctx: _Context) -> bool:
    """Nothing is waiting to be spoken: only more text could make this context speak."""
    speaking = ctx.speakers.speaking
    if not speaking:
        return True
    run = ctx.open  # speaking, or waiting for text: idle only if it has none to speak
    if run is None or len(speaking) > 1 or speaking[0].admitted is not run.admitted:
        return False
    return run.admitted.utterance.idle


def _utf8(raw: str | bytes) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode(errors="surrogatepass")
