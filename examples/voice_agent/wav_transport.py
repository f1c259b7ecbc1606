"""A pipecat transport for files: a microphone that speaks given audio in real time, a speaker that records.

``--question-wav`` uses it in place of the browser: ``ScriptedMicrophone.say`` plays a question into the pipeline
as 20 ms frames on the wall clock (silence before, between and after, as a live microphone gives), and
``RecordingSpeaker`` takes the bot's audio at the pace a sound card would (each write waits for the previous
frame to have played), noting when each frame played, so an interruption cuts the reply where a listener would
stop hearing it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile
import soxr
from pipecat.frames.frames import InputAudioRawFrame, OutputAudioRawFrame, StartFrame
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

FRAME_S = 0.02


def read_pcm16(path: str | Path, rate: int) -> bytes:
    """A mono audio file (WAV, FLAC, ... at any rate) as PCM16 at ``rate``."""
    samples, file_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    mono = samples.mean(axis=1)
    if file_rate != rate:
        mono = soxr.resample(mono, file_rate, rate)
    return samples_to_pcm(mono)


def trim_silence(pcm: bytes, rate: int, threshold: float = 0.01) -> bytes:
    """``pcm`` without its leading and trailing silence (10 ms windows below ``threshold`` of full scale).

    The end of a question's audio is then the end of its speech, the moment a turn's timings count from.
    """
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    window = rate // 100
    loud = [i for i in range(0, len(samples), window) if np.abs(samples[i : i + window]).max() >= threshold]
    if not loud:
        return pcm
    return samples_to_pcm(samples[loud[0] : loud[-1] + window])


def samples_to_pcm(samples: np.ndarray) -> bytes:  # type: ignore[type-arg]
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


def write_pcm16(path: str | Path, pcm: bytes, rate: int) -> None:
    soundfile.write(str(path), np.frombuffer(pcm, dtype="<i2"), rate, subtype="PCM_16")


class ScriptedMicrophone(BaseInputTransport):
    """Input audio on the wall clock: what ``say`` was given, else silence."""

    def __init__(self, params: TransportParams) -> None:
        super().__init__(params)
        self._queue: asyncio.Queue[tuple[bytes, asyncio.Future[float]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        if self._task is None:
            self._task = self.create_task(self._play())

    async def cleanup(self) -> None:
        if self._task is not None:
            await self.cancel_task(self._task)
            self._task = None
        await super().cleanup()

    async def say(self, pcm: bytes) -> float:
        """Play ``pcm`` (PCM16 at the input rate) after what is queued; the monotonic time its last frame went."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        await self._queue.put((pcm, done))
        return await done

    async def _play(self) -> None:
        step = int(self.sample_rate * FRAME_S) * 2
        silence = b"\0" * step
        clock = time.monotonic()
        audio, done, at = b"", None, 0
        while True:
            if done is None and not self._queue.empty():
                audio, done = self._queue.get_nowait()
                at = 0
            chunk = audio[at : at + step] if done is not None else silence
            at += step
            await self.push_audio_frame(
                InputAudioRawFrame(audio=chunk.ljust(step, b"\0"), sample_rate=self.sample_rate, num_channels=1)
            )
            if done is not None and at >= len(audio):
                done.set_result(time.monotonic())
                done = None
            clock += FRAME_S
            await asyncio.sleep(max(0.0, clock - time.monotonic()))


@dataclass
class Played:
    """The bot's audio as the speaker played it: each frame's bytes and when it started playing."""

    frames: list[tuple[float, bytes]] = field(default_factory=list)
    sample_rate: int = 0

    @property
    def audio(self) -> bytes:
        return b"".join(pcm for _, pcm in self.frames)

    def audio_between(self, start: float, end: float = float("inf")) -> bytes:
        return b"".join(pcm for at, pcm in self.frames if start <= at < end)


class RecordingSpeaker(BaseOutputTransport):
    """Output audio written to ``played`` at the pace of playback."""

    def __init__(self, params: TransportParams, played: Played) -> None:
        super().__init__(params)
        self.played = played
        self._free_at = 0.0

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        if self._free_at > now:
            await asyncio.sleep(self._free_at - now)  # the previous frame is still playing
        start = max(now, self._free_at)
        self.played.sample_rate = frame.sample_rate
        self.played.frames.append((start, frame.audio))
        self._free_at = start + len(frame.audio) / 2 / frame.sample_rate
        return True


class FileTransport(BaseTransport):
    """``ScriptedMicrophone`` in, ``RecordingSpeaker`` out."""

    def __init__(self, params: TransportParams) -> None:
        super().__init__()
        self.played = Played()
        self._microphone = ScriptedMicrophone(params)
        self._speaker = RecordingSpeaker(params, self.played)

    @property
    def microphone(self) -> ScriptedMicrophone:
        return self._microphone

    def input(self) -> FrameProcessor:
        return self._microphone

    def output(self) -> FrameProcessor:
        return self._speaker
