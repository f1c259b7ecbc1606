"""The generation loop owns its rows end to end (issue 28): it decodes their chunks, pushes the audio out, holds a
row whose reader is a lead behind, and sleeps when there is nothing to do; an utterance costs no thread.

The tiny checkpoint, the loop, code2wav and the synthesis pipeline all run for real.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest
from loop_rows import prepared
from qwen3_testing import steer_eos

from speakwire.engines.base import SynthesisRun
from speakwire.engines.registry import default_worker_count
from speakwire.errors import SpeakwireError
from speakwire.scheduler import Scheduler
from speakwire.settings import Settings
from speakwire.synthesis import AudioReady, SynthesisPipeline, UtteranceFinished

pytestmark = pytest.mark.qwen

SENTENCE = "hello world, this is a tiny test of a long answer. "
FRAME = 1920


class Recorder:
    """An ``AudioListener``: what the stream pushes, and on which threads."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.threads: set[str] = set()
        self.ended_event = threading.Event()
        self.error: SpeakwireError | None = None

    def samples(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)

    def audio(self, samples: np.ndarray, text_read: int) -> None:
        self.threads.add(threading.current_thread().name)
        self.chunks.append(samples)

    def ended(self, error: SpeakwireError | None) -> None:
        self.error = error
        self.ended_event.set()


def test_an_idle_engine_makes_no_wake_ups(custom_voice_engine: Any) -> None:
    """Before, the loop woke every 50 ms with nothing to do (and each stream's worker polled its row)."""
    engine = custom_voice_engine
    recorder = Recorder()
    stream = engine.open_audio_stream(prepared(engine, voice="ryan", language="english", seed=2, max_new_tokens=6),
                                      SynthesisRun(), recorder)  # fmt: skip
    stream.feed(SENTENCE)
    stream.finish()
    assert recorder.ended_event.wait(60) and recorder.error is None
    assert engine.loop.wait_idle(timeout=30)
    # A last turn may still be on its way as the rows end (a late code2wav hand-back, a shared engine's earlier
    # cancels): wait until the count holds still for 0.2 s (a 50 ms poller never would), then watch 0.5 s.
    turns = engine.loop.stats.turns
    for _ in range(50):
        time.sleep(0.2)
        if engine.loop.stats.turns == turns:
            break
        turns = engine.loop.stats.turns
    time.sleep(0.5)
    assert engine.loop.stats.turns == turns


def test_a_held_stream_sits_out_while_another_runs_and_goes_on_when_released(custom_voice_engine: Any) -> None:
    engine = custom_voice_engine
    held, free = Recorder(), Recorder()
    with steer_eos(engine, after=None):  # both make their whole budget
        parked = engine.open_audio_stream(
            prepared(engine, voice="ryan", language="english", seed=5, max_new_tokens=40), SynthesisRun(), held
        )
        parked.hold()  # its reader is a lead behind before it starts: none of its rows steps
        running = engine.open_audio_stream(
            prepared(engine, voice="ryan", language="english", seed=6, max_new_tokens=40), SynthesisRun(), free
        )
        for stream in (parked, running):
            stream.feed(SENTENCE)
            stream.finish()
        assert free.ended_event.wait(120) and free.error is None
        time.sleep(0.2)
        assert held.samples() == 0 and not held.ended_event.is_set()
        parked.release()
        assert held.ended_event.wait(120) and held.error is None
    assert free.samples() == held.samples() == 40 * FRAME
    # The audio came from code2wav's thread: the stream has no thread of its own.
    assert held.threads == free.threads == {"qwen3-code2wav"}
    assert engine.loop.free_slots == engine.loop.slots


def test_streams_add_no_threads_to_a_qwen3_pipeline(custom_voice_engine: Any) -> None:
    """One utterance or six at once: the same threads (a scheduler worker per slot, or per stream, before)."""
    engine = custom_voice_engine
    workers = default_worker_count(Settings(engine="qwen3"), engine.info)
    assert workers <= 2

    async def run(streams: int) -> int:
        scheduler = Scheduler(workers, reserve=False)
        peak = 0
        try:
            pipeline = SynthesisPipeline(engine, scheduler)

            async def one(seed: int) -> int:
                nonlocal peak
                request = engine.validate(
                    prepared(engine, voice="ryan", language="english", seed=seed, max_new_tokens=12)
                )
                utterance = pipeline.utterance(request, output_rate=24000)
                utterance.feed(SENTENCE)
                utterance.finish()
                samples = 0
                async for event in utterance.events():
                    peak = max(peak, threading.active_count())
                    if isinstance(event, AudioReady):
                        samples += len(event.samples)
                    elif isinstance(event, UtteranceFinished):
                        assert not event.cancelled
                utterance.close()
                return samples

            made = await asyncio.gather(*(one(seed) for seed in range(streams)))
            assert all(made)
        finally:
            scheduler.close()
        return peak

    with steer_eos(engine, after=None):
        one_stream = asyncio.run(run(1))
        six_streams = asyncio.run(run(6))
    assert six_streams == one_stream
