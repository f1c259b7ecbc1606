"""32-bit float PCM (raw and WAV), encoded by our encoders and read back by FFmpeg (PyAV) and libsndfile."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile

from speakwire.encoders.registry import FLOAT_FORMATS, create_encoder, default_sample_rate, encode_file
from speakwire.encoders.wav import FLOAT_HEADER_SIZE

RATE = 22050


def signal(seconds: float = 0.5) -> np.ndarray:
    t = np.arange(round(RATE * seconds)) / RATE
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def in_pieces(fmt: str, samples: np.ndarray, *, streaming: bool) -> bytes:
    encoder = create_encoder(fmt, RATE, streaming=streaming)
    parts = [encoder.header()]
    parts.extend(encoder.encode(samples[start : start + 999]) for start in range(0, len(samples), 999))
    return b"".join(parts) + encoder.finish()


def ffmpeg_read(data: bytes, demuxer: str | None) -> tuple[np.ndarray, int]:
    options = {"sample_rate": str(RATE), "ch_layout": "mono"} if demuxer == "f32le" else {}
    with av.open(io.BytesIO(data), format=demuxer, options=options) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        return np.concatenate(frames, axis=1)[0], stream.rate


def test_raw_float_pcm_returns_every_sample_exactly() -> None:
    samples = signal()
    data = in_pieces("pcm_f32le", samples, streaming=True)
    assert data == samples.astype("<f4").tobytes()
    decoded, rate = ffmpeg_read(data, "f32le")
    assert rate == RATE
    np.testing.assert_array_equal(decoded, samples)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_float_wav_is_read_back_exactly_by_ffmpeg_and_libsndfile(streaming: bool) -> None:
    samples = signal()
    data = in_pieces("wav_f32le", samples, streaming=streaming)
    assert len(data) == FLOAT_HEADER_SIZE + 4 * len(samples)
    decoded, rate = ffmpeg_read(data, None)
    assert rate == RATE
    np.testing.assert_array_equal(decoded, samples)
    read, sf_rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert sf_rate == RATE
    np.testing.assert_array_equal(read, samples)
    if not streaming:
        assert soundfile.info(io.BytesIO(data)).subtype == "FLOAT"


def test_out_of_range_samples_are_clipped_like_the_16_bit_formats() -> None:
    loud = np.array([1.5, -1.5, 0.25], dtype=np.float32)
    assert np.frombuffer(encode_file("pcm_f32le", RATE, loud), "<f4").tolist() == [1.0, -1.0, 0.25]


def test_float_formats_are_registered_but_not_offered_as_openai_formats() -> None:
    from speakwire.encoders.registry import AUDIO_FORMATS

    for fmt in FLOAT_FORMATS:
        assert fmt not in AUDIO_FORMATS
        assert default_sample_rate(fmt, None, native=RATE) == 24000
        assert default_sample_rate(fmt, 44100, native=RATE) == 44100
        encoder = create_encoder(fmt, 16000, streaming=True)
        assert (encoder.format, encoder.sample_rate) == (fmt, 16000)
    assert create_encoder("wav_f32le", RATE, streaming=True).content_type == "audio/wav"
