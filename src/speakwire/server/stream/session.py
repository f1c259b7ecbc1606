"""StreamSession: the speech stream's I/O (vLLM-Omni's WebSocket, and SageMaker's bidirectional stream).

``protocol.StreamProtocol`` decides what each client message means; this adapter resolves the voice,
admits utterances, and speaks each through the output stage on a speaker of its ``SpeakerChain``, so
utterances never interleave while the next may already synthesize. The lifetime (draining, idle, going
away, internal errors, cancelling everything at the end) is ``server.session.WebSocketSession``'s.

``voice.add`` / ``voice.list`` go to the voice library through ``server.voices.serving``, the code the HTTP voice
routes use. They are awaited where they arrive, so each reply comes before anything a later message causes
(utterances already speaking go on meanwhile: their speakers are tasks of their own).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.websockets import WebSocket

from speakwire.errors import (
    LibraryUnavailableError,
    NotReadyError,
    PayloadTooLargeError,
    ShuttingDownError,
    SpeakwireError,
    TooBusyError,
)
from speakwire.output import (
    AudioOut,
    AudioPart,
    OutputPart,
    OutputSpec,
    SegmentEnd,
    SegmentStart,
    UtteranceEnd,
    WordsPart,
    words_at_segment_end,
)
from speakwire.server.admission import Admitted, admit
from speakwire.server.auth import offered_key
from speakwire.server.options import ResolvedSpeech, resolve_speech
from speakwire.server.session import WebSocketSession
from speakwire.server.speakers import Speaker, SpeakerChain
from speakwire.server.state import ServerState
from speakwire.server.stream import protocol as p
from speakwire.server.voices.serving import catalogue, describe, save_voice, serving_info
from speakwire.server.websocket_channel import ChannelClosed
from speakwire.text.alignment import WordTiming


@dataclasses.dataclass(slots=True)
class _Sent:
    """How much of one utterance the client has been sent: what ``input.cancelled`` reports."""

    index: int
    rate: int
    samples: int = 0
    words: list[WordTiming] = dataclasses.field(default_factory=list)
    sentence_chars: int = 0
    """The text through the last sentence whose audio was sent whole."""

    def heard(self, text: str) -> p.Heard:
        audio_s = self.samples / self.rate
        spoken = self.sentence_chars
        for word in self.words:  # in order; a word counts once all of its audio was sent
            if word.end_s > audio_s:
                break
            spoken = max(spoken, word.char_end)
        return p.Heard(self.index, min(spoken, len(text)), text, audio_s)


@dataclasses.dataclass(eq=False, slots=True)
class _Utterance:
    index: int
    admitted: Admitted
    sent: _Sent
    speaker: Speaker | None = None


class StreamSession(WebSocketSession):
    protocol = "websocket"

    def __init__(
        self, websocket: WebSocket, state: ServerState, *, protocol: str = "websocket", iam_authenticated: bool = False
    ) -> None:
        """``iam_authenticated``: SageMaker authenticated the stream (its bidirectional path): no API key asked."""
        super().__init__(websocket, state, protocol=protocol)
        api_key = None if iam_authenticated else state.settings.api_key
        self._protocol = p.StreamProtocol(api_key, offered_key(websocket.headers, websocket.query_params))
        self._resolved: ResolvedSpeech | None = None
        self._speakers = SpeakerChain()
        self._open: _Utterance | None = None
        """The utterance taking text (no input.done yet)."""
        self._utterances: list[_Utterance] = []
        self._next_index = 0

    # ----- the lifetime's hooks ---------------------------------------------------------------------

    async def refuse_draining(self, error: ShuttingDownError) -> None:
        await self._reject_busy(error)

    async def start(self) -> None:
        deadline = time.monotonic() + self.state.settings.ws_config_timeout_s
        while self._protocol.config is None:
            remaining = deadline - time.monotonic()
            try:
                message = await self.channel.receive_within(max(remaining, 0.001))
            except TimeoutError:
                timeout_s = self.state.settings.ws_config_timeout_s
                await self._act(p.fatal(f"No session.config within {timeout_s:g} s; send it first.", p.CLOSE_POLICY,
                                        code="config_timeout"))  # fmt: skip
            await self.dispatch(message)

    def busy(self) -> bool:
        """An utterance is open or still speaking: the session is not idle, however quiet the client."""
        return self._open is not None or self._speakers.busy

    async def on_idle(self) -> None:
        idle = self.state.settings.ws_idle_timeout_s
        await self._act(p.fatal(f"Idle for {idle:g} s; closing the session.", p.CLOSE_NORMAL, code="idle_timeout"))

    async def say_going_away(self, message: str) -> None:
        await self._send(self._named(p.error_event(message, code="shutting_down")))

    async def cancel_all(self) -> None:
        self._open = None
        self._protocol.utterance_closed()
        await self._speakers.cancel_all()

    # ----- client messages ----------------------------------------------------------------------

    async def dispatch(self, message: str | bytes) -> None:
        if len(message) > p.MAX_CONFIG_BYTES:  # a voice.add's clip: parsed and base64-decoded off the event loop
            await self._act(await asyncio.to_thread(self._protocol.receive, message))
        else:
            await self._act(self._protocol.receive(message))

    async def _act(self, action: p.Action | None) -> None:
        if isinstance(action, p.Reply):
            await self._send(self._named(action.event))
        elif isinstance(action, p.Fatal):
            with contextlib.suppress(ChannelClosed):
                await self._send(self._named(action.event))
            await self.fatal(action.code, str(action.event.get("message", "")))
        elif isinstance(action, p.Configure):
            await self._configure(action.config)
        elif isinstance(action, p.SpeakText):
            await self._on_text(action.text)
        elif isinstance(action, p.FinishInput):
            await self._on_done()
        elif isinstance(action, p.CancelAll):
            await self._on_cancel()
        elif isinstance(action, p.CloseSession):
            await self._on_session_close()
        elif isinstance(action, p.AddVoice):
            await self._add_voice(action.upload)
        elif isinstance(action, p.ListVoices):
            await self._list_voices()

    async def _configure(self, config: p.StreamConfig) -> None:
        try:
            engine, _, _ = self.state.require_ready()
            resolved = await resolve_speech(self.state, engine, config.options)
        except NotReadyError as exc:
            await self._act(p.fatal(exc.message, p.CLOSE_TRY_LATER, code="not_ready"))
            return
        except LibraryUnavailableError as exc:  # S3 did not answer for a saved voice: not the client's mistake
            await self._act(p.fatal(exc.message, p.CLOSE_TRY_LATER, code="library_unavailable"))
            return
        except SpeakwireError as exc:
            await self._act(p.fatal(f"Invalid session.config: {exc.message}", p.CLOSE_POLICY, code="invalid_config",
                                    param=exc.param))  # fmt: skip
            return
        self._resolved = resolved
        ignored = config.ignored_fields + resolved.ignored_fields
        await self._act(self._protocol.configured(dataclasses.replace(config, ignored_fields=ignored)))

    async def _on_text(self, text: str) -> None:
        active = self._open
        if active is None:
            try:
                active = self._start_utterance()
            except TooBusyError as exc:
                # Answered before the next message is read: an ``input.done`` right behind refused text must
                # not get its ``session.done`` before the client learns the text was refused.
                self._protocol.utterance_closed()
                await self._reject_busy(exc)
                return
        try:
            active.admitted.utterance.feed(text)
        except PayloadTooLargeError as exc:
            await self._act(p.fatal(exc.message, p.CLOSE_TOO_BIG, code="too_large"))

    def _start_utterance(self) -> _Utterance:
        """Admit the next utterance (``TooBusyError`` past the limit) and start its speaker."""
        config, resolved = self._protocol.config, self._resolved
        assert config is not None and resolved is not None
        index = self._next_index
        admitted = admit(self.state, resolved, protocol=self.protocol, granularity=config.granularity,
                         max_buffer_chars=p.MAX_SESSION_CHARS, request_id=f"{self.request_id}-{index}")  # fmt: skip
        self._next_index += 1
        item = _Utterance(index, admitted, _Sent(index, resolved.output_rate))
        self._utterances = [u for u in self._utterances if u.speaker is None or not u.speaker.done]
        item.speaker = self._speakers.start(admitted, lambda _: self._speak(item, config, resolved))
        self._utterances.append(item)
        self._open = item
        return item

    async def _reject_busy(self, exc: TooBusyError) -> None:
        """An ``error`` event with ``retry_after_s``, then close 1013 (try again later) with the reason."""
        retry_after_s = max(1, round(exc.retry_after_s))
        code = "shutting_down" if isinstance(exc, ShuttingDownError) else "busy"
        with contextlib.suppress(ChannelClosed):
            await self._act(p.fatal(exc.message, p.CLOSE_TRY_LATER, code=code, retry_after_s=retry_after_s))

    async def _on_done(self) -> None:
        if self._open is None:
            # Nothing was said: an empty utterance still gets its session.done.
            index = self._next_index
            self._next_index += 1
            await self._send({"type": "session.done", "utterance_index": index, "total_sentences": 0,
                              "request_id": f"{self.request_id}-{index}"})  # fmt: skip
            return
        self._open.admitted.utterance.finish()
        self._open = None

    async def _on_cancel(self) -> None:
        targets = [u for u in self._utterances if u.speaker is not None and not u.speaker.done]
        index = targets[-1].index if targets else max(self._next_index - 1, 0)
        await self.cancel_all()  # the speakers are gone: what they sent is final
        heard = [u.sent.heard(u.admitted.utterance.text) for u in targets]
        self._utterances = []
        cancelled = p.input_cancelled(heard, index)
        cancelled["request_id"] = targets[-1].admitted.request_id if targets else self.request_id
        await self._send(cancelled)

    async def _on_session_close(self) -> None:
        if self._open is not None:
            self._open.admitted.utterance.cancel()
            self._open = None
        for item in self._utterances:
            if item.speaker is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await item.speaker.task
        await self.fatal(p.CLOSE_NORMAL, "session.close")

    async def _add_voice(self, upload: p.VoiceUpload) -> None:
        try:
            voice = await save_voice(self.state, upload.fields, upload.audio, mime_type=upload.mime_type,
                                     audio_param="audio_data")  # fmt: skip
        except SpeakwireError as exc:
            await self._act(p.Reply(p.voice_error("voice.add", exc)))
            return
        await self._send(p.voice_added(describe(voice, serving_info(self.state))))

    async def _list_voices(self) -> None:
        try:
            listed = await catalogue(self.state)
        except SpeakwireError as exc:
            await self._act(p.Reply(p.voice_error("voice.list", exc)))
            return
        await self._send(p.voices_listed(listed))

    def _named(self, event: dict[str, Any]) -> dict[str, Any]:
        """An error names what it is about: the open utterance's request id, else the connection's."""
        if event.get("type") == "error" and "request_id" not in event:
            event["request_id"] = self._open.admitted.request_id if self._open is not None else self.request_id
        return event

    # ----- speaking ---------------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> None:
        await self.channel.send_json(event)

    async def _speak(self, item: _Utterance, config: p.StreamConfig, resolved: ResolvedSpeech) -> None:
        """One utterance's wire events: audio.start, its audio (frames, JSON chunks or a file), audio.done.

        An aligner's words come after their sentence's end (``WordsPart``), and no audio waits for them: vLLM-Omni's
        trailing ``audio.chunk`` then follows the sentence's ``audio.done``, possibly after later sentences' audio
        (it names its sentence). Baseten's ``sync`` binds the words to the sentence's ``audio.done``, and its
        clients place them on the sentence that began last, so with it what follows a sentence's end waits for its
        words (``words_at_segment_end``, at most the aligner's bound).
        """
        index, sent, utterance = item.index, item.sent, item.admitted.utterance
        request_id = item.admitted.request_id
        fmt, rate = resolved.response_format, resolved.output_rate
        timestamps = config.word_timestamps
        if config.stream_audio:
            out = await AudioOut.open(OutputSpec("pcm", rate, "stream"))
        else:
            out = await AudioOut.open(OutputSpec(fmt, rate, "segment_files"))
        parts: AsyncIterator[OutputPart] = out.parts(utterance)
        if config.word_alignment:
            parts = words_at_segment_end(parts)
        sentence_bytes = chunk_id = 0
        sentence: SegmentStart | None = None
        last_end = -1
        """The last sentence whose end (``SegmentEnd``) came: a ``WordsPart`` after it is late, one before it early."""
        early: WordsPart | None = None
        """Its sentence's aligned words, given before its end (``words_at_segment_end``)."""
        trailing_chunk: dict[int, int] = {}
        """Sentences ended before their aligned words came: the chunk id their trailing ``audio.chunk`` takes."""
        try:
            async for part in parts:
                if isinstance(part, SegmentStart):
                    sentence, sentence_bytes, chunk_id = part, 0, 0
                    await self._send(p.audio_start(index, part.index, part.text, fmt, rate,
                                                   word_timestamps=timestamps))  # fmt: skip
                elif isinstance(part, AudioPart):
                    if timestamps:
                        for at in range(0, len(part.data), p.MAX_FRAME_BYTES):
                            piece = part.data[at : at + p.MAX_FRAME_BYTES]
                            start_ms = round((sentence_bytes // 2) * 1000 / rate)
                            sentence_bytes += len(piece)
                            end_ms = round((sentence_bytes // 2) * 1000 / rate)
                            await self._send(p.audio_chunk(index, part.segment, chunk_id, start_ms, end_ms, rate,
                                                           piece))  # fmt: skip
                            chunk_id += 1
                    elif part.data:
                        sentence_bytes += len(part.data)
                        await self.channel.send_bytes(part.data, p.MAX_FRAME_BYTES)
                    if config.stream_audio:
                        sent.samples += part.samples
                        sent.words.extend(part.words)
                elif isinstance(part, WordsPart):
                    sent.words.extend(part.words)  # reported heard only as far as the audio sent covers them
                    if part.segment > last_end:
                        early = part
                    elif timestamps and part.segment in trailing_chunk:
                        timed = p.sentence_timestamps(part.words, part.start / rate, part.char_offset)
                        end_ms = round(part.samples * 1000 / rate)
                        await self._send(p.audio_chunk(index, part.segment, trailing_chunk.pop(part.segment), 0,
                                                       end_ms, rate, b"", timed or None))  # fmt: skip
                elif isinstance(part, SegmentEnd):
                    last_end = part.index
                    offset = sentence.char_offset if sentence is not None else 0
                    start_s = (sentence.start if sentence is not None else 0) / rate
                    words, words_follow = part.words, part.words_follow
                    if early is not None and early.segment == part.index:
                        words, words_follow = early.words, False
                    early = None
                    if part.file:
                        sentence_bytes = len(part.file)
                        await self.channel.send_bytes(part.file)  # the sentence's file whole, in one frame
                        sent.samples += part.samples
                        sent.words.extend(part.words)
                    if timestamps and words_follow:
                        trailing_chunk[part.index] = chunk_id  # sent when the aligner's words come
                    elif timestamps:
                        timed = p.sentence_timestamps(words, start_s, offset)
                        end_ms = round(part.samples * 1000 / rate)
                        await self._send(p.audio_chunk(index, part.index, chunk_id, 0, end_ms, rate, b"",
                                                       timed or None))  # fmt: skip
                    if part.error is not None:
                        await self._send(p.error_event(f"Sentence {part.index} failed: {part.error.message}",
                                                       code="synthesis_failed", utterance_index=index,
                                                       sentence_index=part.index, request_id=request_id))  # fmt: skip
                    else:
                        sent.sentence_chars = offset + (len(sentence.text) if sentence is not None else 0)
                    done = p.audio_done(index, part.index, sentence_bytes, part.error is not None)
                    if config.word_alignment:
                        done["timestamp_info"] = p.timestamp_info(words, start_s)
                    await self._send(done)
                elif isinstance(part, UtteranceEnd):
                    if part.cancelled:
                        return
                    await self._send({"type": "session.done", "utterance_index": index,
                                      "total_sentences": part.usage.segments, "usage": part.usage.to_dict(),
                                      "request_id": request_id})  # fmt: skip
                    self.channel.last_activity = time.monotonic()
                    if config.close_after_done:
                        await self.close(p.CLOSE_NORMAL, "done")
        except ChannelClosed:
            utterance.cancel()
