"""The utterance's lead, with counting engines: work waits for a reader that takes nothing, resumes exactly.

Both ways of driving an engine: segments (resumable, so a segment stops between chunks and continues on
another worker) and one text stream per utterance (the Qwen3 way: its worker waits). Each chunk's samples
count on from the last, so a gap or a duplicate in what the reader gets shows as a break in the count.
No timings are asserted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from speakwire.audio.chunk import AudioChunk
from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from speakwire.engines.base import EngineInfo, SynthesisRequest, SynthesisRun
from speakwire.scheduler import Scheduler
from speakwire.synthesis import AudioReady, SynthesisPipeline, Utterance, UtteranceFinished

RATE = 1000
CHUNK = 100
LEAD_S = 1.0
"""A lead of 1,000 samples: ten chunks."""


class _Counter:
    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def chunk(self) -> AudioChunk:
        with self._lock:
            start, self._next = self._next, self._next + CHUNK
        return AudioChunk(np.arange(start, start + CHUNK, dtype=np.float32), RATE)


class CountingEngine:
    """Every segment is ``chunks`` chunks of counting samples."""

    def __init__(self, chunks: int = 8) -> None:
        self.info = EngineInfo("count", "count", RATE, ("v",), resumable=True, needs_text_normalization=False)
        self._chunks = chunks
        self._counter = _Counter()

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        return request

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        return request

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> Iterator[AudioChunk]:
        for _ in range(self._chunks):
            yield self._counter.chunk()

    def close(self) -> None:
        pass


class CountingTextStream:
    def __init__(self, chunks: int) -> None:
        self.text = ""
        self._chunks = chunks
        self._counter = _Counter()
        self._finished = threading.Event()

    def feed(self, text: str) -> None:
        self.text += text

    def finish(self) -> None:
        self._finished.set()

    def cancel(self) -> None:
        self._finished.set()

    def chunks(self) -> Iterator[tuple[AudioChunk, int]]:
        self._finished.wait(10)
        for _ in range(self._chunks):
            yield self._counter.chunk(), len(self.text)


class CountingStreamingEngine(CountingEngine):
    """One generation per utterance, ``chunks`` chunks long."""

    def __init__(self, chunks: int = 60) -> None:
        super().__init__()
        self.info = EngineInfo("count", "count", RATE, ("v",), streams_text=True, needs_text_normalization=False)
        self._stream_chunks = chunks

    def open_text_stream(self, request: SynthesisRequest, run: SynthesisRun | None = None) -> CountingTextStream:
        return CountingTextStream(self._stream_chunks)


async def _until(condition: object, what: str) -> None:
    for _ in range(2000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"gave up waiting for {what}")


async def _stall_then_read(engine: CountingEngine, text: str) -> Utterance:
    scheduler = Scheduler(1, reserve=not engine.info.streams_text)
    try:
        pipeline = SynthesisPipeline(engine, scheduler, max_lead_s=LEAD_S)
        utterance = pipeline.utterance(SynthesisRequest(), output_rate=RATE)
        utterance.feed(text)
        utterance.finish()
        await _until(lambda: utterance.waiting_for_reader, "the lead")
        lead = int(LEAD_S * RATE)
        assert lead <= utterance.lead_samples <= lead + utterance.largest_chunk_samples
        made = utterance.made_samples
        await asyncio.sleep(0.05)
        assert utterance.made_samples == made  # nothing is made for a reader that takes nothing
        assert scheduler.busy == 0 or engine.info.streams_text  # a segment gave its worker away

        samples: list[np.ndarray] = []
        async for event in utterance.events():
            if isinstance(event, AudioReady):
                samples.append(event.samples)
                await asyncio.sleep(0)  # a reader that keeps up, one event at a time
            elif isinstance(event, UtteranceFinished):
                assert not event.cancelled
        audio = np.concatenate(samples)
        assert np.array_equal(audio, np.arange(len(audio), dtype=np.float32))  # no gap, no duplicate
        assert made < len(audio) == utterance.made_samples  # it had stopped well before the end
        assert utterance.peak_lead_samples <= lead + utterance.largest_chunk_samples
        utterance.close()
        return utterance
    finally:
        scheduler.close()


async def test_a_segment_stops_between_chunks_at_the_lead_and_resumes_where_it_stopped() -> None:
    # Segments of eight chunks (800 samples): the lead (1,000) is reached inside the second one.
    text = "One segment here. Two segment here. Three segment here. Four segment here."
    await _stall_then_read(CountingEngine(chunks=8), text)


async def test_a_text_stream_waits_at_the_lead_and_resumes_where_it_stopped() -> None:
    utterance = await _stall_then_read(CountingStreamingEngine(chunks=60), "Streamed text for one generation.")
    assert utterance.made_samples == 60 * CHUNK


async def test_a_cancel_while_waiting_for_the_reader_ends_the_utterance_and_frees_the_worker() -> None:
    for engine in (CountingEngine(chunks=40), CountingStreamingEngine(chunks=60)):
        scheduler = Scheduler(1, reserve=False)
        try:
            pipeline = SynthesisPipeline(engine, scheduler, max_lead_s=LEAD_S)
            utterance = pipeline.utterance(SynthesisRequest(), output_rate=RATE)
            utterance.feed("Some text to speak.")
            utterance.finish()
            await _until(lambda u=utterance: u.waiting_for_reader, "the lead")  # type: ignore[misc]
            utterance.close()
            assert utterance.done and not utterance.waiting_for_reader
            await _until(lambda s=scheduler: s.busy == 0, "the worker to be free")  # type: ignore[misc]
            assert pipeline.active == 0
        finally:
            scheduler.close()


async def test_no_lead_makes_everything_for_a_reader_that_takes_nothing() -> None:
    engine = CountingEngine(chunks=8)
    scheduler = Scheduler(1)
    try:
        pipeline = SynthesisPipeline(engine, scheduler, max_lead_s=None)
        utterance = pipeline.utterance(SynthesisRequest(), output_rate=RATE)
        utterance.feed("One segment here. Two segment here.")
        utterance.finish()
        await _until(lambda: utterance.made_samples == 2 * 8 * CHUNK, "all of it")
        assert not utterance.waiting_for_reader
        utterance.close()
    finally:
        scheduler.close()


def test_the_lead_and_the_write_stall_timeout_from_flags_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPEAKWIRE_MAX_LEAD_S", "SPEAKWIRE_WRITE_STALL_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    settings = build_settings(build_parser().parse_args(["serve"]))
    assert (settings.max_lead_s, settings.write_stall_timeout_s) == (10.0, 30.0)
    monkeypatch.setenv("SPEAKWIRE_MAX_LEAD_S", "4")
    monkeypatch.setenv("SPEAKWIRE_WRITE_STALL_TIMEOUT", "12.5")
    settings = build_settings(build_parser().parse_args(["serve"]))
    assert (settings.max_lead_s, settings.write_stall_timeout_s) == (4.0, 12.5)
    args = ["serve", "--max-lead-s", "6", "--write-stall-timeout", "0"]
    settings = build_settings(build_parser().parse_args(args))
    assert (settings.max_lead_s, settings.write_stall_timeout_s) == (6.0, 0.0)
    sagemaker = build_settings(build_parser().parse_args([*args, "--sagemaker"]))  # the same flags in SageMaker mode
    assert (sagemaker.max_lead_s, sagemaker.write_stall_timeout_s) == (6.0, 0.0)


class CappingEngine(CountingEngine):
    """Reports every segment cut at its budget, through the run's typed result (as Qwen3 does)."""

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> Iterator[AudioChunk]:
        assert run is not None  # the pipeline hands the engine its utterance's run
        run.result.capped = True
        yield from super().synthesize(text, request, run)


class CappingStreamingEngine(CountingStreamingEngine):
    def open_text_stream(self, request: SynthesisRequest, run: SynthesisRun | None = None) -> CountingTextStream:
        assert run is not None
        run.result.capped = True
        return super().open_text_stream(request, run)


@pytest.mark.parametrize(
    "engine", [CappingEngine(chunks=2), CappingStreamingEngine(chunks=2)], ids=["segments", "stream"]
)
async def test_an_engine_reported_cap_reaches_the_utterance_usage(engine: CountingEngine) -> None:
    scheduler = Scheduler(1, reserve=not engine.info.streams_text)
    try:
        utterance = SynthesisPipeline(engine, scheduler).utterance(SynthesisRequest(), output_rate=RATE)
        utterance.feed("One sentence.")
        utterance.finish()
        finished = [event async for event in utterance.events() if isinstance(event, UtteranceFinished)]
        utterance.close()
    finally:
        scheduler.close()
    assert finished[0].usage.capped and utterance.run.result.capped
