"""The Wyoming TCP listener: ``asyncio.start_server`` in the HTTP server's event loop, over the same pipeline.

Each connection reads events without ever waiting for synthesis (a stream's text joins its utterance as it
arrives). Everything a connection sends about synthesis (audio, ``synthesize-stopped``, errors) goes out in
request order: every request gets a *speaker* task that waits for the previous one, while its own
utterance is admitted and starts synthesizing at once. ``info`` and ``pong`` answer straight away.

A closed connection cancels its synthesis: an end of input (the client half-closed, or left) stops reading
and lets the requests already made finish, and the first write that fails cancels everything. Every task
and admission slot is released when the connection ends, however it ends (the speakers are a
``SpeakerChain``, each owning its utterance's ``Admitted``). Audio comes from ``AudioOut`` as 16-bit PCM.

Request ids: TCP has no headers, so each connection gets a new id, bound while it is served, and each utterance
``{connection id}-{n}``, bound while it is spoken, so log lines name them. Wyoming's events have no field for
them, and the wire stays as wyoming-piper's.

A drain (``server.drain``) that ends with a connection still open cuts what it was synthesizing and ends each
request the Wyoming way, as the WebSocket dialects end theirs with their final event and 1001: an ``error``
with code ``shutting_down`` saying why (once), then what each request is owed, ``audio-stop`` for a sentence
whose ``audio-start`` went out and ``synthesize-stopped`` for a stream, then the connection closes. The
audio still queued for a cut request is dropped (up to ``max_lead_s`` of it: a client reading at playback
speed would take that long), so the endings go out right after the write in progress; a client that takes
nothing for ``GOING_AWAY_WRITE_S`` in one write is dropped, and the drain's own deadline bounds the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import speakwire
from speakwire.errors import (
    LibraryUnavailableError,
    NotFoundError,
    NotReadyError,
    PayloadTooLargeError,
    ShuttingDownError,
    SpeakwireError,
    TooBusyError,
)
from speakwire.output import AudioOut, AudioPart, OutputPart, OutputSpec, SegmentEnd, SegmentStart, UtteranceEnd
from speakwire.server.admission import Admitted, admit
from speakwire.server.flow import ReaderStalled, write_stall
from speakwire.server.limits import MAX_SESSION_CHARS
from speakwire.server.options import ResolvedSpeech, SpeechOptions, resolve_speech
from speakwire.server.request_ids import bound, new_request_id
from speakwire.server.speakers import SpeakerChain
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.state import ServerState
from speakwire.server.wyoming import protocol as p
from speakwire.synthesis import Utterance

logger = logging.getLogger(__name__)

PROTOCOL = "wyoming"
"""The ``protocol`` label of this listener's metrics."""
READ_SIZE = 64 * 1024

INPUT_ERRORS = InputErrors(
    param="text",
    empty=None,  # blank text has nothing to speak either: one refusal, ``nothing_to_speak``
    unspeakable="Nothing to speak: the text has no letters or digits.",
    too_long="Text is {length} characters; the limit is {limit}. Stream it (synthesize-start/-chunk/-stop).",
    too_long_error=PayloadTooLargeError,
)
"""How a one-shot ``synthesize`` is refused; ``_speak_once`` gives each refusal its Wyoming error code."""
GOING_AWAY_TEXT = "Server is shutting down; reconnect to continue (another instance will answer)."
GOING_AWAY_WRITE_S = 1.25
"""While going away, how long one write may wait for the client to take it; one that takes none is dropped.
Above the ~1.1 s a client reading at playback speed (22-24 kHz) takes to empty the transport from its high
to its low water mark (64 to 16 KiB), which is what the write in progress waits for."""
GOING_AWAY_POLL_S = 0.1
"""How often going-away looks whether the write in progress is past ``GOING_AWAY_WRITE_S``."""


class _Closed(Exception):
    """The client can no longer be written to."""


