"""AudioOut: the one loop over an utterance's events, turning them into encoded output parts.

Every protocol used to rebuild this loop (open an encoder, hold the header for the first audio, encode
each chunk off the loop, gather a sentence or a whole file, finish the codec, count samples for word
timings). Here it is written once; a protocol maps the parts to its wire messages.

Flow control is kept as the utterance defines it: the stage yields each part and asks the utterance for
its next event only when the protocol comes back for the next part, so what the protocol has written is
what the reader took (``synthesis.utterance``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.base import Encoder
from speakwire.encoders.off_loop import LoopEncoder, open_encoder
from speakwire.encoders.registry import CONTENT_TYPES, create_encoder
from speakwire.output.parts import AudioPart, OutputPart, SegmentEnd, SegmentStart, UtteranceEnd, WordsPart
from speakwire.synthesis.events import AudioReady, SegmentFinished, SegmentStarted, SegmentWords, UtteranceFinished
from speakwire.synthesis.utterance import Utterance
from speakwire.text.alignment import WordTiming

Framing = Literal["stream", "segment_files", "file"]
"""How audio leaves: one continuous encoded stream (chunked HTTP, SSE, WebSocket frames), one complete file
per segment (the speech stream without ``stream_audio``), or one complete file for the whole utterance."""


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the client asked to receive."""

    codec: str
    """Our encoder's format name (``pcm``, ``wav``, ``mp3``, ``opus``, ``ulaw``, ...)."""
    rate: int
    framing: Framing = "stream"
    make_encoder: Callable[[bool], Encoder] | None = field(default=None, compare=False)
    """Builds the encoder (argument: streaming); default ``create_encoder(codec, rate, ...)``. A dialect
    with its own codec settings (ElevenLabs' bitrates) passes its own."""
    prefix: bytes = b""
    """Bytes sent before the encoder's header with the first audio (Deepgram's WAV container)."""
    gain: float = 1.0
    """Applied to the samples before encoding (Cartesia's ``volume``)."""

    def encoder(self, *, streaming: bool) -> Encoder:
        if self.make_encoder is not None:
            return self.make_encoder(streaming)
        return create_encoder(self.codec, self.rate, streaming=streaming)


