"""One utterance of the Qwen3 engine: text in while audio comes out, over as few generations as possible.

An utterance is one generation (one row of the loop) for as long as that is sensible: a row reads text
while it speaks, so sentences flow with one voice and no restarts. A row's context is finite, though,
and a runaway budget caps it, so a long text (a 10,000-character HTTP input, or an LLM talking for
minutes) rolls over to a new row at the first sentence end past ``ROLLOVER_CHARS`` characters: the
row is given its text's end there and finishes speaking it, and the next row, with the same voice
prompt, takes the rest. The next row opens once the previous one has read all its text: the talker
reads a few words ahead of its speech, so the new row's prefill and first frames are made while the
old one speaks its last words, and no gap opens between them (opened at the old row's end, every
rollover left a prefill and a step of silence, about every 35 s of speech).

Nothing here runs on a thread of its own. Text comes in on the caller's thread (``feed``/``finish``, the
event loop's in the server) under a lock; the generation loop and code2wav push each row's audio in
(``_RowOutput``), and the stream hands it, in order and row after row, to its listener
(``AudioListener.audio``, with the characters of the utterance's text the talker had read when it made the
chunk's last frame: it reads text ahead of the speech it makes), then ``ended`` once. A next row's audio
made while the previous row still speaks waits here until that row's end. ``hold``/``release`` make the
rows sit out while the listener's reader is a whole lead behind (the one flow limit).

``chunks`` is the same audio as a blocking iterator (``TextStream``), for callers on a thread of their own.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeAlias

from speakwire.audio.chunk import AudioChunk, Float32Array
from speakwire.engines.base import EngineInfo, SynthesisRequest, SynthesisRun
from speakwire.engines.qwen3.generation_loop import Row, RowEnd, RowOutput
from speakwire.errors import EngineError, SpeakwireError

ROLLOVER_CHARS = 500
"""A row takes text up to the first sentence end past this many characters (~35 s of speech)."""
SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*\s+|[。！？]")


_Out: TypeAlias = "tuple[Float32Array, int] | _End"
"""What goes to the listener: audio with its text position, or the end."""


class AudioListener(Protocol):
    """Where an utterance's audio goes (the synthesis side's channel to the event loop); never blocks."""

    def audio(self, samples: Float32Array, text_read: int) -> None:
        """Samples at the engine's rate, in order; ``text_read``: characters of the text read by then."""
        ...

    def ended(self, error: SpeakwireError | None) -> None:
        """The utterance is over (after its last audio); ``error``: why it failed. Once, also after a cancel."""
        ...


@dataclasses.dataclass(slots=True)
class _Piece:
    """The part of the utterance's text one row speaks."""

    start: int
    text: str = ""
    closed: bool = False
    row: Row | None = None
    held: list[_Out] = dataclasses.field(default_factory=list)
    """Audio made before the pieces ahead of it ended (a next row speaks only after the previous one)."""
    end: RowEnd | None = None


class RowSource(Protocol):
    """What an utterance needs of its engine: rows that generate and decode, and where a cap is reported.

    ``Qwen3Engine`` is one; naming the need here, not the engine, keeps this module free of an import of it."""

    @property
    def info(self) -> EngineInfo: ...

    def open_row(
        self,
        request: SynthesisRequest,
        run: SynthesisRun | None = None,
        *,
        chunks: Sequence[int] | None = None,
        stream: object = None,
        output: RowOutput | None = None,
    ) -> Row: ...

    @property
    def stream_schedule(self) -> tuple[int, ...]:
        """Frames per streamed chunk; the last size repeats."""
        ...

    def report_cap(self, run: SynthesisRun, budget: int, text: str) -> None: ...


def first_chunk(schedule: Sequence[int], frames: int) -> tuple[int, ...]:
    """``schedule`` with its first chunk ``frames`` long (a request's ``initial_codec_chunk_frames``, as in
    vLLM-Omni): the rest of the ramp follows, and a one-size schedule keeps its size after the first chunk."""
    return (frames, *schedule[1:]) if len(schedule) > 1 else (frames, *schedule)


