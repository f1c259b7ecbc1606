"""The page's speech as ADTS AAC segments, made here with PyAV: no ffmpeg program, no gaps where chunks join.

Gradio's streaming audio player plays an HLS playlist of ADTS AAC segments. Gradio makes them by
handing chunks to the ``ffmpeg`` program — gradio 6.17 starts a fresh encoder for every chunk, and an
AAC frame only decodes whole when overlap-added with its neighbours, so every join becomes ~36 ms of
near-silence and the playlist's durations (those of the input chunks) drift from what actually plays.

Here one streaming AAC encoder (the server's own, ``speakwire.encoders``: FFmpeg's codec inside PyAV's
wheel) lives for the whole of one spoken text, owned by the page's generator: it keeps the overlap and
the sub-frame remainder between chunks, so the segments join seamlessly, and it goes when the generator
does — finished, stopped or abandoned by a closed tab — with no process, thread or registry to clean up.
Each segment's duration is counted from the frames in it (1024 samples each), so the playlist says what
the player will play.
"""

from __future__ import annotations

import numpy as np

from speakwire.audio.resample import StreamResampler
from speakwire.encoders.base import Encoder
from speakwire.encoders.registry import create_encoder, default_sample_rate

AAC_FRAME_SAMPLES = 1024
"""Samples in one AAC-LC frame, the unit an ADTS header describes."""
ADTS_SAMPLE_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
"""The rates an ADTS header can name, by their 4-bit index."""
_HEADER_SIZE = 7


def adts_duration(data: bytes) -> float:
    """Seconds of audio in ``data``, a run of whole ADTS frames.

    Raises:
        ValueError: ``data`` is not whole ADTS frames.
    """
    seconds = 0.0
    offset = 0
    while offset < len(data):
        header = data[offset : offset + _HEADER_SIZE]
        if len(header) < _HEADER_SIZE or header[0] != 0xFF or header[1] & 0xF0 != 0xF0:
            raise ValueError(f"not an ADTS frame at byte {offset} of {len(data)}")
        rate_index = (header[2] >> 2) & 0x0F
        length = ((header[3] & 0x03) << 11) | (header[4] << 3) | (header[5] >> 5)
        blocks = (header[6] & 0x03) + 1
        if rate_index >= len(ADTS_SAMPLE_RATES) or length < _HEADER_SIZE or offset + length > len(data):
            raise ValueError(f"broken ADTS frame at byte {offset} of {len(data)}")
        seconds += blocks * AAC_FRAME_SAMPLES / ADTS_SAMPLE_RATES[rate_index]
        offset += length
    return seconds


class AdtsStream:
    """One text's 16-bit PCM chunks in, ADTS AAC segments out, through one encoder for the whole stream.

    ``encode()`` returns the frames complete so far (maybe none: the codec holds back up to a frame
    and its look-ahead), ``finish()`` the rest; their concatenation is one ADTS stream. A rate AAC
    cannot carry is resampled to the nearest one it can.
    """

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.output_rate = default_sample_rate("aac", sample_rate, native=sample_rate)
        self._resampler = StreamResampler(sample_rate, self.output_rate)
        self._encoder: Encoder = create_encoder("aac", self.output_rate, streaming=True)

    def encode(self, pcm: bytes) -> bytes:
        """Encode the next chunk: whole samples of signed 16-bit little-endian mono PCM, as the backend yields."""
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        return self._encoder.encode(self._resampler.process(samples))

    def finish(self) -> bytes:
        """The frames still in the codec; the stream is complete after this."""
        tail = self._encoder.encode(self._resampler.flush())
        return tail + self._encoder.finish()
