"""Helpers for voice library tests: reference clips as recorders produce them (made with PyAV), and uploads."""

from __future__ import annotations

import base64
import io

import av
import httpx
import numpy as np
import soundfile as sf

from support.live_server import LiveServer

FORMATS = {
    # name: (container, codec, media type, sample rate)
    "wav": ("wav", "pcm_s16le", "audio/wav", 44_100),
    "flac": ("flac", "flac", "audio/flac", 48_000),
    "mp3": ("mp3", "libmp3lame", "audio/mpeg", 44_100),
    "ogg-opus": ("ogg", "libopus", "audio/ogg", 48_000),
    "m4a-aac": ("ipod", "aac", "audio/mp4", 44_100),
    "webm-opus": ("webm", "libopus", "audio/webm", 48_000),
}


def tone(seconds: float, rate: int = 24_000, *, seed: int = 3) -> np.ndarray:
    """A 220 Hz tone with a little noise: enough of a "voice" for decoding and for the tiny model."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def encoded_clip(fmt: str, seconds: float = 2.0, *, seed: int = 3) -> bytes:
    """The clip encoded in one of ``FORMATS``."""
    container, codec, _, rate = FORMATS[fmt]
    wave = tone(seconds, rate, seed=seed)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream)
        frame_size = stream.codec_context.frame_size or 1024
        for start in range(0, len(wave), frame_size):
            piece = wave[start : start + frame_size]
            frame = av.AudioFrame.from_ndarray(piece[None, :], format="fltp", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def wav_clip(seconds: float = 2.0, *, seed: int = 3) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, tone(seconds, seed=seed), 24_000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def data_uri(data: bytes, media_type: str = "audio/wav") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def upload(
    server: LiveServer, name: str, audio: bytes, *, media_type: str = "audio/wav", **fields: str
) -> httpx.Response:
    """``POST /v1/audio/voices`` as multipart, the way curl -F sends it."""
    form = {"name": name, "consent": f"{name} recorded this and agreed to its cloning.", **fields}
    files = {"audio_sample": (f"{name}.bin", audio, media_type)}
    return httpx.post(f"{server.url}/v1/audio/voices", data=form, files=files, timeout=60)
