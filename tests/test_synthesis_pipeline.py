"""The synthesis pipeline on the real Piper voice: clean joins, order, cancel."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.piper import PiperEngine
from speakwire.scheduler import Scheduler
from speakwire.synthesis import AudioReady, SegmentFinished, SegmentStarted, SynthesisPipeline, UtteranceFinished

SENTENCES = [
    "The first sentence is long enough to stand alone. ",
    "The second sentence is also long enough to stand alone. ",
    "And the third one closes this little paragraph.",
]


async def speak(pipeline: SynthesisPipeline, text: str) -> tuple[list[np.ndarray], list[str]]:
    utterance = pipeline.utterance(SynthesisRequest(seed=1), output_rate=24000)
    utterance.feed(text)
    utterance.finish()
    per_segment: dict[int, list[np.ndarray]] = {}
    texts = []
    async for event in utterance.events():
        if isinstance(event, SegmentStarted):
            texts.append(event.text)
        elif isinstance(event, AudioReady):
            per_segment.setdefault(event.index, []).append(event.samples)
    utterance.close()
    return [np.concatenate(per_segment[i]) for i in sorted(per_segment)], texts


async def test_segments_join_without_dropped_or_doubled_samples(piper_engine: PiperEngine) -> None:
    scheduler = Scheduler(2)
    try:
        pipeline = SynthesisPipeline(
            piper_engine, scheduler, trim_leading_silence=False
        )  # each sentence alone starts untrimmed
        joined, texts = await speak(pipeline, "".join(SENTENCES))
        assert texts == SENTENCES
        for index, segment in enumerate(texts):
            alone, _ = await speak(pipeline, segment)
            # Each segment of the utterance is exactly the sentence spoken on its own (seeded synthesis):
            # same length, same samples up to float rounding.
            assert len(joined[index]) == len(alone[0])
            assert np.max(np.abs(joined[index] - alone[0])) < 1e-3
        # Each segment starts and ends near silence, so the joins cannot click.
        for audio in joined:
            assert abs(float(audio[0])) < 0.01 and abs(float(audio[-1])) < 0.01
    finally:
        scheduler.close()


async def test_cancel_ends_the_events_and_frees_the_worker(piper_engine: PiperEngine) -> None:
    scheduler = Scheduler(1)
    try:
        pipeline = SynthesisPipeline(piper_engine, scheduler)
        utterance = pipeline.utterance(SynthesisRequest(), output_rate=24000)
        utterance.feed(" ".join(["A long sentence that will never be finished by the engine."] * 20))
        utterance.finish()
        kinds = []
        async for event in utterance.events():
            kinds.append(type(event))
            if isinstance(event, AudioReady):
                utterance.cancel()
        assert kinds[-1] is UtteranceFinished and SegmentFinished not in kinds[1:]
        utterance.close()
        assert pipeline.active == 0
        for _ in range(100):
            if scheduler.busy == 0:
                break
            await asyncio.sleep(0.05)
        assert scheduler.busy == 0 and scheduler.queued == 0
    finally:
        scheduler.close()


async def test_text_after_a_pause_is_first_audio_again_and_does_not_refuse_new_streams(
    piper_engine: PiperEngine,
) -> None:
    # A client that pauses (an LLM thinking) lets its listener hear everything; the next text must not be
    # ordered as a refill already seconds late, which overtook every real refill and made admission refuse.
    scheduler = Scheduler(1)
    try:
        pipeline = SynthesisPipeline(piper_engine, scheduler)
        utterance = pipeline.utterance(SynthesisRequest(seed=1), output_rate=24000)
        utterance.feed("Hello there, my friend")  # "Hello there, " is a segment; "my friend" waits for more
        events = utterance.events()
        audio_s = 0.0
        async with asyncio.timeout(30):
            while not isinstance(event := await anext(events), SegmentFinished):
                if isinstance(event, AudioReady):
                    audio_s += len(event.samples) / 24000
        await asyncio.sleep(audio_s + 0.5)  # the listener has played it all; the client is still thinking
        blocker_started = asyncio.Event()
        loop = asyncio.get_running_loop()
        hold = threading.Event()
        scheduler.submit(lambda: (loop.call_soon_threadsafe(blocker_started.set), hold.wait(10)))
        await blocker_started.wait()  # the only worker is busy, so the next segment waits in the queue
        fed_at = time.monotonic()
        # Completes a second segment (at least 40 characters, and the next word known).
        utterance.feed(". Here is the rest of the answer, and it goes on for a while. And")
        assert scheduler.earliest_deadline() is not None
        assert scheduler.earliest_deadline() >= fed_at  # first audio again, not seconds late
        other = pipeline.utterance(SynthesisRequest(seed=1), output_rate=24000)  # admission still says yes
        other.close()
        hold.set()
        utterance.finish()
        async with asyncio.timeout(30):
            async for _ in events:
                pass
        utterance.close()
    finally:
        scheduler.close()
