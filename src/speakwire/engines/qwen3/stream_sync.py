"""Ordering between the generation loop and code2wav on CUDA: one event per loop step, one wait per window.

The loop records an event right after the step that made a frame (``StepEvents.record``, on the stream
the step ran on) and the frame carries it (``Frame.ready``). Code2wav runs on a stream of its own
(``DecodeStream``) and, before it builds a window from a row's frames, waits on the event of the newest
frame in it: the loop's steps record their events in order on one stream, so that one wait covers
every older frame, and nothing orders the decode behind steps the loop queued after it.

On CPU there is no stream and no event: ``StepEvents.record`` gives None and the batcher has no
``DecodeStream``, so the same code runs in program order and gives the same audio.

Both are small interfaces so that a test on a machine without a GPU can stand in for the CUDA
parts (events recorded and waited on, counted) while everything else runs for real.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol


class StepEvents(Protocol):
    def record(self) -> Any:
        """An event recorded now on the current stream (the step's), or None where there are none (CPU)."""
        ...


class DecodeStream(Protocol):
    """The stream code2wav runs on."""

    def active(self) -> AbstractContextManager[Any]:
        """Make it the current stream (for the window building and the decode)."""
        ...

    def wait(self, event: Any) -> None:
        """Work queued on it from now on starts after ``event`` (``wait_event``; the host does not block)."""
        ...

    def keep(self, tensor: Any) -> None:
        """``tensor`` was allocated on another stream and is read here: keep its memory until this stream is
        past the reads (``record_stream``)."""
        ...

    def mark(self) -> Any:
        """An event recorded now on the caller's current stream (for a caller that hands over tensors it made
        itself, without a frame's event)."""
        ...


class NoEvents:
    """CPU: no events."""

    def record(self) -> None:
        return None


class CudaStepEvents:
    def __init__(self, torch: Any, device: Any) -> None:
        self._torch = torch
        self._device = torch.device(device)

    def record(self) -> Any:
        torch = self._torch
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self._device))
        return event


class CudaDecodeStream:
    def __init__(self, torch: Any, device: Any) -> None:
        self._torch = torch
        self.stream = torch.cuda.Stream(device)

    def active(self) -> AbstractContextManager[Any]:
        return self._torch.cuda.stream(self.stream)  # type: ignore[no-any-return]

    def wait(self, event: Any) -> None:
        self.stream.wait_event(event)

    def keep(self, tensor: Any) -> None:
        if tensor.is_cuda:
            tensor.record_stream(self.stream)

    def mark(self) -> Any:
        torch = self._torch
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.stream.device))
        return event


def step_events(torch: Any, device: Any) -> StepEvents:
    """The loop's events for ``device``: CUDA events there, none elsewhere."""
    return CudaStepEvents(torch, device) if torch.device(device).type == "cuda" else NoEvents()


def decode_stream(torch: Any, device: Any) -> DecodeStream | None:
    """Code2wav's own stream on CUDA; None elsewhere (it then runs in program order on its thread)."""
    return CudaDecodeStream(torch, device) if torch.device(device).type == "cuda" else None
