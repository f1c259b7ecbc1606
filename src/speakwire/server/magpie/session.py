"""MagpieSession: one NVIDIA Magpie (NIM) realtime synthesis session; the I/O of ``protocol.RealtimeConnection``.

Reached on SageMaker's default bidirectional path when the client's first message is a Magpie event
(``server.sagemaker.router``). Each commit is one utterance, admitted and spoken on the session's
``SpeakerChain``, so commits are heard in order while the next may already synthesize; an ``input_text.done``
adds a turn with nothing to say whose speaker sends ``speech.completed`` once every earlier commit is out.
The lifetime (draining, idle, going away, internal errors, cancelling everything at the end) is
``server.session.WebSocketSession``'s.

With an API key set, the key comes in a header or query parameter (``auth.offered_key``), except in SageMaker
mode: there the stream is IAM-authenticated by SageMaker, which strips headers, as ``/invocations`` is trusted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, NoReturn

from starlette.websockets import WebSocket

from speakwire.errors import ShuttingDownError, SpeakwireError, TooBusyError
from speakwire.output import AudioOut, AudioPart, OutputSpec, SegmentEnd, UtteranceEnd
from speakwire.server.admission import Admitted, admit
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.limits import CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TRY_LATER, MAX_SESSION_CHARS
from speakwire.server.magpie import protocol as p
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.session import WebSocketSession
from speakwire.server.speakers import SpeakerChain
from speakwire.server.state import ServerState
from speakwire.server.websocket_channel import ChannelClosed

PROTOCOL = "magpie"


@dataclasses.dataclass(slots=True)
class _TurnAudio:
    """The audio sent since the last ``speech.completed``: what the next one reports."""

    chunks: int = 0
    seconds: float = 0.0


class MagpieSession(WebSocketSession):
    protocol = PROTOCOL

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        super().__init__(websocket, state)
        self.connection = p.RealtimeConnection(max_commit_chars=state.settings.max_input_chars)
        settings = state.settings
        self._authorized = (
            not settings.api_key
            or settings.sagemaker
            or key_matches(settings.api_key, offered_key(websocket.headers, websocket.query_params))
        )
        self._speakers = SpeakerChain()
        self._resolved: ResolvedSpeech | None = None
        """The session's settings resolved (``connection.config``); None until first needed."""
        self._commits = 0
        self._turn = _TurnAudio()
        self._greeted = False

    # ----- the lifetime's hooks ---------------------------------------------------------------------

    async def start(self) -> None:
        if not self._authorized:
            error = p.MagpieError("Missing or invalid API key (header or ?api_key=).", code="unauthorized")
            await self._fatal(p.error_event(error), CLOSE_POLICY)
        await self.greet()

    async def greet(self) -> None:
        """``conversation.created``, once: at the start, or earlier for a client that waits for it before it
        sends anything (SageMaker's default path greets a silent client; ``sagemaker.router``)."""
        if self._authorized and not self._greeted:
            self._greeted = True
            await self._send(self.connection.greeting())

    async def refuse_draining(self, error: ShuttingDownError) -> None:
        refusal = p.MagpieError(error.message, code="server_busy", kind="server_error")
        await self._fatal(p.error_event(refusal), CLOSE_TRY_LATER)

    def busy(self) -> bool:
        """Text waits for its commit or a commit is still speaking: never idle then, however quiet the client."""
        return self.connection.has_text or self._speakers.busy

    async def say_going_away(self, message: str) -> None:
        await self._send(p.error_event(p.MagpieError(message, code="shutting_down", kind="server_error")))

    async def cancel_all(self) -> None:
        await self._speakers.cancel_all()

    # ----- client messages ----------------------------------------------------------------------

    async def dispatch(self, message: str | bytes) -> None:
        for action in self.connection.receive(message):
            await self._act(action)

    async def _act(self, action: p.Action) -> None:
        if isinstance(action, p.Reply):
            await self._send(action.event)
        elif isinstance(action, p.Fatal):
            await self._fatal(action.event, action.code)
        elif isinstance(action, p.Configure):
            await self._configure(action)
        elif isinstance(action, p.Commit):
            await self._commit(action)
        elif isinstance(action, p.Finish):
            await self._send(p.input_ended(len(self._speakers.speaking), action.event_id))
            self._speakers.start(None, lambda _: self._complete())
        else:  # End
            await self.cancel_all()
            await self.fatal(CLOSE_NORMAL, "session.end")

    async def _resolve(self, config: p.SynthesisConfig) -> ResolvedSpeech:
        """Our engine's settings for ``config``; raises ``SpeakwireError`` (an unknown voice, a bad rate, ...)."""
        engine, _, _ = self.state.require_ready()
        return await resolve_speech(self.state, engine, config.speech_options())

    async def _configure(self, action: p.Configure) -> None:
        try:
            resolved = await self._resolve(action.config)
        except SpeakwireError as exc:  # the session keeps its settings
            await self._send(p.error_event(p.from_speakwire(exc), action.event_id))
            return
        self._resolved = resolved
        await self._send(self.connection.configured(action.config, action.event_id))

    async def _commit(self, action: p.Commit) -> None:
        item_id = f"{self.request_id}-{self._commits + 1}"
        try:
            resolved = self._resolved = self._resolved or await self._resolve(self.connection.config)
            admitted = admit(self.state, resolved, protocol=self.protocol, max_buffer_chars=MAX_SESSION_CHARS,
                             request_id=item_id)  # fmt: skip
        except TooBusyError as exc:
            refusal = p.MagpieError(exc.message, code="server_busy", kind="server_error")
            await self._fatal(p.error_event(refusal, action.event_id), CLOSE_TRY_LATER)
        except SpeakwireError as exc:
            await self._send(p.error_event(p.from_speakwire(exc), action.event_id))
            return
        try:
            admitted.say(action.text)
        except SpeakwireError as exc:  # say gave the slot back
            await self._send(p.error_event(p.from_speakwire(exc), action.event_id))
            return
        self._commits += 1
        await self._send(p.committed_event(item_id, action.event_id))
        rate = resolved.output_rate
        self._speakers.start(admitted, lambda _: self._speak(admitted, item_id, rate))

    # ----- speaking ---------------------------------------------------------------------------

    async def _speak(self, admitted: Admitted, item_id: str, rate: int) -> None:
        """One commit's audio as ``speech.data`` events as it is made, then its last (empty) chunk."""
        out = await AudioOut.open(OutputSpec("pcm", rate))
        async for part in out.parts(admitted.utterance):
            if isinstance(part, AudioPart | UtteranceEnd) and part.data:
                for at in range(0, len(part.data), p.MAX_AUDIO_BYTES_PER_EVENT):
                    await self._send(p.speech_data(item_id, part.data[at : at + p.MAX_AUDIO_BYTES_PER_EVENT]))
                    self._turn.chunks += 1
            if isinstance(part, AudioPart):
                self._turn.seconds += part.samples / rate
            elif isinstance(part, SegmentEnd) and part.error is not None:
                failure = p.MagpieError(f"Sentence {part.index} failed: {part.error.message}",
                                        code="synthesis_failed", kind="server_error")  # fmt: skip
                await self._send(p.error_event(failure))
            elif isinstance(part, UtteranceEnd):
                if not part.cancelled:
                    await self._send(p.speech_data(item_id, b"", last=True))
                return

    async def _complete(self) -> None:
        """Every commit before the ``input_text.done`` is out: the turn's ``speech.completed``."""
        turn, self._turn = self._turn, _TurnAudio()
        await self._send(p.speech_completed(turn.chunks, round(turn.seconds * 1000)))
        self.channel.last_activity = time.monotonic()

    async def _send(self, event: dict[str, Any]) -> None:
        await self.channel.send_json(event)

    async def _fatal(self, event: dict[str, Any], code: int) -> NoReturn:
        with contextlib.suppress(ChannelClosed):
            await self._send(event)
        await self.fatal(code, str(event.get("error", {}).get("message", "")))
