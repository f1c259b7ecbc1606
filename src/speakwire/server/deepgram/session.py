"""DeepgramSpeakSession: one Deepgram ``/v1/speak`` WebSocket over the synthesis pipeline.

The handshake is checked before it is accepted, so a bad key or parameter is an HTTP refusal as
Deepgram gives it. After that the receive loop never waits for synthesis: text joins the open
utterance as it arrives, and ``Clear``/``Close`` act at once. Each utterance (the text between two
flushes) has a *speaker* task that sends its audio and then its ``Flushed``; speakers are chained so
audio never interleaves while the next utterance may already synthesize. All sends go through one lock
(the session's ``WebSocketChannel``), and every task is cancelled and awaited when the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

import speakwire
from speakwire.encoders.off_loop import open_encoder
from speakwire.encoders.registry import create_encoder
from speakwire.errors import PayloadTooLargeError, ShuttingDownError, SpeakwireError, TooBusyError
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.deepgram import protocol as p
from speakwire.server.flow import write_stall
from speakwire.server.options import ResolvedSpeech, SpeechOptions, resolve_speech
from speakwire.server.state import ServerState
from speakwire.server.stream.protocol import MAX_SESSION_CHARS
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.server.websocket_channel import ChannelClosed, WebSocketChannel
from speakwire.synthesis import AudioReady, SegmentFinished, Utterance, UtteranceFinished

logger = logging.getLogger(__name__)

PROTOCOL = "deepgram"


@dataclasses.dataclass(slots=True, eq=False)
class _Turn:
    """The text between two flushes: its utterance (None for a flush of an empty buffer) and its speaker."""

    utterance: Utterance | None
    speaker: asyncio.Task[None] | None = None
    sequence_id: int | None = None
    """Set by the Flush that ends the turn."""
    flushed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


@dataclasses.dataclass(frozen=True, slots=True)
class _Setup:
    params: p.SpeakParams
    resolved: ResolvedSpeech
    model_name: str
    model_uuid: str
    subprotocol: str | None


class DeepgramSpeakSession:
    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.ws = websocket
        self.state = state
        self.request_id = str(uuid.uuid4())
        self._channel = WebSocketChannel(websocket, write_stall(state, PROTOCOL))
        self._turns: list[_Turn] = []
        self._open: _Turn | None = None
        self._sequence = p.FlushSequence()
        self._setup: _Setup | None = None

    # ----- lifetime ---------------------------------------------------------------------

    async def run(self) -> None:
        try:
            setup = await self._handshake()
        except p.DeepgramError as exc:
            await self._refuse(exc)
            return
        self._setup = setup
        await self.ws.accept(subprotocol=setup.subprotocol, headers=[(b"dg-request-id", self.request_id.encode())])
        if self.state.draining:  # SIGTERM: refused as a stream at capacity is, with 1013 (server.drain)
            await self._close(p.CLOSE_TRY_LATER, f"TOO_BUSY: {ShuttingDownError().message}")
            return
        try:
            with self.state.open_session(self):
                engine_version = speakwire.__version__
                await self._send_json(p.metadata(self.request_id, setup.model_name, engine_version, setup.model_uuid))
                idle = self.state.settings.ws_idle_timeout_s
                while (message := await self._channel.receive_idle(idle, self._busy)) is not None:
                    await self._dispatch(message)
                await self._close(p.CLOSE_INTERNAL, f"NET-0001: no message within {idle:g} s")
        except ChannelClosed:
            pass
        except Exception:
            logger.exception("deepgram speak session failed")
            await self._close(p.CLOSE_INTERNAL, "NET-0000: internal error")
        finally:
            await self._cancel_all()

    async def going_away(self) -> None:
        """The drain is over (``server.drain``): a ``Warning`` saying so, then close 1001 with the reason."""
        message = "Server is shutting down; reconnect to continue (another instance will answer)."
        with contextlib.suppress(ChannelClosed):
            await self._warn(p.ProtocolWarning("SHUTTING_DOWN", message))
        await self._close(p.CLOSE_GOING_AWAY, f"SHUTTING_DOWN: {message}")

    async def _handshake(self) -> _Setup:
        """Everything Deepgram checks before the upgrade; raises the ``DeepgramError`` to refuse with."""
        headers, query = self.ws.headers, self.ws.query_params
        protocol_key = p.subprotocol_key(headers.get("sec-websocket-protocol"))
        expected = self.state.settings.api_key
        if expected and not key_matches(expected, offered_key(headers, query) or protocol_key):
            raise p.unauthorized()
        params = p.parse_ws_query(query)
        try:
            engine, _, _ = self.state.require_ready()
            model, voice = p.speech_target(params.model, self.state.served_models(engine.info))
            options = SpeechOptions(model=model, voice=voice, response_format=params.response_format,
                                    speed=params.speed, sample_rate=params.sample_rate, seed=params.seed)  # fmt: skip
            resolved = await resolve_speech(self.state, engine, options)
        except SpeakwireError as exc:
            raise p.from_speakwire(exc) from None
        speaker = resolved.request.voice or (voice if voice else engine.info.model)
        model_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"speakwire:{engine.info.model}:{speaker}"))
        return _Setup(params, resolved, params.model or speaker, model_uuid, "token" if protocol_key else None)

    async def _refuse(self, error: p.DeepgramError) -> None:
        """Answer the upgrade with an HTTP error, as Deepgram does (a server without the denial extension: 403)."""
        response = JSONResponse(p.error_body(error, self.request_id), status_code=error.status,
                                headers=p.error_headers(error, self.request_id))  # fmt: skip
        try:
            await self.ws.send_denial_response(response)
        except RuntimeError:
            await self.ws.close(1008, error.message[:120])

    def _busy(self) -> bool:
        """A turn is open or still speaking: the session is not idle, however quiet the client."""
        return self._open is not None or any(t.speaker is not None and not t.speaker.done() for t in self._turns)

    # ----- sending ----------------------------------------------------------------------

    async def _send_json(self, event: dict[str, Any]) -> None:
        await self._channel.send_json(event)

    async def _send_bytes(self, data: bytes) -> None:
        await self._channel.send_bytes(data, p.MAX_FRAME_BYTES)

    async def _warn(self, item: p.ProtocolWarning) -> None:
        await self._send_json(p.warning(item))

    async def _close(self, code: int, reason: str = "") -> None:
        await self._channel.close(code, reason[:120])

    # ----- client messages --------------------------------------------------------------

    async def _dispatch(self, message: str | bytes) -> None:
        if len(message) > p.MAX_MESSAGE_BYTES // 4 and _size(message) > p.MAX_MESSAGE_BYTES:
            await self._close(p.CLOSE_TOO_BIG, f"BIG-0000: message exceeds {p.MAX_MESSAGE_BYTES} bytes")
            raise ChannelClosed
        command = p.parse_client_message(message)
        if isinstance(command, p.ProtocolWarning):
            await self._warn(command)
        elif isinstance(command, p.Speak):
            await self._on_speak(command.text)
        elif isinstance(command, p.Flush):
            self._on_flush()
        elif isinstance(command, p.Clear):
            await self._cancel_all()
            await self._send_json(p.cleared(self._sequence.watermark()))
        elif isinstance(command, p.Close):
            await self._cancel_all()
            await self._close(p.CLOSE_NORMAL, "Close")
            raise ChannelClosed

    async def _on_speak(self, text: str) -> None:
        turn = self._open
        if turn is None:
            assert self._setup is not None
            try:
                utterance = open_utterance(self.state, self._setup.resolved, protocol=PROTOCOL,
                                           max_buffer_chars=MAX_SESSION_CHARS)  # fmt: skip
            except TooBusyError as exc:
                await self._close(p.CLOSE_TRY_LATER, f"TOO_BUSY: {exc.message}")
                raise ChannelClosed from None
            turn = self._start_turn(utterance)
            self._open = turn
        assert turn.utterance is not None
        try:
            turn.utterance.feed(text)
        except PayloadTooLargeError as exc:
            await self._warn(p.ProtocolWarning("TEXT_LENGTH_EXCEEDED", f"{exc.message} The text was dropped."))

    def _on_flush(self) -> None:
        turn = self._open or self._start_turn(None)
        self._open = None
        turn.sequence_id = self._sequence.next_flush()
        turn.flushed.set()
        if turn.utterance is not None:
            turn.utterance.finish()

    def _start_turn(self, utterance: Utterance | None) -> _Turn:
        self._turns = [t for t in self._turns if t.speaker is not None and not t.speaker.done()]
        previous = self._turns[-1].speaker if self._turns else None
        turn = _Turn(utterance)
        turn.speaker = asyncio.create_task(self._speak(turn, previous))
        self._turns.append(turn)
        return turn

    async def _cancel_all(self) -> None:
        """Stop every utterance of this session now, and wait until their speakers are gone."""
        self._open = None
        turns, self._turns = self._turns, []
        for turn in turns:
            if turn.utterance is not None:
                turn.utterance.cancel()
            if turn.speaker is not None:
                turn.speaker.cancel()
        for turn in turns:
            if turn.speaker is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await turn.speaker
            if turn.utterance is not None:
                close_utterance(self.state, turn.utterance, PROTOCOL)

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(self, turn: _Turn, previous: asyncio.Task[None] | None) -> None:
        utterance = turn.utterance
        try:
            if previous is not None:
                # However the previous turn ends; only this task's own cancellation propagates, so a
                # cleared flush waiting here is never answered.
                await asyncio.wait([previous])
            if utterance is not None and not await self._send_audio(utterance):
                return
            await turn.flushed.wait()
            assert turn.sequence_id is not None
            await self._send_json(p.flushed(turn.sequence_id))
            self._channel.last_activity = time.monotonic()
        except ChannelClosed:
            if utterance is not None:
                utterance.cancel()
        finally:
            if utterance is not None:
                close_utterance(self.state, utterance, PROTOCOL)

    async def _send_audio(self, utterance: Utterance) -> bool:
        """Send the utterance's audio as it is made; False if it was cancelled."""
        assert self._setup is not None
        resolved = self._setup.resolved
        fmt, rate = resolved.response_format, resolved.output_rate
        encoder = await open_encoder(fmt, lambda: create_encoder(fmt, rate, streaming=True))
        async for event in utterance.events():
            if isinstance(event, AudioReady):
                data = await encoder.encode(event.samples)
                if data:
                    await self._send_bytes(data)
            elif isinstance(event, SegmentFinished) and event.error is not None:
                message = f"Sentence {event.index} failed: {event.error.message}"
                await self._warn(p.ProtocolWarning("SYNTHESIS_FAILED", message))
            elif isinstance(event, UtteranceFinished):
                return not event.cancelled
        return False


def _size(message: str | bytes) -> int:
    return len(message) if isinstance(message, bytes) else len(message.encode(errors="surrogatepass"))