class WyomingListener:
    """Serves Wyoming on ``settings.host:settings.wyoming_port`` while the server runs."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._voice_language: str | None = None

    @property
    def port(self) -> int | None:
        """The bound port (differs from the setting when that is 0), None before ``start``."""
        if self._server is None or not self._server.sockets:
            return None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        """Bind and serve; call once the engine is loaded (raises ``RuntimeError`` if the port is taken)."""
        engine = self.state.engine  # loaded; ``ready`` turns true only after this hook
        assert engine is not None
        self._voice_language = await asyncio.to_thread(_voice_file_language, engine.info.extra.get("voice_path"))
        host, port = self.state.settings.host, self.state.settings.wyoming_port or 0
        try:
            self._server = await asyncio.start_server(self._serve, host, port)
        except OSError as exc:
            raise RuntimeError(f"cannot listen for Wyoming on tcp://{host}:{port}: {exc.strerror or exc}") from exc
        logger.info(
            "wyoming: listening on tcp://%s:%d (%d voice(s), streaming synthesis)",
            host, self.port, len(engine.info.voices),
        )  # fmt: skip

    async def stop(self) -> None:
        """Stop accepting, end every connection (cancelling its synthesis) and wait until they are gone."""
        if self._server is None:
            return
        self._server.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        for task in connections:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), timeout=5)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await WyomingConnection(self.state, reader, writer, voice_language=self._voice_language).run()
        except asyncio.CancelledError:
            # ``stop`` ended it. Not re-raised: on Python 3.11 ``start_server`` calls ``exception()`` on the handler's
            # task when it ends, which raises for a cancelled one, and asyncio logs that as an error with a traceback.
            # One that was not a cancel of this task (a cancelled future awaited inside) is a bug: it goes on.
            if not task.cancelling():
                raise
        finally:
            self._connections.discard(task)


class WyomingConnection:
    """One client connection: read events, run its requests, answer in order."""

    def __init__(
        self,
        state: ServerState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        voice_language: str | None = None,
    ) -> None:
        self.state = state
        self._reader = reader
        self._writer = writer
        self._voice_language = voice_language
        self._session = p.WyomingSession()
        self._decoder = p.FrameDecoder()
        self._send_lock = asyncio.Lock()
        self._stall = write_stall(state, PROTOCOL)
        self.request_id = new_request_id()
        self._utterance_count = 0
        self._speakers = SpeakerChain()
        """Everything sent about synthesis, in request order: one speaker per request (or error)."""
        self._stream: Utterance | None = None
        """The open stream's utterance (``synthesize-start`` seen, no ``synthesize-stop`` yet)."""
        self._last_activity = time.monotonic()
        self._going_away = False
        """The drain has ended this connection: its synthesis is cut, nothing more is read."""
        self._told_going_away = False
        self._writing_since: float | None = None
        """Loop time the write in progress started (None between writes), for going-away's per-write deadline."""

    # ----- lifetime ---------------------------------------------------------------------

    async def run(self) -> None:
        with bound(self.request_id), self.state.open_session(self):  # so a drain can end it (going_away)
            await self._run()

    async def _run(self) -> None:
        try:
            while True:
                data = await self._read()
                if not data:
                    # No more requests: cancel a stream that can never be stopped, finish the others.
                    self._cancel_stream()
                    if speaking := self._speakers.speaking:
                        await asyncio.wait([s.task for s in speaking])
                    return
                try:
                    events = self._decoder.feed(data)
                except p.FrameError as exc:
                    await self._send(p.error(exc.text, exc.code))
                    return
                for event in events:
                    await self._dispatch(event)
        except (_Closed, ConnectionError):
            pass
        except Exception:
            logger.exception("wyoming connection failed")
            with contextlib.suppress(_Closed, ConnectionError):
                await self._send(p.error("Internal error; closing the connection.", "internal_error"))
        finally:
            await self._cancel_all()
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), timeout=1)

    async def going_away(self) -> None:
        """The drain is over (``server.drain``): cut what is synthesizing, end each request the Wyoming way, close.

        Each speaker drops its request's queued audio and sends, in request order, the ``shutting_down`` error
        (the first one only) and then what its request is owed (``audio-stop``, ``synthesize-stopped``); a
        connection with nothing cut still hears the error. A write that waits ``GOING_AWAY_WRITE_S`` drops the
        client; the drain's deadline cancels this (the client is dropped too). Never raises but for that
        cancel; the connection's own ``finally`` releases what is left.
        """
        self._going_away = True
        self._stream = None  # its synthesize-stop will not be read now
        for speaker in self._speakers.speaking:
            if speaker.admitted is not None:
                speaker.admitted.utterance.cancel()
        said = False
        try:
            with contextlib.suppress(_Closed, ConnectionError, TimeoutError):
                await self._wait_speakers()
                async with asyncio.timeout(GOING_AWAY_WRITE_S):
                    await self._say_going_away()
                said = True
        finally:
            if said or self._writer.is_closing():
                # After what is buffered (a refused one-shot already closing is left to end so); the reader
                # sees the end and ``run`` releases the rest.
                self._writer.close()
            else:
                self._writer.transport.abort()  # a client that takes nothing (or is gone) is not waited for

    async def _wait_speakers(self) -> None:
        """Until every speaker is done; ``TimeoutError`` once a write has waited ``GOING_AWAY_WRITE_S``."""
        loop = asyncio.get_running_loop()
        began = loop.time()  # a write already waiting counts from here
        while pending := [s.task for s in self._speakers.speaking]:
            await asyncio.wait(pending, timeout=GOING_AWAY_POLL_S)
            since = self._writing_since
            if since is not None and loop.time() - max(since, began) >= GOING_AWAY_WRITE_S:
                raise TimeoutError

    async def _say_going_away(self, *endings: bytes) -> None:
        """``endings`` of a request cut by the drain, after the ``shutting_down`` error if not yet sent."""
        told = [] if self._told_going_away else [p.error(GOING_AWAY_TEXT, "shutting_down")]
        self._told_going_away = True
        if told or endings:
            await self._send(*told, *endings)

    async def _read(self) -> bytes:
        """The next bytes from the client; b"" at its end, or after the idle timeout with nothing in progress."""
        idle = self.state.settings.ws_idle_timeout_s
        while True:
            try:
                async with asyncio.timeout(idle):  # in this task: wait_for (3.11) would add one per connection
                    data = await self._reader.read(READ_SIZE)
            except TimeoutError:
                if self._stream is not None or self._speakers.busy:
                    continue
                if time.monotonic() - self._last_activity >= idle:
                    logger.debug("wyoming: closing a connection idle for %g s", idle)
                    return b""
                continue
            self._last_activity = time.monotonic()
            return data

    async def _cancel_all(self) -> None:
        """Stop every request of this connection now and release its slots; wait for its speakers."""
        self._stream = None
        await self._speakers.cancel_all()

    def _cancel_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    # ----- sending ----------------------------------------------------------------------

    async def _send(self, *frames: bytes) -> None:
        async with self._send_lock:
            if self._writer.is_closing():
                raise _Closed
            self._writer.write(b"".join(frames))
            self._writing_since = asyncio.get_running_loop().time()
            try:
                # A client that stops reading is dropped rather than holding audio (and a stream slot) forever.
                await self._stall.write(self._writer.drain())
            except ReaderStalled as exc:
                self._stall.noticed("closing the connection")
                self._writer.transport.abort()  # nothing more can reach it: close() would wait for the buffer
                raise _Closed from exc
            except ConnectionError as exc:
                self._writer.close()
                raise _Closed from exc
            finally:
                self._writing_since = None

    def _in_order(self, work: Callable[[], Awaitable[None]], admitted: Admitted | None = None) -> None:
        """Run ``work`` once everything asked for earlier on this connection has been sent (``admitted``: the
        utterance it speaks, released however it ends)."""
        self._speakers.start(admitted, lambda _: self._guarded(work))

    async def _guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            await work()
        except _Closed:
            self._writer.close()  # the reader sees the end and cancels the rest
        except Exception:
            logger.exception("wyoming: sending failed")
            self._writer.close()
        finally:
            self._last_activity = time.monotonic()

    def _error_in_order(self, text: str, code: p.ErrorCode, *, then_close: bool = False) -> None:
        """Send an error after what came before it; ``then_close`` ends the connection after it.

        A failed one-shot ``synthesize`` closes, as wyoming-piper does: Home Assistant's one-shot
        client ignores ``error`` events and reads until ``audio-stop`` or the end of the connection,
        so a connection kept open would make it wait for the idle timeout.
        """
        frame = p.error(text, code)

        async def send() -> None:
            await self._send(frame)
            if then_close:
                raise _Closed

        self._in_order(send)

    # ----- client events ----------------------------------------------------------------

    async def _dispatch(self, event: p.Event) -> None:
        if self._going_away:
            logger.debug("wyoming: ignored %s: the connection is closing for the drain", event.type)
            return
        try:
            command = self._session.receive(p.parse_event(event))
        except p.WyomingError as exc:
            self._error_in_order(exc.text, exc.code)
            return
        if isinstance(command, p.Answer):
            await self._answer(command)
        elif isinstance(command, p.SpeakOnce):
            await self._speak_once(command)
        elif isinstance(command, p.OpenStream):
            await self._open_stream(command)
        elif isinstance(command, p.StreamText):
            self._stream_text(command.text)
        elif isinstance(command, p.CloseStream):
            self._close_stream(command)
        else:
            logger.debug("wyoming: ignored %s (%s)", event.type, command.reason)

    async def _answer(self, command: p.Answer) -> None:
        if command.kind == "pong":
            await self._send(p.pong(command.text))
            return
        engine, _, _ = self.state.require_ready()
        try:
            saved = await self.state.voices.list_voices() if self.state.voices is not None else []
        except LibraryUnavailableError as exc:  # S3 down: still describe the built-in voices (and keep the client)
            logger.warning("wyoming: describing built-in voices only: %s", exc.message)
            saved = []
        voices = [p.SavedVoiceInfo(v.name, v.language, v.speaker_description) for v in saved]
        info = p.build_info(engine.info, voices, version=speakwire.__version__, voice_language=self._voice_language)
        await self._send(info)

    async def _speak_once(self, command: p.SpeakOnce) -> None:
        text = command.text
        limit = self.state.settings.max_input_chars
        try:
            check_input(text, limit, INPUT_ERRORS)
        except SpeakwireError as exc:
            code: p.ErrorCode = "too_large" if isinstance(exc, PayloadTooLargeError) else "nothing_to_speak"
            self._error_in_order(exc.message, code, then_close=True)
            return
        # The limit may be above the utterance's default buffer; the text is checked against it already.
        admitted = await self._open(command.voice, max_buffer_chars=limit, then_close=True)
        if admitted is None:
            return
        try:
            admitted.say(text)
        except SpeakwireError as exc:
            self._error_in_order(exc.message, _error_code(exc), then_close=True)
            return
        self._in_order(lambda: self._send_once(admitted.utterance), admitted)

    async def _open_stream(self, command: p.OpenStream) -> None:
        admitted = await self._open(command.voice, max_buffer_chars=MAX_SESSION_CHARS)
        if admitted is None:
            self._session.stream_failed()
            return
        self._stream = admitted.utterance
        self._in_order(lambda: self._send_stream(admitted.utterance), admitted)

    def _stream_text(self, text: str) -> None:
        assert self._stream is not None
        try:
            self._stream.feed(text)
        except PayloadTooLargeError as exc:
            self._cancel_stream()
            self._session.stream_failed()
            self._error_in_order(exc.message, "too_large")

    def _close_stream(self, command: p.CloseStream) -> None:
        if command.failed:
            self._in_order(lambda: self._send(p.synthesize_stopped()))
            return
        assert self._stream is not None
        self._stream.finish()
        self._stream = None

    async def _open(
        self, voice: p.VoiceChoice | None, *, max_buffer_chars: int = 100_000, then_close: bool = False
    ) -> Admitted | None:
        """Resolve the voice and admit an utterance; on failure send the error (in order) and return None."""
        self._utterance_count += 1
        request_id = f"{self.request_id}-{self._utterance_count}"
        try:
            resolved = await self._resolve(voice)
            return admit(self.state, resolved, protocol=PROTOCOL, max_buffer_chars=max_buffer_chars,
                         request_id=request_id)  # fmt: skip
        except p.WyomingError as exc:
            self._error_in_order(exc.text, exc.code, then_close=then_close)
        except SpeakwireError as exc:
            self._error_in_order(exc.message, _error_code(exc), then_close=then_close)
        return None

    async def _resolve(self, voice: p.VoiceChoice | None) -> ResolvedSpeech:
        engine, _, _ = self.state.require_ready()
        info = engine.info
        name: str | None = None
        language: str | None = None
        if voice is not None and voice.name is not None:
            name = voice.name
            # As wyoming-piper: ``name`` is the voice (model) and ``speaker`` one of its speakers. Our voices are
            # the speakers themselves, so a speaker we have wins; the model's own name means its default speaker.
            if voice.speaker and voice.speaker.lower() in (v.lower() for v in info.voices):
                name = voice.speaker
            elif name.lower() in (info.model.lower(), info.model.split("/")[-1].lower()) and (
                name.lower() not in (v.lower() for v in info.voices)
            ):
                name = None
        elif voice is not None and voice.language is not None:
            language = p.match_language(info, voice.language, self._voice_language)
            if language is None:
                codes = ", ".join(p.language_codes(info, self._voice_language))
                raise p.WyomingError(f"Language '{voice.language}' is not spoken here; languages: {codes}.",
                                     "language_not_found")  # fmt: skip
        options = SpeechOptions(voice=name, language=language, response_format="pcm", sample_rate=info.sample_rate)
        return await resolve_speech(self.state, engine, options)

    # ----- speaking ---------------------------------------------------------------------

    async def _send_once(self, utterance: Utterance) -> None:
        """One ``audio-start`` … ``audio-stop`` around every sentence of a one-shot ``synthesize``."""
        rate = utterance.output_rate
        out = await AudioOut.open(OutputSpec("pcm", rate))
        chunker = p.PcmChunker()
        started = False
        async for part in out.parts(utterance):
            if self._going_away and not _finished_whole(part):
                # Cut by the drain: what is still queued is dropped, the endings go out now.
                await self._say_going_away(*([p.audio_stop()] if started else []))
                return
            if isinstance(part, SegmentStart) and not started:
                started = True
                await self._send(p.audio_start(rate))
            elif isinstance(part, AudioPart):
                await self._send_chunks(rate, chunker.add(part.data))
            elif isinstance(part, SegmentEnd) and part.error is not None:
                utterance.cancel()
                await self._send_chunks(rate, chunker.flush())
                await self._send(p.error(f"Synthesis failed: {part.error.message}", "synthesis_failed"),
                                 p.audio_stop())  # fmt: skip
                return
            elif isinstance(part, UtteranceEnd) and not part.cancelled:
                await self._send_chunks(rate, chunker.add(part.data) + chunker.flush())
                await self._send(p.audio_stop())

    async def _send_stream(self, utterance: Utterance) -> None:
        """Each sentence its own ``audio-start`` … ``audio-stop`` as it is spoken, then ``synthesize-stopped``."""
        rate = utterance.output_rate
        out = await AudioOut.open(OutputSpec("pcm", rate))
        chunker = p.PcmChunker()
        speaking = False  # an audio-start went out whose audio-stop has not
        async for part in out.parts(utterance):
            if self._going_away and not _finished_whole(part):
                # Cut by the drain: what is still queued is dropped, the endings go out now.
                await self._say_going_away(*([p.audio_stop()] if speaking else []), p.synthesize_stopped())
                return
            if isinstance(part, SegmentStart):
                chunker = p.PcmChunker()
                speaking = True
                await self._send(p.audio_start(rate))
            elif isinstance(part, AudioPart):
                await self._send_chunks(rate, chunker.add(part.data))
            elif isinstance(part, SegmentEnd):
                await self._send_chunks(rate, chunker.flush())
                if part.error is not None:
                    await self._send(p.error(f"Sentence {part.index} failed: {part.error.message}",
                                             "synthesis_failed"))  # fmt: skip
                speaking = False
                await self._send(p.audio_stop())
            elif isinstance(part, UtteranceEnd) and not part.cancelled:
                await self._send(p.synthesize_stopped())

    async def _send_chunks(self, rate: int, chunks: list[bytes]) -> None:
        if chunks:
            await self._send(*(p.audio_chunk(rate, chunk) for chunk in chunks))


def _finished_whole(part: OutputPart) -> bool:
    """``part`` ends an utterance that was not cut: what it still owes (its last chunks, the stop) is sent."""
    return isinstance(part, UtteranceEnd) and not part.cancelled


def _error_code(exc: SpeakwireError) -> p.ErrorCode:
    if isinstance(exc, NotFoundError):
        return "voice_not_found" if exc.param == "voice" else "bad_request"
    if isinstance(exc, ShuttingDownError):
        return "shutting_down"
    if isinstance(exc, TooBusyError):
        return "busy"
    if isinstance(exc, NotReadyError):
        return "not_ready"
    if isinstance(exc, PayloadTooLargeError):
        return "too_large"
    if exc.status_code < 500:
        return "bad_request"
    return "synthesis_failed"


def _voice_file_language(voice_path: object) -> str | None:
    """A Piper voice's ``language.code`` (``en_US``) from the config beside its model, if there is one."""
    if not isinstance(voice_path, str):
        return None
    try:
        config = json.loads(Path(f"{voice_path}.json").read_text(encoding="utf-8"))
        code = config.get("language", {}).get("code")
    except (OSError, ValueError, AttributeError):
        return None
    return code if isinstance(code, str) and code else None
