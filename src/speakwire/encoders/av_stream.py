"""Compressed formats (MP3, Opus, AAC, FLAC) through one FFmpeg codec and muxer per stream, via PyAV.

Peers lost or corrupted streamed audio here (peers.md, "Streaming encoder bugs"): reading the buffer before
the container was closed dropped the last Ogg pages, 1–2 s of speech (Kokoro #447); gluing per-chunk files
made invalid MP3 (Kokoro PR #271). So one codec and one muxer live for the whole stream, ``finish()`` flushes
the codec *and* closes the muxer before the last bytes are taken, and the muxer writes into a sink whose kind
follows ``streaming``:

* streaming — a forward-only sink with no ``seek``/``tell``. FFmpeg then marks the output unseekable and
  every muxer takes its streaming path instead of seeking back at close to patch bytes the client already
  has: FLAC leaves STREAMINFO's total-samples and MD5 at 0 ("unknown", valid FLAC), MP3 gets no Xing/LAME
  tag. The sink is drained after every call, so bytes leave as soon as the muxer has them.
* not streaming — a seekable ``BytesIO`` returned whole by ``finish()``, so FLAC gets its real length and
  MD5, and MP3 a LAME tag with which gapless decoders trim the encoder's priming.

Codecs take fixed-size frames (``frame_size`` samples: 576/1152 MP3, 960 Opus, 1024 AAC, ~105 ms FLAC); up
to one frame of input waits for the next call, and the last short frame is sent by ``finish()``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

import av
import numpy as np
import numpy.typing as npt
from av.audio.stream import AudioStream
from av.container import OutputContainer

from speakwire.audio.chunk import Float32Array, float_to_int16_bytes


@dataclass(frozen=True, slots=True)
class AvFormat:
    """How one format is made with FFmpeg: codec, muxer, and the options that keep it streamable."""

    name: str
    content_type: str
    container: str
    codec: str
    sample_format: str
    """The codec's input sample format; for mono, planar and packed layouts are the same bytes."""
    bit_rate: int | None = None
    container_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def sample_rates(self) -> tuple[int, ...] | None:
        """The rates the codec accepts, ascending, or None when it takes any rate."""
        return codec_sample_rates(self.codec)


@cache
def codec_sample_rates(codec: str) -> tuple[int, ...] | None:
    """Ask FFmpeg which sample rates an encoder supports (None: any)."""
    rates = av.Codec(codec, "w").audio_rates
    return tuple(sorted(rates)) if rates else None


MP3 = AvFormat(
    name="mp3",
    content_type="audio/mpeg",
    container="mp3",
    codec="libmp3lame",
    sample_format="s16p",
    # libmp3lame's own default is 32 kb/s at 24 kHz, audibly thin for speech; 64 kb/s is valid for every
    # MPEG-1/2/2.5 rate, so it holds whatever rate the client picks.
    bit_rate=64_000,
    # No ID3v2 tag: the stream is bare MPEG frames, which any decoder can join at a frame boundary.
    container_options={"id3v2_version": "0"},
)
OPUS = AvFormat(
    name="opus",
    content_type="audio/ogg",
    container="ogg",
    codec="libopus",
    sample_format="s16",
    bit_rate=48_000,
    # The Ogg muxer closes a page once it spans page_duration (default 1 s) and writes a page only when the
    # next one has begun, so by default ~1–2 s of audio stays inside the muxer between calls. 60 ms pages
    # hold back at most ~120 ms, at ~30 bytes of page header per 60 ms (~4 kb/s).
    container_options={"page_duration": "60000"},
)
AAC = AvFormat(
    name="aac",
    content_type="audio/aac",
    container="adts",  # self-framing: every frame carries its header, so a stream is playable from any frame
    codec="aac",
    sample_format="fltp",
    bit_rate=64_000,
)
FLAC = AvFormat(
    name="flac",
    content_type="audio/flac",
    container="flac",
    codec="flac",
    sample_format="s16",
    # The muxer reserves 8 KiB of padding for tags added later by seeking back; we never do.
    container_options={"metadata_header_padding": "0"},
)


