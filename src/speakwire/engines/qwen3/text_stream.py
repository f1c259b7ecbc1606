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

``chunks`` yields ``(audio, characters read)``: the characters of the utterance's text that the talker
had read when it made the chunk's last frame (the talker reads text ahead of the speech it makes).
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import re
import threading
from collections.abc import Generator, Iterator, Sequence
from typing import Protocol

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import EngineInfo, SynthesisRequest
from speakwire.engines.qwen3.decode_batcher import DecodeBatcher
from speakwire.engines.qwen3.generation_loop import Frame, Row, RowEnd
from speakwire.engines.qwen3.stream_decoder import StreamDecoder
from speakwire.errors import EngineError

ROLLOVER_CHARS = 500
"""A row takes text up to the first sentence end past this many characters (~35 s of speech)."""
SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*\s+|[。！？]")


@dataclasses.dataclass(slots=True)
class _Piece:
    """The part of the utterance's text one row speaks."""

    start: int
    text: str = ""
    closed: bool = False
    row: Row | None = None


class RowSource(Protocol):
    """What an utterance needs of its engine: rows to generate in, and a way to turn their codes into audio.

    ``Qwen3Engine`` is one; naming the need here, not the engine, keeps this module free of an import of it."""

    @property
    def info(self) -> EngineInfo: ...

    @property
    def stream_schedule(self) -> tuple[int, ...]:
        """Frames per streamed chunk; the last size repeats."""
        ...

    @property
    def decoding(self) -> DecodeBatcher: ...

    def open_row(
        self, request: SynthesisRequest, *, chunks: Sequence[int] | None = None, stream: object = None
    ) -> Row: ...

    def open_decoder(self, request: SynthesisRequest) -> StreamDecoder: ...

    def report_cap(self, request: SynthesisRequest, budget: int, text: str) -> None: ...


class Qwen3TextStream:
    POLL_S = 0.05
    """How often a waiting consumer looks at ``request.cancelled``."""

    def __init__(self, engine: RowSource, request: SynthesisRequest) -> None:
        self._engine = engine
        self._request = request
        self._lock = threading.Lock()
        self._text = ""
        self._done = False
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

    def finish(self) -> None:
        with self._lock:
            self._done = True
            last = self._pieces[-1]
            last.closed = True
            if last.row is not None:
                last.row.finish()

    def cancel(self) -> None:
        with self._lock:
            self._done = True
            for piece in self._pieces:
                if piece.row is not None:
                    piece.row.cancel()

    def chunks(self) -> Iterator[tuple[AudioChunk, int]]:
        """Audio as the rows' frames arrive; ends at the last row's end, or at a cancel (then without raising)."""
        try:
            for index in itertools.count():
                piece = self._next_piece(index)
                if piece is None:
                    return
                end = yield from self._row_chunks(piece)
                if end is None or end.reason == "cancelled":
                    return
                if end.reason == "error":
                    raise EngineError(f"Qwen3-TTS generation failed: {end.error}") from end.error
                if end.reason == "capped":
                    assert piece.row is not None
                    self._engine.report_cap(self._request, piece.row.max_frames, piece.text)
        finally:
            # However this ends (a barge-in between rows, an error, the consumer gone), no row opened ahead
            # may keep its slot: a row waiting for text that never comes would hold it for good.
            self.cancel()

    # ----- rows --------------------------------------------------------------------------------

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
        if index:
            request = dataclasses.replace(request, seed=int(request.seed or 0) + index, extra=dict(request.extra))
        piece.row = engine.open_row(request, chunks=engine.stream_schedule, stream=self)
        # Nobody reads a row until the consumer reaches it (``_row_chunks``): the next row of a long text
        # runs while the consumer is still on this one, or parked with its audio, so code2wav must not
        # wait for its chunks. Set before its text, so before its first step.
        piece.row.consumer_away = True
        if piece.text:
            piece.row.feed(piece.text)
        if piece.closed:
            piece.row.finish()

    def _open_next(self, piece: _Piece) -> None:
        """Open the row after ``piece`` now, if its text has begun, so it is ready when ``piece`` ends."""
        with self._lock:
            index = self._pieces.index(piece) + 1
            if index < len(self._pieces) and not self._request.cancelled.is_set():
                following = self._pieces[index]
                if following.row is None and following.text.strip():
                    self._open(following)

    def _next_piece(self, index: int) -> _Piece | None:
        """The piece ``index``, its row opened; waits while the text may still bring it; None when it never will."""
        while not self._request.cancelled.is_set():
            with self._lock:
                if index < len(self._pieces):
                    piece = self._pieces[index]
                    if piece.row is None:
                        if self._done and not piece.text.strip():
                            return None
                        self._open(piece)
                    return piece
                if self._done:
                    return None
            self._request.cancelled.wait(self.POLL_S)
        return None

    def _row_chunks(self, piece: _Piece) -> Generator[tuple[AudioChunk, int], None, RowEnd | None]:
        """One row's audio in the stream schedule; returns how the row ended (None: the consumer left)."""
        engine, request = self._engine, self._request
        row = piece.row
        assert row is not None
        decoder = engine.open_decoder(request)
        row.consumer_away = False  # read from here on
        pending: list[Frame] = []
        text_read = piece.start
        next_opened = False
        end: RowEnd | None = None
        try:
            while end is None:
                if request.cancelled.is_set():
                    return None
                try:
                    event = row.events.get(timeout=self.POLL_S)
                except queue.Empty:
                    continue
                if isinstance(event, RowEnd):
                    end = event
                    if end.reason == "cancelled":
                        return end
                else:
                    pending.append(event)
                    text_read = piece.start + event.text_read
                    if not next_opened and piece.closed and event.text_read >= len(piece.text.rstrip()):
                        next_opened = True  # only its last words are left to speak
                        self._open_next(piece)
                if pending and (pending[-1].chunk_end or end is not None):
                    # The loop ends chunks in ``stream_schedule`` sizes, in step with other rows' (they batch).
                    # Stacked and windowed on code2wav's stream, after the newest frame's event (CUDA).
                    take, pending = pending, []
                    tag = take[-1].step if take[-1].announced else None
                    audio = engine.decoding.decode(decoder, [f.codes for f in take], take[-1].ready, tag)
                    # Until the consumer asks for more it reads no frame (at the lead it waits for its
                    # listener): the loop announces none of this row's chunks to code2wav meanwhile.
                    row.consumer_away = True
                    yield AudioChunk(audio, engine.info.sample_rate), text_read
                    row.consumer_away = False
        finally:
            if end is None:
                self.cancel()  # the consumer is gone: free the slots before the loop's next step
        return end