class AudioOut:
    """One audio output: an encoder opened once, fed by one utterance, or by several in turn (``keep_open``).

    Build it with ``await AudioOut.open(spec)`` (an FFmpeg codec opens on the encode pool), then iterate
    ``parts(utterance)``. Positions (``start``) count output samples from the first this output sent.
    """

    def __init__(self, spec: OutputSpec, encoder: LoopEncoder | None) -> None:
        self.spec = spec
        self._encoder = encoder
        self._pending = spec.prefix + (encoder.header() if encoder is not None else b"")
        """Bytes held for the first audio, so a stream's first byte is audio."""
        self.position = 0
        """Output samples so far (all utterances of this output)."""
        self.utterance_start = 0
        """Output sample at which the utterance being spoken began: engine word times count from it."""
        self._finished = False

    @classmethod
    async def open(cls, spec: OutputSpec) -> AudioOut:
        """Open the output's encoder (``BadRequestError`` for a rate the codec refuses is raised here)."""
        if spec.framing != "stream":
            return cls(spec, None)  # files are encoded whole, on a thread, when their audio is all in
        return cls(spec, await open_encoder(spec.codec, lambda: spec.encoder(streaming=True)))

    @property
    def content_type(self) -> str:
        """The media type of what this output sends (the streaming encoder's, else the codec's)."""
        if self._encoder is not None:
            return self._encoder.content_type
        return CONTENT_TYPES.get(self.spec.codec, "application/octet-stream")

    def parts(self, utterance: Utterance, *, keep_open: bool = False) -> AsyncIterator[OutputPart]:
        """The utterance's output, in order, ending with ``UtteranceEnd``.

        An aligner's words come as a ``WordsPart`` after their segment's ``SegmentEnd`` (``words_follow``), possibly
        after later segments' audio. With ``keep_open`` the stream's codec is not finished at the end: the next
        utterance continues it.
        """
        return _ClosedAtEnd(self._parts(utterance, keep_open=keep_open))

    def all_parts(self, utterance: Utterance, *, words: bool = True) -> AsyncGenerator[OutputPart, None]:
        """``parts`` for a caller that reads on after ``UtteranceEnd`` until the iteration stops (the generator
        then ends by itself: no closing layer, which costs a resumption per part) and closes it should it
        stop early (``contextlib.aclosing``). ``words=False``: the caller takes no word timings; the parts
        carry none, and the utterance does not move them with its trim (``Utterance.wants_words``)."""
        utterance.wants_words = words
        return self._parts(utterance, keep_open=False)

    async def _parts(self, utterance: Utterance, *, keep_open: bool) -> AsyncGenerator[OutputPart, None]:
        spec = self.spec
        gain = spec.gain
        as_is = utterance.wants_s16le = self._encoder is not None and self._encoder.s16le_as_is and gain == 1.0
        with_words = utterance.wants_words
        self.utterance_start = self.position
        utterance_samples = segment_samples = 0
        segment_words: list[WordTiming] = []
        gathered: list[Float32Array] = []
        """The samples of the file being gathered (a segment's or the utterance's)."""
        next_offset = 0
        words_follow = utterance.aligned_words
        segment_start = SegmentStart(-1, "", 0, 0)
        awaiting_words: dict[int, tuple[SegmentStart, int]] = {}
        """Ended segments whose aligner's words are still to come: where each started, and its samples."""
        async with contextlib.aclosing(utterance.events()) as events:
            async for event in events:
                if type(event) is AudioReady:  # the usual event first, by its exact type (a cheaper test)
                    samples = event.samples if gain == 1.0 else event.samples * gain
                    count = len(samples)
                    data = b""
                    encoder = self._encoder
                    if encoder is not None:
                        if as_is and event.s16le is not None:
                            encoded = event.s16le  # cast on the worker that made the samples
                        elif encoder.inline:
                            # A byte cast is called directly: an await per chunk costs the loop more than the cast.
                            encoded = encoder.encoder.encode(samples)
                        else:
                            encoded = await encoder.encode(samples)
                        data = self._pending + encoded
                        self._pending = b""
                    else:
                        gathered.append(samples)
                    words = event.words if with_words else ()
                    part = AudioPart(event.index, data, count, self.position, words)
                    self.position += count
                    utterance_samples += count
                    segment_samples += count
                    if words:
                        segment_words.extend(words)
                    yield part
                elif isinstance(event, SegmentStarted):
                    segment_samples, segment_words = 0, []
                    offset, next_offset = next_offset, next_offset + len(event.text)
                    if spec.framing == "segment_files":
                        gathered = []
                    segment_start = SegmentStart(event.index, event.text, offset, self.position)
                    yield segment_start
                elif isinstance(event, SegmentFinished):
                    file = b""
                    if spec.framing == "segment_files" and gathered:  # a failed segment's audio goes too, marked
                        file = await self._file(gathered)
                        gathered = []
                    follow = words_follow and segment_start.index == event.index
                    if follow:
                        awaiting_words[event.index] = (segment_start, segment_samples)
                    yield SegmentEnd(event.index, segment_samples, tuple(segment_words), event.error, file, follow)
                elif isinstance(event, SegmentWords):
                    ended = awaiting_words.pop(event.index, None)
                    if ended is not None:
                        began, count = ended
                        yield WordsPart(event.index, event.words, began.start, count, began.char_offset)
                elif isinstance(event, UtteranceFinished):
                    data = b""
                    if not event.cancelled:
                        if spec.framing == "file":
                            data = await self._file(gathered)
                        elif self._encoder is not None and not keep_open:
                            data = await self.finish()
                    yield UtteranceEnd(event.usage, event.cancelled, data, utterance_samples)
                    return

    async def finish(self) -> bytes:
        """The stream's last bytes (held header included); once, then empty."""
        if self._finished or self._encoder is None:
            return b""
        self._finished = True
        data, self._pending = self._pending + await self._encoder.finish(), b""
        return data

    async def _file(self, parts: list[Float32Array]) -> bytes:
        """One complete file of ``parts`` (real sizes in its header), encoded on a thread."""
        prefix, self._pending = self._pending, b""
        return prefix + await asyncio.to_thread(_encode_whole, self.spec, parts)


class _ClosedAtEnd:
    """``AudioOut.parts``: the stage's generator, closed as soon as it has given ``UtteranceEnd``.

    A consumer stops at the end part (``return`` inside its loop); a generator left suspended there would be
    closed later by the event loop's finaliser, which costs every utterance a self-wake and a task. Closing
    it here, in place, also closes the utterance's event stream it reads.
    """

    __slots__ = ("_ended", "_generator")

    def __init__(self, generator: AsyncGenerator[OutputPart, None]) -> None:
        self._generator = generator
        self._ended = False

    def __aiter__(self) -> _ClosedAtEnd:
        return self

    async def __anext__(self) -> OutputPart:
        if self._ended:
            raise StopAsyncIteration
        part = await anext(self._generator)
        if isinstance(part, UtteranceEnd):
            self._ended = True
            await self._generator.aclose()
        return part


def _encode_whole(spec: OutputSpec, parts: list[Float32Array]) -> bytes:
    """The same bytes as ``encoders.registry.encode_file``, from any encoder; opened here, on the thread
    (opening FLAC's codec and muxer costs ~5 ms, MP3's ~1 ms)."""
    encoder = spec.encoder(streaming=False)
    return encoder.header() + b"".join(encoder.encode(part) for part in parts) + encoder.finish()
