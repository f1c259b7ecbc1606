"""An encoder driven from the event loop: FFmpeg formats encode on a small pool of their own, the rest inline.

MP3 and Opus cost ~15 ms of CPU per second of audio, and one ``encode()`` held the loop up to 39 ms, during
which every other stream's frames and reads waited. PCM, WAV and G.711 are a numpy cast, cheaper than the
hop to a thread, so they stay on the loop. PyAV releases the GIL inside the codec and muxer
(``avcodec_send_frame``, ``avcodec_receive_packet``, ``av_interleaved_write_frame``), so the loop runs
while a frame is encoded, not only between calls. Raw 16-bit PCM and streaming 16-bit WAV do not even cast
on the loop: the worker that made a chunk made its s16le too (``AudioReady.s16le``), and the loop sends it
(``s16le_as_is``): each numpy call on the loop hands the GIL to the synthesis workers and back, and the cast
cost the loop ~0.6 ms of a Piper PCM utterance's ~8.5 (issue 27, ``bench/results/front-ab-2core``).

Opening one (codec and muxer: 0.3 ms for Opus, 6 ms for FLAC) goes to the pool too, by ``open_encoder``.

The pool (``encoders.encode_pool``) is not asyncio's default executor: whole-file encodes and voice lookups
queue there for longer, and a stream's next chunk should not wait behind them; and it hands each result back to
the loop with one callback, not through a chain of two futures.

One stream's calls run one at a time, in the order they were made: each caller awaits its call, and a call
whose task was cancelled while the codec ran (a thread cannot be stopped) is waited for before the next one
starts, so an encoder is never used by two threads at once and its bytes keep their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from speakwire.audio.chunk import Float32Array
from speakwire.encoders import encode_pool
from speakwire.encoders.av_stream import AAC, FLAC, MP3, OPUS, AvStreamEncoder
from speakwire.encoders.base import Encoder
from speakwire.encoders.pcm import PcmEncoder
from speakwire.encoders.wav import WavEncoder

_FFMPEG_FORMATS = frozenset(spec.name for spec in (AAC, FLAC, MP3, OPUS))


async def open_encoder(fmt: str, make: Callable[[], Encoder]) -> LoopEncoder:
    """``make()``'s encoder of ``fmt``, opened on the pool for an FFmpeg format: opening a codec and muxer
    costs 0.3 ms (Opus) to 6 ms (FLAC) of CPU. Its errors (a rate the codec refuses) are raised here."""
    if fmt not in _FFMPEG_FORMATS:
        return LoopEncoder(make())
    return LoopEncoder(await encode_pool.submit(make).future)


def s16le_as_is(encoder: Encoder) -> bool:
    """Whether ``encoder.encode(samples)`` is exactly ``float_to_int16_bytes(samples)``: raw 16-bit PCM, and a
    streaming 16-bit WAV's data after its header. Such an output sends the s16le the worker made with the
    samples (``AudioReady.s16le``) and casts nothing on the loop."""
    if type(encoder) is PcmEncoder:  # exactly: a subclass may encode otherwise
        return True
    return type(encoder) is WavEncoder and encoder.streaming and encoder.sample_format == "s16le"


def off_loop(encoder: Encoder) -> bool:
    """Whether ``encoder``'s calls are worth a thread: the FFmpeg codecs are, the byte casts are not."""
    return isinstance(encoder, AvStreamEncoder)


class LoopEncoder:
    """``encoder`` with ``encode``/``finish`` to await from the event loop; see the module docstring."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.format = encoder.format
        self.content_type = encoder.content_type
        self.sample_rate = encoder.sample_rate
        self._threaded = off_loop(encoder)
        self.inline = not self._threaded
        """A byte cast (PCM, WAV, G.711): callers on the loop may call ``encoder.encode`` directly, no await."""
        self.s16le_as_is = s16le_as_is(encoder)
        """The bytes of ``encode(samples)`` are the samples' s16le: a caller holding those sends them instead."""
        self._last: encode_pool.Job[bytes] | None = None

    def header(self) -> bytes:
        """The encoder's header, inline: it is a constant (WAV) or empty."""
        return self.encoder.header()

    async def encode(self, samples: Float32Array) -> bytes:
        """The bytes ``samples`` complete, as ``Encoder.encode``; its errors are raised here."""
        return await self._call(self.encoder.encode, samples)

    async def finish(self) -> bytes:
        """The last bytes, as ``Encoder.finish``."""
        return await self._call(self.encoder.finish)

    async def _call(self, method: Callable[..., bytes], *args: object) -> bytes:
        if not self._threaded:
            return method(*args)
        last = self._last
        if last is not None and not last.finished.is_set():
            # A call cancelled while it ran still holds the encoder: wait for it (its outcome is not ours).
            await asyncio.to_thread(last.finished.wait)
        job = self._last = encode_pool.submit(method, *args)
        # Cancelling this await skips the job if no thread has taken it yet; a running one finishes.
        return await job.future
