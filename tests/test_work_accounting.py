"""What the live capacity estimate is fed (issue 31, part 4), with the real Piper engine, pipeline and scheduler.

The estimate divides the audio the workers made by the time they were busy, and lowers the limit when a
listener was hurt (an underrun, a late start). Two ways it read wrong: a cancelled segment's audio was left
out while its compute stayed in, and a reader that parked its stream (flow control) and came back late was
counted as a listener the server let down. Counts and equalities only; no timings are asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.piper import PiperEngine
from speakwire.scheduler import Scheduler
from speakwire.synthesis import AudioReady, SynthesisPipeline, UtteranceFinished
from speakwire.synthesis.observer import PipelineObserver

LEAD_S = 0.5
"""A short lead: the first segment's audio (several seconds) stops at it, inside the segment."""
ONE_LONG_SENTENCE = (
    "The reader of this stream has stopped taking audio for a while and the server has made as much of this one "
    "long sentence as the lead allows without it and then waits"
)


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"gave up waiting for {what}")


async def test_a_segment_cancelled_half_way_counts_the_audio_it_made(piper_engine: PiperEngine) -> None:
    """A barge-in: the segment never finishes, yet its audio made is in the usage beside its busy time."""
    rate = piper_engine.info.sample_rate  # no resampling: what the workers count is what they hand over
    finished: list[float] = []
    scheduler = Scheduler(1, name="test-accounting")
    try:
        pipeline = SynthesisPipeline(piper_engine, scheduler, max_lead_s=LEAD_S)
        observer = PipelineObserver(on_segment=lambda wall_s, audio_s: finished.append(audio_s))
        utterance = pipeline.utterance(SynthesisRequest(), output_rate=rate, observer=observer)
        utterance.feed(ONE_LONG_SENTENCE)
        utterance.finish()
        await _until(lambda: utterance.waiting_for_reader, "the lead")
        await _until(lambda: scheduler.busy == 0, "the worker to be given away")
        made = utterance.made_samples
        utterance.close()  # the listener barged in: nothing more of it is made or heard
        await asyncio.sleep(0)
        usage = scheduler.usage()
    finally:
        scheduler.close()
    assert finished == []  # the segment never finished: counting at its end missed all of this audio
    assert made >= int(LEAD_S * rate)
    assert usage.busy_s > 0
    assert usage.audio_s * rate == pytest.approx(made, abs=1)


async def test_a_reader_that_comes_back_late_is_neither_an_underrun_nor_a_late_start(
    piper_engine: PiperEngine,
) -> None:
    """A slow client parks its own stream: the playback that ran out meanwhile is not the server's doing."""
    rate = piper_engine.info.sample_rate
    underruns: list[None] = []
    scheduler = Scheduler(1, name="test-accounting")
    try:
        pipeline = SynthesisPipeline(piper_engine, scheduler, max_lead_s=LEAD_S)
        observer = PipelineObserver(on_underrun=lambda: underruns.append(None))
        utterance = pipeline.utterance(SynthesisRequest(), output_rate=rate, observer=observer)
        utterance.feed(ONE_LONG_SENTENCE)
        utterance.finish()
        await _until(lambda: utterance.waiting_for_reader, "the lead")
        parked_at = utterance.made_samples
        # The reader is away for longer than the audio it was sent plays: its playback runs out meanwhile,
        # and the parked segment's next chunk is, by the old submit time, seconds late.
        await asyncio.sleep(2 * LEAD_S + 1.0)
        got = 0
        underruns_at_resume: int | None = None
        async for event in utterance.events():
            if isinstance(event, AudioReady):
                if underruns_at_resume is None and utterance.taken_samples + len(event.samples) > parked_at:
                    # The first chunk made after the reader came back: its underrun, had it been counted, is in by
                    # now. (Later chunks can be late for real on a loaded machine; that is not what this is about.)
                    underruns_at_resume = len(underruns)
                got += len(event.samples)
            elif isinstance(event, UtteranceFinished):
                assert not event.cancelled
        utterance.close()
        usage = scheduler.usage()
    finally:
        scheduler.close()
    assert utterance.made_samples > parked_at  # it did resume, in the middle of the segment
    assert got > 0
    assert underruns_at_resume == 0
    assert usage.late_starts == 0
