"""Code2wav for every stream on one thread, batched: the chunks that are due together decode together.

Each stream keeps its own ``StreamDecoder`` (its history), and asks for its next chunk with
``decode``. The batcher's thread takes every request waiting, builds each one's window and decodes
them in as few calls as padding allows (``buckets``): windows of different shapes share a call,
padded on the right (``decode_windows``), since streams that started a step apart, or with
different histories, never have one shape. The generation loop ends the chunks of streams that
are nearly due together with the one that is (``chunk_schedule``), so the requests of one step
arrive together; code2wav waits for the announced ones (``expect``), but at most ``GATHER_S`` from
the first of them. While it works, new requests queue up, so the batch grows with the load by itself.

The cap keeps a full house within memory: on CUDA ``fit_to_memory`` derives it at load from the
peak memory of one window's decode and the memory the loop's plan leaves free; on CPU it is
``CPU_MAX_WINDOWS``.

On CUDA the decodes run on a stream of their own, so they overlap the talker's steps instead
of queueing behind them (and the talker's behind them) on the default stream. A request carries
the event of its newest frame (``Frame.ready``): the decode stream waits on that event before it
stacks the frames and builds the window, and on nothing else (``stream_sync``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from speakwire.audio.chunk import Float32Array
from speakwire.engines.qwen3.stream_decoder import DecodeWindow, StreamDecoder, decode_windows, largest_window
from speakwire.engines.qwen3.stream_sync import DecodeStream, decode_stream

logger = logging.getLogger(__name__)

CPU_MAX_WINDOWS = 64
"""Windows per code2wav call on CPU (memory is not what limits it there)."""
PAD_SHARE = 2
"""A call pads its windows to at most this many times its shortest (``buckets``)."""
GATHER_S = 0.01
"""How long code2wav waits, from the first of a step's announced chunks (``expect``), for the rest of them
before it decodes what came."""


@dataclass(slots=True)
class _Request:
    state: StreamDecoder
    frames: Any
    """(n, Q) codes, or a list of (Q,) frames."""
    ready: Any
    """The event of the newest frame (CUDA), or None."""
    tag: int | None = None
    """The loop step whose chunk ends this request brings (``expect``), or None."""
    arrived: float = 0.0
    """When it was queued (``time.monotonic``): a step's gather ends ``GATHER_S`` after its first came."""
    window: DecodeWindow | None = None
    done: threading.Event = field(default_factory=threading.Event)
    audio: Float32Array | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class DecodeStats:
    calls: int = 0
    chunks: int = 0
    max_batch: int = 0