class Qwen3TextStream:
    """One utterance: ``feed``/``finish`` text, audio to ``listener`` (or through ``chunks`` without one)."""

    def __init__(
        self, engine: RowSource, request: SynthesisRequest, run: SynthesisRun, listener: AudioListener | None = None
    ) -> None:
        self._engine = engine
        self._request = request
        self._run = run
        self._queue: queue.SimpleQueue[tuple[Float32Array, int] | _End] | None = None
        if listener is None:
            self._queue = queue.SimpleQueue()
            listener = _QueueListener(self._queue)
        self._listener = listener
        self._lock = threading.Lock()
        """Guards the pieces; taken on the caller's thread, the loop's and code2wav's, never held long."""
        self._delivering = threading.Lock()
        """Taken before ``_lock`` by whoever hands audio to the listener, and held while it does (outside
        ``_lock``): the listener gets each piece's audio in order whichever thread hands it over."""
        self._text = ""
        self._done = False
        self._held = False
        self._over = False
        """The listener was told ``ended``: nothing more goes to it."""
        self._current = 0
        """The piece whose audio goes to the listener now."""
        self._pieces = [_Piece(0)]
        self._open(self._pieces[0])

    @property
    def text(self) -> str:
        """The text received so far (leading whitespace dropped, as the talker's text track does)."""
        return self._text

    @property
    def rows(self) -> int:
        """Generations this utterance has used so far."""
        return sum(1 for piece in self._pieces if piece.row is not None)

    def feed(self, text: str) -> None:
        with self._delivering:
            with self._lock:
                if not self._text:
                    text = text.lstrip()
                self._text += text
                piece = self._pieces[-1]
                piece.text += text
                rest = self._split(piece)
                if piece.row is not None:
                    piece.row.feed(text[: max(0, len(text) - len(rest))] if rest else text)
                    if piece.closed:
                        piece.row.finish()
                if rest is not None:
                    self._pieces.append(_Piece(piece.start + len(piece.text), rest))
                    self._split_all()
                out = self._advance()  # a row that ended early (EOS) waits for text, or a piece for its row
            self._hand_on(out)

    def finish(self) -> None:
        with self._delivering:
            with self._lock:
                self._done = True
                last = self._pieces[-1]
                last.closed = True
                if last.row is not None:
                    last.row.finish()
                out = self._advance()
            self._hand_on(out)

    def cancel(self) -> None:
        """Stop every row now; the listener is told ``ended`` (no error) unless it was already."""
        with self._delivering:
            with self._lock:
                self._done = True
                for piece in self._pieces:
                    if piece.row is not None:
                        piece.row.cancel()
                out = self._close(None)
            self._hand_on(out)

    def hold(self) -> None:
        """The listener's reader is a whole lead behind: every row sits out until ``release``."""
        with self._lock:
            self._held = True
            for piece in self._pieces:
                if piece.row is not None:
                    piece.row.hold()

    def release(self) -> None:
        """The listener wants more: rows held since ``hold`` step again (nothing to do when none is held)."""
        if not self._held:
            return
        with self._lock:
            self._held = False
            for piece in self._pieces:
                if piece.row is not None:
                    piece.row.release()

    def chunks(self) -> Iterator[tuple[AudioChunk, int]]:
        """The audio as a blocking iterator (only for a stream opened without a listener); ends at the last
        row's end or at a cancel (then without raising); raises ``EngineError`` when a row failed."""
        assert self._queue is not None, "this stream hands its audio to a listener"
        rate = self._engine.info.sample_rate
        try:
            while True:
                item = self._queue.get()
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                if self._run.cancelled.is_set():
                    return
                yield AudioChunk(item[0], rate), item[1]
        finally:
            # However this ends (the consumer gone, an error), no row may keep its slot.
            self.cancel()

    # ----- rows (called with the lock held unless said otherwise) --------------------------------

    def _split(self, piece: _Piece) -> str | None:
        """Close ``piece`` at its first sentence end past ``ROLLOVER_CHARS``; return the text after it."""
        if piece.closed or len(piece.text) <= ROLLOVER_CHARS:
            return None
        match = SENTENCE_END.search(piece.text, ROLLOVER_CHARS)
        if match is None or match.end() >= len(piece.text):
            return None  # no sentence end yet, or nothing after it yet (the next text may extend the end)
        rest = piece.text[match.end() :]
        piece.text = piece.text[: match.end()]
        piece.closed = True
        return rest

    def _split_all(self) -> None:
        """A long text fed at once may hold several rows' worth."""
        while (rest := self._split(self._pieces[-1])) is not None:
            last = self._pieces[-1]
            self._pieces.append(_Piece(last.start + len(last.text), rest))

    def _open(self, piece: _Piece) -> None:
        engine, request = self._engine, self._request
        index = self._pieces.index(piece)
        chunks = engine.stream_schedule
        if index:
            request = dataclasses.replace(request, seed=int(request.seed or 0) + index)
        elif request.initial_codec_chunk_frames:
            chunks = first_chunk(chunks, request.initial_codec_chunk_frames)
        output = _RowOutput(self, piece)
        piece.row = row = engine.open_row(request, self._run, chunks=chunks, stream=self, output=output)
        if self._held:
            row.hold()  # set before its text, so before its first step
        if piece.text:
            row.feed(piece.text)
        if piece.closed:
            row.finish()

    def _open_next(self, piece: _Piece) -> None:
        """Open the row after ``piece`` now, if its text has begun, so it is ready when ``piece`` ends."""
        index = self._pieces.index(piece) + 1
        if index < len(self._pieces) and not self._over:
            following = self._pieces[index]
            if following.row is None and following.text.strip():
                self._open(following)

    def _advance(self) -> list[_Out]:
        """Move past the current piece while its row has ended; return the audio now due to the listener."""
        out: list[_Out] = []
        while not self._over:
            piece = self._pieces[self._current]
            end = piece.end
            if end is None:
                if piece.row is None:  # a piece whose row was never opened: open it now if it can start
                    if piece.text.strip():
                        self._open(piece)
                    elif self._done:
                        out.extend(self._close(None))
                return out
            if end.reason == "error":
                return out + self._close(EngineError(f"Qwen3-TTS generation failed: {end.error}"))
            if end.reason == "cancelled":
                return out + self._close(None)
            if end.reason == "capped":
                assert piece.row is not None
                self._engine.report_cap(self._run, piece.row.max_frames, piece.text)
            if self._current + 1 < len(self._pieces):
                self._current += 1
                following = self._pieces[self._current]
                out.extend(following.held)
                following.held.clear()
            elif self._done:
                return out + self._close(None)
            else:
                return out  # the row ended before its text did (EOS): more text, or the end of it, decides
        return out

    def _close(self, error: SpeakwireError | None) -> list[_Out]:
        """The stream is over: every row stops; the listener's ``ended`` goes out after the audio before it."""
        if self._over:
            return []
        self._over = True
        for piece in self._pieces:
            if piece.row is not None:
                piece.row.cancel()  # a row opened ahead, or one still waiting for text, frees its slot
        return [_End(error)]

    def _hand_on(self, out: list[_Out]) -> None:
        """With ``_delivering`` held (and ``_lock`` not): give ``out`` to the listener, in order."""
        for item in out:
            if isinstance(item, _End):
                self._listener.ended(item.error)
            else:
                self._listener.audio(*item)

    # ----- from the loop's and code2wav's threads (``generation_loop.RowOutput``) -----------------

    def _row_chunk(self, piece: _Piece, audio: Float32Array | None, error: BaseException | None, read: int) -> None:
        with self._delivering:
            with self._lock:
                if self._over:
                    return
                if error is not None:
                    out = self._close(EngineError(f"Qwen3-TTS decoding failed: {type(error).__name__}: {error}"))
                elif audio is None or not len(audio):
                    return
                elif self._pieces[self._current] is not piece:
                    piece.held.append((audio, piece.start + read))
                    return
                else:
                    out = [(audio, piece.start + read)]
            self._hand_on(out)

    def _row_ended(self, piece: _Piece, end: RowEnd) -> None:
        with self._delivering:
            with self._lock:
                piece.end = end
                out = self._advance() if self._pieces[self._current] is piece else []
            self._hand_on(out)

    def _row_read_all(self, piece: _Piece) -> None:
        with self._lock:
            self._open_next(piece)


class _RowOutput:
    """One row's side of its stream (``generation_loop.RowOutput``)."""

    __slots__ = ("_piece", "_stream")

    def __init__(self, stream: Qwen3TextStream, piece: _Piece) -> None:
        self._stream = stream
        self._piece = piece

    def chunk(self, audio: Float32Array | None, error: BaseException | None, text_read: int) -> None:
        self._stream._row_chunk(self._piece, audio, error, text_read)

    def ended(self, end: RowEnd) -> None:
        self._stream._row_ended(self._piece, end)

    def read_all(self) -> None:
        self._stream._row_read_all(self._piece)


@dataclasses.dataclass(frozen=True, slots=True)
class _End:
    error: SpeakwireError | None


class _QueueListener:
    """The listener behind ``chunks``: a queue its caller's thread blocks on."""

    def __init__(self, items: queue.SimpleQueue[tuple[Float32Array, int] | _End]) -> None:
        self._items = items

    def audio(self, samples: Float32Array, text_read: int) -> None:
        self._items.put((samples, text_read))

    def ended(self, error: SpeakwireError | None) -> None:
        self._items.put(_End(error))
