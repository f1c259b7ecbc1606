"""Code2wav waits on the event of the frames it decodes (issue 19 item 6), and the audio is what it was.

The loop records one event per step for the frames it made (``Frame.ready``; None on CPU) and code2wav's
stream waits on the newest frame's event before it stacks a chunk's frames and builds its window. CUDA
cannot run here, so the structural test stands in for the two CUDA parts behind ``stream_sync``'s
interfaces (the loop's ``StepEvents``, the batcher's ``DecodeStream``) with counting fakes; the model,
the loop, the text stream and code2wav all run for real.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from qwen3_testing import noise_clip

from speakwire.engines.base import SynthesisRequest

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test."
FRAME = 1920


def request_for(task: str, **extra: Any) -> SynthesisRequest:
    fields: dict[str, Any] = (
        {"voice": "ryan", "language": "english"}
        if task == "CustomVoice"
        else {"ref_audio": noise_clip(2.0), "ref_text": "Hi there!"}
    )
    return SynthesisRequest(seed=7, extra=dict(extra), **fields)


def row_codes(engine: Any, request: SynthesisRequest) -> list[Any]:
    """The row's frames straight from the loop (no decoding)."""
    from speakwire.engines.qwen3.generation_loop import RowEnd

    request = engine.prepare(engine.validate(request))
    row = engine.open_row(request)
    row.feed(TEXT)
    row.finish()
    frames = []
    while not isinstance(event := row.events.get(timeout=60), RowEnd):
        frames.append(event)
    return frames


def consumer_side_audio(engine: Any, request: SynthesisRequest, frames: list[Any]) -> list[np.ndarray]:
    """What the text stream did before: each chunk's codes stacked on the consumer's thread, decoded there."""
    import torch

    decoder = engine.open_decoder(engine.prepare(engine.validate(request)))
    sizes = itertools.chain(engine.stream_schedule, itertools.repeat(engine.stream_schedule[-1]))
    out, start = [], 0
    while start < len(frames):
        size = next(sizes)
        out.append(decoder.decode(torch.stack([f.codes for f in frames[start : start + size]])))
        start += size
    return out


@pytest.mark.parametrize("task", ["CustomVoice", "Base"])
def test_streamed_audio_is_byte_for_byte_the_consumer_side_decode(
    task: str, custom_voice_engine: Any, base_engine: Any
) -> None:
    engine = custom_voice_engine if task == "CustomVoice" else base_engine  # Base: ICL, the reference's history
    frames = row_codes(engine, request_for(task, greedy=True))
    assert len(frames) > sum(engine.stream_schedule)  # every chunk size, and the last one repeated
    streamed = [c.samples for c in engine.synthesize(TEXT, request_for(task, greedy=True))]
    before = consumer_side_audio(engine, request_for(task, greedy=True), frames)
    assert [len(c) for c in streamed] == [len(c) for c in before]
    assert b"".join(c.tobytes() for c in streamed) == b"".join(c.tobytes() for c in before)


def test_frames_carry_an_event_slot_that_is_none_on_cpu(custom_voice_engine: Any) -> None:
    from speakwire.engines.qwen3.generation_loop import Frame
    from speakwire.engines.qwen3.stream_sync import NoEvents

    assert "ready" in Frame.__dataclass_fields__
    assert isinstance(custom_voice_engine.loop.step_events, NoEvents)
    assert custom_voice_engine.decoding.stream is None  # CPU: no stream, the program-order path
    frames = row_codes(custom_voice_engine, request_for("CustomVoice", greedy=True))
    assert frames and all(frame.ready is None for frame in frames)


@dataclass(eq=False)
class FakeEvent:
    """Stands in for a ``torch.cuda.Event``: which step recorded it."""

    step: int


@dataclass
class FakeStepEvents:
    recorded: list[FakeEvent] = field(default_factory=list)

    def record(self) -> FakeEvent:
        event = FakeEvent(len(self.recorded) + 1)
        self.recorded.append(event)
        return event


@dataclass
class FakeDecodeStream:
    """Stands in for code2wav's CUDA stream; counts what is asked of it. It has no ``wait_stream``."""

    waited: list[Any] = field(default_factory=list)
    kept: int = 0
    marked: int = 0
    entered: int = 0
    depth: int = 0
    built_inside: int = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        self.entered += 1
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def wait(self, event: Any) -> None:
        assert self.depth == 1, "waits are queued on the decode stream"
        self.waited.append(event)

    def keep(self, tensor: Any) -> None:
        assert self.depth == 1
        self.kept += 1

    def mark(self) -> Any:
        self.marked += 1
        return FakeEvent(-1)


def test_code2wav_waits_only_on_the_event_of_each_chunks_newest_frame(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    engine = custom_voice_engine
    solo = [c.samples for c in engine.synthesize(TEXT, request_for("CustomVoice", greedy=True))]
    events, stream = FakeStepEvents(), FakeDecodeStream()
    monkeypatch.setattr(engine.loop, "step_events", events)
    monkeypatch.setattr(engine.decoding, "stream", stream)
    windows_built: list[int] = []
    window = StreamDecoder.window

    def counted_window(self: Any, frames: Any) -> Any:
        windows_built.append(stream.depth)  # where the stacking and the history concat run
        return window(self, frames)

    monkeypatch.setattr(StreamDecoder, "window", counted_window)
    chunks = [c.samples for c in engine.synthesize(TEXT, request_for("CustomVoice", greedy=True))]

    assert b"".join(c.tobytes() for c in chunks) == b"".join(c.tobytes() for c in solo)
    frames = [len(c) // FRAME for c in chunks]
    assert len(events.recorded) == sum(frames)  # one event per step, and this row was alone in each step
    newest = list(itertools.accumulate(frames))  # the 1-based frame (= step) that closes each chunk
    assert [event.step for event in stream.waited] == newest
    assert all(waited is events.recorded[step - 1] for waited, step in zip(stream.waited, newest, strict=True))
    assert stream.marked == 0  # every chunk came with its frames' event
    assert stream.kept == sum(frames)  # each frame's codes kept alive for the decode stream
    assert windows_built == [1] * len(chunks)  # every window built on the decode stream, after its wait


def test_code2wav_is_capped_at_load_on_cpu_and_by_setting(custom_voice_engine: Any) -> None:
    from speakwire.engines.qwen3.decode_batcher import CPU_MAX_WINDOWS

    assert custom_voice_engine.decoding.max_windows == CPU_MAX_WINDOWS
    assert custom_voice_engine.fit_decode_batch() == CPU_MAX_WINDOWS  # nothing to measure on CPU
