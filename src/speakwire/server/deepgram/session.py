"""DeepgramSpeakSession: one Deepgram ``/v1/speak`` WebSocket; the I/O of ``protocol.SpeakConnection``.

The handshake is checked before it is accepted, so a bad key or parameter is an HTTP refusal as
Deepgram gives it. After that the receive loop never waits for synthesis: text joins the open
utterance as it arrives, and ``Clear``/``Close`` act at once. Each utterance (the text between two
flushes) is a turn on the session's ``SpeakerChain``: its speaker sends the audio, then its ``Flushed``,
so audio never interleaves while the next utterance may already synthesize. ``dg-request-id`` and
``Metadata.request_id`` are the connection's ``x-request-id``; each utterance's own id rides on its
``Flushed``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

import speakwire
from speakwire.errors import PayloadTooLargeError, ShuttingDownError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, AudioPart, OutputSpec, SegmentEnd, UtteranceEnd
from speakwire.server.admission import Admitted, admit
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.deepgram import protocol as p
from speakwire.server.limits import CLOSE_INTERNAL, CLOSE_NORMAL, CLOSE_TRY_LATER, MAX_FRAME_BYTES, MAX_SESSION_CHARS
from speakwire.server.options import ResolvedSpeech, SpeechOptions, resolve_speech
from speakwire.server.session import GOING_AWAY_MESSAGE, WebSocketSession
from speakwire.server.speakers import SpeakerChain
from speakwire.server.state import ServerState

PROTOCOL = "deepgram"


@dataclasses.dataclass(slots=True, eq=False)
class _Turn:
    """The text between two flushes: its utterance (None for a flush of an empty buffer) and its Flush."""

    admitted: Admitted | None
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


class DeepgramSpeakSession(WebSocketSession):
    protocol = PROTOCOL
    internal_error_reason = "NET-0000: internal error"
    going_away_reason = f"SHUTTING_DOWN: {GOING_AWAY_MESSAGE}"

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        super().__init__(websocket, state)
        self.connection = p.SpeakConnection()
        self._speakers = SpeakerChain()
        self._open: _Turn | None = None
        self._setup: _Setup | None = None
        self._utterances = 0

    # ----- lifetime hooks ---------------------------------------------------------------

    async def accept(self) -> bool:
        try:
            self._setup = setup = await self._handshake()
        except p.DeepgramError as exc:
            await self._refuse(exc)
            return False
        await self.ws.accept(subprotocol=setup.subprotocol, headers=[(b"dg-request-id", self.request_id.encode())])
        return True

    async def refuse_draining(self, error: ShuttingDownError) -> None:
        await self.close(CLOSE_TRY_LATER, f"TOO_BUSY: {error.message}")

    async def start(self) -> None:
        setup = self._setup
        assert setup is not None
        event = p.metadata(self.request_id, setup.model_name, speakwire.__version__, setup.model_uuid)
        await self.channel.send_json(event)

    def busy(self) -> bool:
        """A turn is open or still speaking: the session is not idle, however quiet the client."""
        return self._open is not None or self._speakers.busy

    async def on_idle(self) -> None:
        idle = self.state.settings.ws_idle_timeout_s
        await self.close(CLOSE_INTERNAL, f"NET-0001: no message within {idle:g} s")

    async def say_going_away(self, message: str) -> None:
        await self.channel.send_json(p.warning(p.ProtocolWarning("SHUTTING_DOWN", message)))

    async def cancel_all(self) -> None:
        """Stop every utterance of this session now, and wait until their speakers are gone."""
        self._open = None
        self.connection.drop()
        await self._speakers.cancel_all()

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

    # ----- client messages --------------------------------------------------------------

    async def dispatch(self, message: str | bytes) -> None:
        action = self.connection.receive(message)
        if isinstance(action, p.TooBig):
            await self.fatal(action.code, action.reason)
        elif isinstance(action, p.ProtocolWarning):
            await self.channel.send_json(p.warning(action))
        elif isinstance(action, p.SpeakText):
            await self._on_speak(action)
        elif isinstance(action, p.FlushTurn):
            turn = self._open or self._start_turn(None)
            self._open = None
            turn.sequence_id = action.sequence_id
            turn.flushed.set()
            if turn.admitted is not None:
                turn.admitted.utterance.finish()
        elif isinstance(action, p.ClearAll):
            await self.cancel_all()
            await self.channel.send_json(p.cleared(action.sequence_id))
        elif isinstance(action, p.KeepAlive):
            pass  # receiving it reset the idle clock; Deepgram answers nothing
        else:  # Close
            await self.cancel_all()
            await self.fatal(CLOSE_NORMAL, "Close")

    async def _on_speak(self, action: p.SpeakText) -> None:
        if action.opens:
            assert self._setup is not None
            self._utterances += 1
            try:
                admitted = admit(self.state, self._setup.resolved, protocol=PROTOCOL,
                                 max_buffer_chars=MAX_SESSION_CHARS,
                                 request_id=f"{self.request_id}-{self._utterances}")  # fmt: skip
            except TooBusyError as exc:
                self.connection.drop()
                await self.fatal(CLOSE_TRY_LATER, f"TOO_BUSY: {exc.message}")
            self._open = self._start_turn(admitted)
        turn = self._open
        assert turn is not None and turn.admitted is not None
        try:
            turn.admitted.utterance.feed(action.text)
        except PayloadTooLargeError as exc:
            warning = p.ProtocolWarning("TEXT_LENGTH_EXCEEDED", f"{exc.message} The text was dropped.")
            await self.channel.send_json(p.warning(warning))

    def _start_turn(self, admitted: Admitted | None) -> _Turn:
        turn = _Turn(admitted)
        self._speakers.start(admitted, lambda _: self._speak(turn))
        return turn

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(self, turn: _Turn) -> None:
        """The turn's audio as it is made, then (once its Flush came) its ``Flushed``; a cleared turn is never
        answered."""
        admitted = turn.admitted
        if admitted is not None and not await self._send_audio(admitted):
            return
        await turn.flushed.wait()
        assert turn.sequence_id is not None
        request_id = admitted.request_id if admitted is not None else None
        await self.channel.send_json(p.flushed(turn.sequence_id, request_id))
        self.channel.last_activity = time.monotonic()

    async def _send_audio(self, admitted: Admitted) -> bool:
        """Send the utterance's audio as it is made; False if it was cancelled."""
        assert self._setup is not None
        resolved = self._setup.resolved
        out = await AudioOut.open(OutputSpec(resolved.response_format, resolved.output_rate))
        async for part in out.parts(admitted.utterance):
            if isinstance(part, AudioPart | UtteranceEnd) and part.data:
                await self.channel.send_bytes(part.data, MAX_FRAME_BYTES)
            if isinstance(part, SegmentEnd) and part.error is not None:
                warning = p.ProtocolWarning("SYNTHESIS_FAILED", f"Sentence {part.index} failed: {part.error.message}")
                await self.channel.send_json(p.warning(warning, admitted.request_id))
            elif isinstance(part, UtteranceEnd):
                return not part.cancelled
        return False