class DecodeBatcher:
    """One code2wav thread for a loaded model's decoder.

    Args:
        decoder: ``Qwen3TTSTokenizerV2Decoder``.
        max_windows: Most windows in one decode call (a group of one shape is split into calls of at most
            this many); default ``CPU_MAX_WINDOWS`` until ``fit_to_memory`` sets it.
    """

    def __init__(self, decoder: Any, max_windows: int | None = None) -> None:
        import torch

        if max_windows is not None and max_windows < 1:
            raise ValueError(f"max_windows must be at least 1, got {max_windows}")
        self._torch = torch
        self._decoder = decoder
        self.stream: DecodeStream | None = decode_stream(torch, decoder.device)
        """Code2wav's own stream on CUDA; None on CPU."""
        self.max_windows = max_windows or CPU_MAX_WINDOWS
        self._cond = threading.Condition()
        self._waiting: list[_Request] = []
        self._expected: dict[int, int] = {}
        """Per announced step, the chunk requests still on their way."""
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = DecodeStats()

    def decode(self, state: StreamDecoder, frames: Any, ready: Any = None, tag: int | None = None) -> Float32Array:
        """The audio of ``frames`` for the stream ``state`` (blocks until decoded).

        ``frames``: ``(n, Q)`` codes or a list of ``(Q,)`` frames; ``ready``: the event after which they are
        complete (the newest frame's ``Frame.ready``). Without one, on CUDA, the caller's current stream is
        marked now (for tensors the caller made itself). ``tag``: the step whose announced chunk this is
        (``expect``; ``Frame.step`` of a chunk end the loop announced, ``Frame.announced``), or None.
        """
        return self.decode_many([(state, frames, ready)], tag)[0]

    def expect(self, tag: int, count: int) -> None:
        """``count`` chunk requests tagged ``tag`` are on their way (the loop ended that many chunks in step
        ``tag``): once one of them is here, code2wav waits for the others (at most ``GATHER_S`` after the first
        came) so that they share a call. Their consumers are separate threads that wake a moment apart; taken
        as they came, the first one was often decoded alone and the rest waited behind it. The loop leaves out
        rows whose consumer is away (``readable_ends``: waiting for its listener at the lead, or not yet on
        that row), yet one may still be late (its thread is slow, it is working through a backlog of older
        chunks, or it is gone), so the cap runs from the first arrival, not
        the latest: consumers trickling in must not hold the first one any longer than that."""
        with self._cond:
            self._expected[tag] = self._expected.get(tag, 0) + count

    def decode_many(self, items: list[tuple[StreamDecoder, Any, Any]], tag: int | None = None) -> list[Float32Array]:
        """``decode`` for several streams at once (queued together, so they batch together)."""
        import numpy as np

        requests: list[_Request | None] = []
        for state, frames, ready in items:
            empty = len(frames) == 0 if isinstance(frames, (list, tuple)) else int(frames.numel()) == 0
            if empty:
                requests.append(None)
                continue
            if ready is None and self.stream is not None:
                ready = self.stream.mark()
            requests.append(_Request(state, frames, ready, tag))
        queued = [r for r in requests if r is not None]
        if queued:
            with self._cond:
                if self._closed:
                    raise RuntimeError("decoder is closed")
                now = time.monotonic()
                for arrived in queued:
                    arrived.arrived = now
                self._waiting.extend(queued)
                if tag is not None and tag in self._expected:  # never below 0: an unannounced one stands for none
                    self._expected[tag] = max(0, self._expected[tag] - len(queued))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="qwen3-code2wav", daemon=True)
                    self._thread.start()
                self._cond.notify()
        audio: list[Float32Array] = []
        for request in requests:
            if request is None:
                audio.append(np.zeros(0, dtype=np.float32))
                continue
            request.done.wait()
            if request.error is not None:
                raise request.error
            assert request.audio is not None
            audio.append(request.audio)
        return audio

    def fit_to_memory(self, free_bytes: int, *, frames: int, ceiling: int) -> int:
        """Set ``max_windows`` from ``free_bytes`` and one window's measured peak (CUDA; see
        ``measure_window_bytes``), at most ``ceiling`` (the streams that can be decoding at once); logged."""
        per_window = self.measure_window_bytes(frames)
        self.max_windows = windows_in(free_bytes, per_window, ceiling)
        logger.info(
            "qwen3: code2wav batches at most %d windows (%.1f MiB per %d-frame window measured; %.2f GiB free for it)",
            self.max_windows, per_window / 2**20, frames, max(free_bytes, 0) / 2**30,
        )  # fmt: skip
        return self.max_windows

    def measure_window_bytes(self, frames: int) -> int:
        """Peak device memory of decoding one window of the largest shape for ``frames`` new frames (CUDA)."""
        torch = self._torch
        device = self._decoder.device
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        assert self.stream is not None
        with self.stream.active():
            decode_windows(self._decoder, [largest_window(self._decoder, frames)])
        torch.cuda.synchronize(device)
        return max(1, int(torch.cuda.max_memory_allocated(device)) - int(base))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed and not self._waiting:
                    return
                self._gather()
                batch, self._waiting = self._waiting, []
                newest = max((r.tag for r in batch if r.tag is not None), default=None)
                if newest is not None:  # what has not come for these steps (or older ones) is not waited for
                    self._expected = {tag: left for tag, left in self._expected.items() if tag > newest}
            for requests in buckets(self._windows(batch), self.max_windows):
                self._decode(requests)

    def _gather(self) -> None:
        """With the lock held: wait while chunks announced for the waiting requests' steps are still coming,
        until ``GATHER_S`` after the first of them came (a consumer still missing then is late: its thread is
        slow, or it is gone)."""
        while not self._closed:
            first = min(
                (r.arrived for r in self._waiting if r.tag is not None and self._expected.get(r.tag, 0) > 0),
                default=None,
            )
            if first is None:
                return
            left = first + GATHER_S - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _windows(self, batch: list[_Request]) -> list[_Request]:
        """Build each request's window (on the decode stream, after its frames' event); those that fail end."""
        built = []
        stream = self.stream
        for request in batch:
            try:
                if stream is None:
                    request.window = request.state.window(request.frames)
                else:
                    with stream.active():
                        if request.ready is not None:
                            stream.wait(request.ready)
                        frames = request.frames
                        for tensor in frames if isinstance(frames, (list, tuple)) else (frames,):
                            stream.keep(tensor)  # made on the loop's stream, read on this one
                        request.window = request.state.window(frames)
                if request.window is None:
                    raise RuntimeError("no frames to decode")
                built.append(request)
            except BaseException as exc:
                logger.exception("qwen3: code2wav could not build a window")
                request.error = exc
                request.done.set()
        return built

    def _decode(self, requests: list[_Request]) -> None:
        windows = [r.window for r in requests]
        try:
            if self.stream is not None:
                with self.stream.active():
                    audio = decode_windows(self._decoder, windows)  # type: ignore[arg-type]
            else:
                audio = decode_windows(self._decoder, windows)  # type: ignore[arg-type]
            for request, samples in zip(requests, audio, strict=True):
                request.audio = samples
        except BaseException as exc:
            logger.exception("qwen3: code2wav failed for %d chunks", len(requests))
            for request in requests:
                request.error = exc
        finally:
            self.stats.calls += 1
            self.stats.chunks += len(requests)
            self.stats.max_batch = max(self.stats.max_batch, len(requests))
            for request in requests:
                request.window = None
                request.done.set()


def buckets(requests: list[_Request], cap: int) -> list[list[_Request]]:
    """The requests in decode calls: shortest first, each call at most ``cap`` windows of at most
    ``PAD_SHARE`` times its shortest span (frames through the audio-rate part; shorter ones are padded).

    Shortest first: a new stream's first chunk (a couple of frames, no history) does not wait behind the
    long chunks of streams that have audio buffered; a bound on the padding keeps it from costing more
    than the calls it saves."""
    ordered = sorted(requests, key=lambda request: _span(request.window))
    calls: list[list[_Request]] = []
    for request in ordered:
        span = _span(request.window)
        if calls and len(calls[-1]) < cap and span <= PAD_SHARE * _span(calls[-1][0].window):
            calls[-1].append(request)
        else:
            calls.append([request])
    return calls


def _span(window: DecodeWindow | None) -> int:
    assert window is not None
    return int(window.codes.shape[1]) - window.latent_skip


def windows_in(free_bytes: int, per_window: int, ceiling: int) -> int:
    """Windows of ``per_window`` bytes that fit in ``free_bytes``: at least 1, at most ``ceiling``."""
    return max(1, min(int(ceiling), math.floor(max(free_bytes, 0) / max(per_window, 1))))
