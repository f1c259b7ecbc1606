"""LoopEncoder: FFmpeg formats encode off the event loop's thread, in order, with the real encoders."""

from __future__ import annotations

import asyncio
import functools
import io
import threading

import av
import numpy as np
import pytest

from speakwire.audio.chunk import Float32Array
from speakwire.encoders import encode_pool
from speakwire.encoders.av_stream import MP3, AvStreamEncoder
from speakwire.encoders.base import Encoder
from speakwire.encoders.encode_pool import POOL_THREADS
from speakwire.encoders.off_loop import LoopEncoder, open_encoder
from speakwire.encoders.pcm import PcmEncoder
from speakwire.encoders.registry import AUDIO_FORMATS, create_encoder, default_sample_rate
from speakwire.errors import BadRequestError

CHUNKS = (137, 4096, 1, 999, 2000, 3, 480, 6000)


def _signal(seed: int, rate: int) -> list[Float32Array]:
    rng = np.random.default_rng(seed)
    tone = 0.3 * np.sin(np.arange(sum(CHUNKS)) * 2 * np.pi * (200 + 50 * seed) / rate)
    samples = (tone + 0.01 * rng.standard_normal(len(tone))).astype(np.float32)
    return np.split(samples, np.cumsum(CHUNKS)[:-1])


def _direct(fmt: str, rate: int, chunks: list[Float32Array]) -> bytes:
    encoder = create_encoder(fmt, rate, streaming=True)
    return encoder.header() + b"".join(encoder.encode(c) for c in chunks) + encoder.finish()


async def _through_loop(fmt: str, rate: int, chunks: list[Float32Array]) -> bytes:
    encoder = LoopEncoder(create_encoder(fmt, rate, streaming=True))
    out = [encoder.header()]
    for chunk in chunks:
        out.append(await encoder.encode(chunk))
        await asyncio.sleep(0)  # let the other streams' calls interleave with this one's
    out.append(await encoder.finish())
    return b"".join(out)


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
async def test_concurrent_streams_each_get_the_bytes_of_a_direct_encode(fmt: str) -> None:
    rate = default_sample_rate(fmt, None, 24_000)
    signals = [_signal(seed, rate) for seed in range(POOL_THREADS + 3)]
    got = await asyncio.gather(*(_through_loop(fmt, rate, chunks) for chunks in signals))
    want = [_direct(fmt, rate, chunks) for chunks in signals]
    assert [_comparable(fmt, data) for data in got] == [_comparable(fmt, data) for data in want]


def _comparable(fmt: str, data: bytes) -> bytes:
    """The bytes, or for Opus the decoded audio: each Ogg stream gets a random serial number."""
    if fmt != "opus":
        return data
    with av.open(io.BytesIO(data)) as container:
        return b"".join(frame.to_ndarray().tobytes() for frame in container.decode(audio=0))


class _ThreadRecordingMp3(AvStreamEncoder):
    """The real MP3 encoder, noting which thread runs each call."""

    def __init__(self) -> None:
        super().__init__(MP3, 24_000, streaming=True)
        self.threads: list[int] = []

    def encode(self, samples: Float32Array) -> bytes:
        self.threads.append(threading.get_ident())
        return super().encode(samples)

    def finish(self) -> bytes:
        self.threads.append(threading.get_ident())
        return super().finish()


class _ThreadRecordingPcm(PcmEncoder):
    def __init__(self) -> None:
        super().__init__(24_000)
        self.threads: list[int] = []

    def encode(self, samples: Float32Array) -> bytes:
        self.threads.append(threading.get_ident())
        return super().encode(samples)


async def test_ffmpeg_encodes_leave_the_loop_thread_and_byte_casts_stay_on_it() -> None:
    mp3, pcm = _ThreadRecordingMp3(), _ThreadRecordingPcm()
    encoders = LoopEncoder(mp3), LoopEncoder(pcm)
    for encoder in encoders:
        for chunk in _signal(0, 24_000):
            await encoder.encode(chunk)
    await encoders[0].finish()
    loop_thread = threading.get_ident()
    assert len(mp3.threads) == len(CHUNKS) + 1 and loop_thread not in mp3.threads
    assert pcm.threads == [loop_thread] * len(CHUNKS)
    names = {t.name for t in threading.enumerate() if t.ident in mp3.threads}
    assert names and all(name.startswith("speakwire-encode") for name in names)


async def test_ffmpeg_encoders_open_off_the_loop_thread_and_byte_casts_on_it() -> None:
    opened: dict[str, int] = {}

    def make(fmt: str) -> Encoder:
        opened[fmt] = threading.get_ident()
        return create_encoder(fmt, default_sample_rate(fmt, None, 24_000), streaming=True)

    for fmt in AUDIO_FORMATS:
        encoder = await open_encoder(fmt, functools.partial(make, fmt))
        assert encoder.format == fmt
    loop_thread = threading.get_ident()
    assert {fmt for fmt, thread in opened.items() if thread != loop_thread} == {"mp3", "opus", "aac", "flac"}


async def test_encoder_errors_surface_to_the_caller() -> None:
    with pytest.raises(BadRequestError, match="12345 Hz"):
        await open_encoder("mp3", lambda: create_encoder("mp3", 12_345, streaming=True))

    encoder = LoopEncoder(create_encoder("mp3", 24_000, streaming=True))
    await encoder.encode(np.zeros(2000, dtype=np.float32))
    await encoder.finish()
    with pytest.raises(RuntimeError, match="encode\\(\\) after finish\\(\\)"):
        await encoder.encode(np.zeros(10, dtype=np.float32))


class _HeldMp3(AvStreamEncoder):
    """The real MP3 encoder whose first encode waits until released, recording when calls start and end."""

    def __init__(self) -> None:
        super().__init__(MP3, 24_000, streaming=True)
        self.started, self.release = threading.Event(), threading.Event()
        self.calls: list[str] = []

    def encode(self, samples: Float32Array) -> bytes:
        self.calls.append("encode start")
        self.started.set()
        self.release.wait(30)
        try:
            return super().encode(samples)
        finally:
            self.calls.append("encode end")

    def finish(self) -> bytes:
        self.calls.append("finish start")
        return super().finish()


async def test_a_call_cancelled_while_encoding_finishes_before_the_next_call_starts() -> None:
    held = _HeldMp3()
    encoder = LoopEncoder(held)
    first = asyncio.create_task(encoder.encode(np.zeros(24_000, dtype=np.float32)))
    await asyncio.to_thread(held.started.wait, 30)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    finishing = asyncio.create_task(encoder.finish())
    for _ in range(20):  # give a wrongly concurrent finish() every chance to start
        await asyncio.sleep(0.005)
    assert held.calls == ["encode start"]
    held.release.set()
    await finishing
    assert held.calls == ["encode start", "encode end", "finish start"]


async def test_a_call_cancelled_before_a_thread_took_it_never_runs() -> None:
    release, started = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(30)

    holders = [encode_pool.submit(hold) for _ in range(POOL_THREADS)]
    for _ in holders:  # every pool thread is busy now
        assert await asyncio.to_thread(started.acquire, True, 30)
    ran: list[int] = []
    queued = encode_pool.submit(ran.append, 1)
    queued.future.cancel()  # as a cancelled caller's await does
    release.set()
    await asyncio.gather(*(holder.future for holder in holders))
    assert await asyncio.to_thread(queued.finished.wait, 30)
    assert ran == []
