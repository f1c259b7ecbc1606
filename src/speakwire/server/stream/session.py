"""StreamSession: one WebSocket connection of the speech stream.

The receive loop never waits for synthesis: it keeps reading client events while
audio is produced, so text arriving mid-utterance joins it, and a cancel takes
effect at once. Each utterance has a *speaker* task that turns pipeline events
into wire events; speakers are chained so utterances never interleave, while the
next utterance may already synthesize. All sends go through one lock (the session's
``WebSocketChannel``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from typing import Any

import numpy as np
from starlette.websockets import WebSocket

from speakwire.audio.chunk import float_to_int16_bytes
from speakwire.encoders.registry import encode_file
from speakwire.errors import NotReadyError, PayloadTooLargeError, ShuttingDownError, SpeakwireError, TooBusyError
from speakwire.server.auth import key_matches, offered_key
from speakwire.server.flow import write_stall
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.state import ServerState
from speakwire.server.stream import protocol as p
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.server.websocket_channel import ChannelClosed, WebSocketChannel
from speakwire.synthesis import AudioReady, SegmentFinished, SegmentStarted, Utterance, UtteranceFinished
from speakwire.text.alignment import WordTiming

logger = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class _Sent:
    """How much of one utterance the client has been sent: what ``input.cancelled`` reports."""

    rate: int
    samples: int = 0
    words: list[WordTiming] = dataclasses.field(default_factory=list)
    sentence_chars: int = 0
    """The text through the last sentence whose audio was sent whole."""

    def heard(self, index: int, text: str) -> p.Heard:
        audio_s = self.samples / self.rate
        spoken = self.sentence_chars
        for word in self.words:  # in order; a word counts once all of its audio was sent
            if word.end_s > audio_s:
                break
            spoken = max(spoken, word.char_end)
        return p.Heard(index, min(spoken, len(text)), text, audio_s)


@dataclasses.dataclass(slots=True)
class _Active:
    """An utterance and the task speaking it."""

    index: int
    utterance: Utterance
    speaker: asyncio.Task[None]
    sent: _Sent


class StreamSession:
    def __init__(self, websocket: WebSocket, state: ServerState, *, protocol: str = "websocket") -> None:
        self.ws = websocket
        self.state = state
        self.protocol = protocol
        self._channel = WebSocketChannel(websocket, write_stall(state, protocol))
        self._config: p.StreamConfig | None = None
        self._resolved: ResolvedSpeech | None = None
        self._open: _Active | None = None
        """The utterance accepting text (no input.done yet)."""
        self._speaking: list[_Active] = []
        self._next_index = 0
        self._authorized = not state.settings.api_key
        self._closing = False

    # ----- lifetime ---------------------------------------------------------------------

    async def run(self) -> None:
        await self.ws.accept()
        if self.state.draining:  # SIGTERM: a new session is refused as a stream at capacity is (server.drain)
            await self._reject_busy(ShuttingDownError())
            return
        if not self._authorized:
            offered = offered_key(self.ws.headers, self.ws.query_params)
            self._authorized = key_matches(self.state.settings.api_key or "", offered)
        try:
            with self.state.open_session(self):
                await self._await_config()
                idle = self.state.settings.ws_idle_timeout_s
                while (message := await self._channel.receive_idle(idle, self._busy)) is not None:
                    await self._dispatch(message)
                await self._fatal(f"Idle for {idle:g} s; closing the session.", p.CLOSE_NORMAL, code="idle_timeout")
        except ChannelClosed:
            pass
        except Exception:
            logger.exception("stream session failed")
            await self._close(p.CLOSE_INTERNAL, "internal error")
        finally:
            await self._cancel_all()

    async def going_away(self) -> None:
        """The drain is over (``server.drain``): an ``error`` event saying so, then close 1001."""
        message = "Server is shutting down; reconnect to continue (another instance will answer)."
        with contextlib.suppress(ChannelClosed):
            await self._error(message, code="shutting_down")
        await self._close(p.CLOSE_GOING_AWAY, "server shutting down")

    async def _await_config(self) -> None:
        deadline = time.monotonic() + self.state.settings.ws_config_timeout_s
        while self._config is None:
            remaining = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(self._channel.receive(), timeout=max(remaining, 0.001))
            except TimeoutError:
                await self._fatal(
                    f"No session.config within {self.state.settings.ws_config_timeout_s:g} s; send it first.",
                    p.CLOSE_POLICY, code="config_timeout",
                )  # fmt: skip
            await self._dispatch(message)

    def _busy(self) -> bool:
        """An utterance is open or still speaking: the session is not idle, however quiet the client."""
        return self._open is not None or any(not a.speaker.done() for a in self._speaking)

    # ----- sending ----------------------------------------------------------------------

    async def _send_json(self, event: dict[str, Any]) -> None:
        await self._channel.send_json(event)

    async def _send_bytes(self, data: bytes) -> None:
        await self._channel.send_bytes(data, p.MAX_FRAME_BYTES)

    async def _error(self, message: str, **extra: Any) -> None:
        await self._send_json(p.error_event(message, **extra))

    async def _fatal(self, message: str, close_code: int, **extra: Any) -> None:
        with contextlib.suppress(ChannelClosed):
            await self._error(message, **extra)
        await self._close(close_code, message[:120])
        raise ChannelClosed

    async def _close(self, code: int, reason: str = "") -> None:
        await self._channel.close(code, reason)

    # ----- client events ----------------------------------------------------------------

    async def _dispatch(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            await self._error("Binary frames are not accepted; send JSON text events.", code="binary_not_supported")
            return
        if len(message) > p.MAX_CONFIG_BYTES and len(message.encode(errors="surrogatepass")) > p.MAX_CONFIG_BYTES:
            await self._fatal(f"Message exceeds {p.MAX_CONFIG_BYTES} bytes.", p.CLOSE_TOO_BIG, code="too_large")
        try:
            event = json.loads(message)
        except json.JSONDecodeError as exc:
            await self._error(f"Invalid JSON: {exc.msg} at position {exc.pos}.", code="invalid_json")
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind not in p.CLIENT_EVENT_TYPES:
            await self._error(
                f"Unknown event type {kind!r}; expected one of {', '.join(p.CLIENT_EVENT_TYPES)}.", code="unknown_type"
            )
            return
        if kind == "session.config":
            await self._on_config(event)
        elif self._config is None:
            await self._error(f"Send session.config before {kind}.", code="no_config")
        elif kind == "input.text":
            await self._on_text(event)
        elif kind == "input.done":
            await self._on_done()
        elif kind in ("input.cancel", "response.cancel"):
            await self._on_cancel()
        elif kind == "session.close":
            await self._on_session_close()

    async def _on_config(self, event: dict[str, Any]) -> None:
        if self._open is not None:
            await self._error(
                "An utterance is open: send input.done first, then session.config.", code="utterance_open"
            )
            return
        if not self._authorized:
            offered = event.get("api_key")
            if not key_matches(self.state.settings.api_key or "", offered if isinstance(offered, str) else None):
                await self._fatal("Missing or invalid API key (header, ?api_key= or session.config api_key).",
                                  p.CLOSE_POLICY, code="unauthorized")  # fmt: skip
            self._authorized = True
        try:
            config = p.parse_config(event)
            engine, _, _ = self.state.require_ready()
            resolved = await resolve_speech(self.state, engine, config.options)
        except NotReadyError as exc:
            await self._fatal(exc.message, p.CLOSE_TRY_LATER, code="not_ready")
            return
        except SpeakwireError as exc:
            await self._fatal(f"Invalid session.config: {exc.message}", p.CLOSE_POLICY, code="invalid_config",
                              param=exc.param)  # fmt: skip
            return
        self._config, self._resolved = config, resolved
        if config.ignored_fields:
            await self._send_json(
                {"type": "warning", "message": f"Ignored fields: {', '.join(config.ignored_fields)}."}
            )

    async def _on_text(self, event: dict[str, Any]) -> None:
        text = event.get("text")
        if not isinstance(text, str):
            await self._error("input.text needs a string 'text' field.", code="invalid_text")
            return
        encoded = len(text.encode(errors="surrogatepass")) if len(text) * 4 > p.MAX_TEXT_MESSAGE_BYTES else 0
        if encoded > p.MAX_TEXT_MESSAGE_BYTES:
            await self._fatal(f"input.text exceeds {p.MAX_TEXT_MESSAGE_BYTES} bytes.", p.CLOSE_TOO_BIG,
                              code="too_large")  # fmt: skip
            return
        active = self._open or self._start_utterance()
        if active is None:
            return
        try:
            active.utterance.feed(text)
        except PayloadTooLargeError as exc:
            await self._fatal(exc.message, p.CLOSE_TOO_BIG, code="too_large")

    def _start_utterance(self) -> _Active | None:
        assert self._config is not None and self._resolved is not None
        resolved = self._resolved
        try:
            utterance = open_utterance(
                self.state, resolved, protocol=self.protocol, granularity=self._config.granularity,
                max_buffer_chars=p.MAX_SESSION_CHARS,
            )  # fmt: skip
        except TooBusyError as exc:
            asyncio.get_running_loop().create_task(self._reject_busy(exc))
            return None
        index = self._next_index
        self._next_index += 1
        self._speaking = [a for a in self._speaking if not a.speaker.done()]
        previous = self._speaking[-1].speaker if self._speaking else None
        sent = _Sent(resolved.output_rate)
        speaker = asyncio.create_task(self._speak(index, utterance, self._config, resolved, previous, sent))
        self._open = _Active(index, utterance, speaker, sent)
        self._speaking.append(self._open)
        return self._open

    async def _reject_busy(self, exc: TooBusyError) -> None:
        """An ``error`` event with ``retry_after_s``, then close 1013 (try again later) with the reason."""
        retry_after_s = max(1, round(exc.retry_after_s))
        code = "shutting_down" if isinstance(exc, ShuttingDownError) else "busy"
        with contextlib.suppress(ChannelClosed):
            await self._fatal(exc.message, p.CLOSE_TRY_LATER, code=code, retry_after_s=retry_after_s)

    async def _on_done(self) -> None:
        if self._open is None:
            # Nothing was said: an empty utterance still gets its session.done.
            index = self._next_index
            self._next_index += 1
            await self._send_json({"type": "session.done", "utterance_index": index, "total_sentences": 0})
            return
        self._open.utterance.finish()
        self._open = None

    async def _on_cancel(self) -> None:
        targets = [a for a in self._speaking if not a.speaker.done()]
        index = targets[-1].index if targets else max(self._next_index - 1, 0)
        await self._cancel_all()  # the speakers are gone: what they sent is final
        heard = [a.sent.heard(a.index, a.utterance.text) for a in targets]
        await self._send_json(p.input_cancelled(heard, index))

    async def _on_session_close(self) -> None:
        if self._open is not None:
            self._open.utterance.cancel()
            self._open = None
        for active in list(self._speaking):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await active.speaker
        await self._close(p.CLOSE_NORMAL, "session.close")
        raise ChannelClosed

    async def _cancel_all(self) -> None:
        """Stop every utterance of this session now, wait until their speakers are gone, release the slots."""
        self._open = None
        active, self._speaking = self._speaking, []
        for item in active:
            item.utterance.cancel()
            item.speaker.cancel()
        for item in active:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await item.speaker
            # A speaker cancelled before it first ran never reaches its ``finally`` (e.g. a first input.text
            # over MAX_SESSION_CHARS ends the session at once): without this its admission slot would leak.
            close_utterance(self.state, item.utterance, self.protocol)

    # ----- speaking ---------------------------------------------------------------------

    async def _speak(
        self,
        index: int,
        utterance: Utterance,
        config: p.StreamConfig,
        resolved: ResolvedSpeech,
        previous: asyncio.Task[None] | None,
        sent: _Sent,
    ) -> None:
        fmt, rate = resolved.response_format, resolved.output_rate
        timestamps = config.word_timestamps
        try:
            if previous is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(previous)
            sentence_samples: list[np.ndarray] = []
            sentence_words: list[WordTiming] = []
            sentence_bytes = chunk_id = 0
            produced = sentence_start = 0  # samples of the utterance made so far / before this sentence
            sentence_text, sentence_offset, next_offset = "", 0, 0
            async for event in utterance.events():
                if isinstance(event, SegmentStarted):
                    sentence_samples, sentence_words, sentence_bytes, chunk_id = [], [], 0, 0
                    sentence_start, sentence_text = produced, event.text
                    sentence_offset, next_offset = next_offset, next_offset + len(event.text)
                    await self._send_json(p.audio_start(index, event.index, event.text, fmt, rate,
                                                        word_timestamps=timestamps))  # fmt: skip
                elif isinstance(event, AudioReady):
                    produced += len(event.samples)
                    sentence_words.extend(event.words)
                    if timestamps:
                        data = float_to_int16_bytes(event.samples)
                        for at in range(0, len(data), p.MAX_FRAME_BYTES):
                            piece = data[at : at + p.MAX_FRAME_BYTES]
                            start_ms = round((sentence_bytes // 2) * 1000 / rate)
                            sentence_bytes += len(piece)
                            end_ms = round((sentence_bytes // 2) * 1000 / rate)
                            await self._send_json(p.audio_chunk(index, event.index, chunk_id, start_ms, end_ms, rate,
                                                                piece))  # fmt: skip
                            chunk_id += 1
                    elif config.stream_audio:
                        data = float_to_int16_bytes(event.samples)
                        sentence_bytes += len(data)
                        await self._send_bytes(data)
                    else:
                        sentence_samples.append(event.samples)
                    if config.stream_audio:
                        sent.samples += len(event.samples)
                        sent.words.extend(event.words)
                elif isinstance(event, SegmentFinished):
                    if not config.stream_audio and sentence_samples:
                        samples = np.concatenate(sentence_samples)
                        data = await asyncio.to_thread(encode_file, fmt, rate, samples)
                        sentence_bytes = len(data)
                        await self._channel.send_bytes(data)  # the sentence's file whole, in one frame
                        sent.samples += len(samples)
                        sent.words.extend(sentence_words)
                    if timestamps:
                        words = p.sentence_timestamps(sentence_words, sentence_start / rate, sentence_offset)
                        end_ms = round((produced - sentence_start) * 1000 / rate)
                        await self._send_json(p.audio_chunk(index, event.index, chunk_id, 0, end_ms, rate, b"",
                                                            words or None))  # fmt: skip
                    if event.error is not None:
                        await self._error(f"Sentence {event.index} failed: {event.error.message}",
                                          code="synthesis_failed", utterance_index=index,
                                          sentence_index=event.index)  # fmt: skip
                    else:
                        sent.sentence_chars = sentence_offset + len(sentence_text)
                    await self._send_json(p.audio_done(index, event.index, sentence_bytes, event.error is not None))
                elif isinstance(event, UtteranceFinished):
                    if event.cancelled:
                        return
                    await self._send_json({"type": "session.done", "utterance_index": index,
                                           "total_sentences": event.usage.segments,
                                           "usage": event.usage.to_dict()})  # fmt: skip
                    self._channel.last_activity = time.monotonic()
                    if config.close_after_done:
                        await self._close(p.CLOSE_NORMAL, "done")
        except ChannelClosed:
            utterance.cancel()
        finally:
            close_utterance(self.state, utterance, self.protocol)