class _ForwardOnlySink:
    """A write-only file with no ``seek``/``tell``: FFmpeg treats it as a pipe and never writes backwards."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pending.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data = b"".join(self._pending)
        self._pending.clear()
        return data


class AvStreamEncoder:
    """Encode one mono stream with an FFmpeg codec and muxer; see the module docstring."""

    def __init__(self, spec: AvFormat, sample_rate: int, *, streaming: bool) -> None:
        rates = spec.sample_rates
        if rates is not None and sample_rate not in rates:
            raise ValueError(f"{spec.name} cannot encode at {sample_rate} Hz; supported rates: {rates}")
        self.format = spec.name
        self.content_type = spec.content_type
        self.sample_rate = sample_rate
        self.streaming = streaming
        self._spec = spec
        self._output = _ForwardOnlySink() if streaming else io.BytesIO()
        self._container: OutputContainer = av.open(
            self._output,
            mode="w",
            format=spec.container,
            container_options=dict(spec.container_options),
        )
        stream = self._container.add_stream(spec.codec, rate=sample_rate)
        assert isinstance(stream, AudioStream)
        stream.layout = "mono"
        stream.format = spec.sample_format
        if spec.bit_rate is not None:
            stream.bit_rate = spec.bit_rate
        self._stream = stream
        self._time_base = Fraction(1, sample_rate)
        self._container.start_encoding()  # opens the codec, which fixes frame_size
        self._frame_size = stream.codec_context.frame_size
        self._held = np.zeros(0, dtype=np.float32)
        self._next_pts = 0
        self._finished = False

    def header(self) -> bytes:
        # The container's own header (OpusHead, fLaC + STREAMINFO) is already in the sink and leaves with
        # the first encode(); nothing needs to go ahead of the audio.
        return b""

    def encode(self, samples: Float32Array) -> bytes:
        if self._finished:
            raise RuntimeError(f"{self.format} encoder: encode() after finish()")
        held = np.concatenate([self._held, np.asarray(samples, dtype=np.float32)])
        size = self._frame_size or len(held)  # 0: the codec takes frames of any size
        whole = len(held) - len(held) % size if size else 0
        if whole:
            # One cast for the chunk, not one per frame (an MP3 frame is 1,152 samples): each numpy call here
            # hands the GIL to the event loop and back, which the loop pays for in wake-ups.
            data = self._converted(held[:whole])
            for start in range(0, whole, size):
                self._encode_frame(data[start : start + size])
        self._held = held[whole:]
        return self._take()

    def finish(self) -> bytes:
        if self._finished:
            raise RuntimeError(f"{self.format} encoder: finish() called twice")
        self._finished = True
        if self._next_pts == 0 and not len(self._held):
            # A stream that got no audio (cancelled before the first chunk) must still end as a file a player
            # opens: Ogg cannot write its end-of-stream page without a packet, so send one silent sample.
            self._held = np.zeros(1, dtype=np.float32)
        if len(self._held):
            # A short last frame: all four codecs take one (AV_CODEC_CAP_SMALL_LAST_FRAME), and padding it
            # with silence would lengthen the audio in formats that record their exact length.
            self._encode_frame(self._converted(self._held))
            self._held = np.zeros(0, dtype=np.float32)
        self._container.mux(self._stream.encode(None))  # drain the codec's delay line
        self._container.close()  # trailer, last Ogg page (EOS), STREAMINFO/LAME tag when seekable
        if isinstance(self._output, io.BytesIO):
            return self._output.getvalue()
        return self._output.drain()

    def _converted(self, samples: Float32Array) -> npt.NDArray[np.int16] | Float32Array:
        """``samples`` in the codec's sample format."""
        if self._spec.sample_format.startswith("s16"):
            # The same rounding as WAV and PCM, so lossless FLAC decodes to exactly their samples.
            return np.frombuffer(float_to_int16_bytes(samples), dtype="<i2")
        return np.clip(samples, -1.0, 1.0).astype(np.float32)

    def _encode_frame(self, data: npt.NDArray[np.int16] | Float32Array) -> None:
        """One frame of ``data``, already in the codec's sample format (``_converted``)."""
        frame = av.AudioFrame.from_ndarray(data.reshape(1, -1), format=self._spec.sample_format, layout="mono")
        frame.sample_rate = self.sample_rate
        frame.time_base = self._time_base
        frame.pts = self._next_pts
        self._next_pts += len(data)
        self._container.mux(self._stream.encode(frame))

    def _take(self) -> bytes:
        return self._output.drain() if isinstance(self._output, _ForwardOnlySink) else b""
