"""Code2wav for every stream on one thread, batched: the chunks the generation loop hands over together decode together.

Each row keeps its own ``StreamDecoder`` (its history). The generation loop knows where its rows' chunks end
(``chunk_schedule``), and after each step it hands every chunk that ended in that step over at once
(``submit``), with what to do with the audio: nothing here waits for a consumer, and no consumer thread asks.
The batcher's thread takes every job waiting, builds each one's window and decodes them in as few calls as
padding allows (``buckets``): windows of different shapes share a call, padded on the right
(``decode_windows``), since streams that started a step apart, or with different histories, never have one
shape. While it works, new jobs queue up, so the batch grows with the load by itself.

Each job's callback runs on this thread once its audio is ready, and one owner's (a row's) callbacks run in
the order its jobs were submitted, a job without frames (the row's end) included: a row's last chunk is
handed on before its end.

The cap keeps a full house within memory: on CUDA ``fit_to_memory`` derives it at load from the
peak memory of one window's decode and the memory the loop's plan leaves free; on CPU it is
``CPU_MAX_WINDOWS``.

On CUDA the decodes run on a stream of their own, so they overlap the talker's steps instead
of queueing behind them (and the talker's behind them) on the default stream. A job carries
the event of its newest frame (``Frame.ready``): the decode stream waits on that event before it
stacks the frames and builds the window, and on nothing else (``stream_sync``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speakwire.audio.chunk import Float32Array
from speakwire.engines.qwen3.stream_decoder import DecodeWindow, StreamDecoder, decode_windows, largest_window
from speakwire.engines.qwen3.stream_sync import DecodeStream, decode_stream

logger = logging.getLogger(__name__)

CPU_MAX_WINDOWS = 64
"""Windows per code2wav call on CPU (memory is not what limits it there)."""
PAD_SHARE = 2
"""A call pads its windows to at most this many times its shortest (``buckets``)."""

Done = Callable[[Float32Array | None, BaseException | None], None]
"""A job's callback: its audio (None for a job without frames), or the error that ended its decode."""


@dataclass(slots=True)
class DecodeJob:
    """One chunk of one row (or, with no frames, a marker in the row's order: its end)."""

    owner: object
    """Whose order the callback keeps (the row): its jobs' callbacks run in submission order."""
    state: StreamDecoder | None
    frames: Any
    """(n, Q) codes, or a list of (Q,) frames; None: nothing to decode, only the callback in order."""
    ready: Any
    """The event of the newest frame (CUDA), or None."""
    done: Done
    group: object = None
    """The utterance the row is part of (None: the owner alone): no call holds two windows of one group, so an
    utterance's audio does not depend on how its rows' chunks met in time (a padded batch rounds differently)."""
    window: DecodeWindow | None = None
    audio: Float32Array | None = None
    error: BaseException | None = None
    finished: bool = False
    """Decoded (or failed, or nothing to decode): its callback may run once the owner's earlier ones have."""


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
        self._waiting: list[DecodeJob] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = DecodeStats()

    def submit(self, jobs: list[DecodeJob]) -> None:
        """Queue ``jobs`` (they batch together, and with whatever else is waiting); returns at once.

        A job's ``done`` runs on code2wav's thread. Without a ``ready`` event, on CUDA, the caller's current
        stream is marked now (for tensors the caller made itself)."""
        if not jobs:
            return
        for job in jobs:
            if job.frames is not None and job.ready is None and self.stream is not None:
                job.ready = self.stream.mark()
        with self._cond:
            if self._closed:
                raise RuntimeError("decoder is closed")
            self._waiting.extend(jobs)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="qwen3-code2wav", daemon=True)
                self._thread.start()
            self._cond.notify()

    def decode(self, state: StreamDecoder, frames: Any, ready: Any = None) -> Float32Array:
        """The audio of ``frames`` for the stream ``state`` (blocks until decoded; tests and benchmarks).

        ``frames``: ``(n, Q)`` codes or a list of ``(Q,)`` frames; ``ready``: the event after which they are
        complete (the newest frame's ``Frame.ready``)."""
        return self.decode_many([(state, frames, ready)])[0]

    def decode_many(self, items: list[tuple[StreamDecoder, Any, Any]]) -> list[Float32Array]:
        """``decode`` for several streams at once (queued together, so they batch together); blocks."""
        import numpy as np

        results: list[tuple[Float32Array | None, BaseException | None]] = [(None, None)] * len(items)
        finished = threading.Semaphore(0)
        jobs = []
        for index, (state, frames, ready) in enumerate(items):
            empty = len(frames) == 0 if isinstance(frames, (list, tuple)) else int(frames.numel()) == 0

            def done(audio: Float32Array | None, error: BaseException | None, index: int = index) -> None:
                results[index] = (audio, error)
                finished.release()

            jobs.append(DecodeJob(object(), state, None if empty else frames, ready, done))
        self.submit(jobs)
        for _ in jobs:
            finished.acquire()
        audio: list[Float32Array] = []
        for samples, error in results:
            if error is not None:
                raise error
            audio.append(samples if samples is not None else np.zeros(0, dtype=np.float32))
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
                batch, self._waiting = self._waiting, []
            decodable = self._windows([job for job in batch if job.frames is not None])
            for job in batch:
                job.finished = job.finished or job.frames is None
            self._hand_on(batch)
            for jobs in buckets(decodable, self.max_windows):
                self._decode(jobs)
                self._hand_on(batch)

    def _hand_on(self, batch: list[DecodeJob]) -> None:
        """Run the callbacks of the finished jobs whose owner has no earlier job still unfinished; each once."""
        blocked: set[int] = set()
        for job in batch:
            if job.done is _HANDED_ON:
                continue
            if id(job.owner) in blocked or not job.finished:
                blocked.add(id(job.owner))
                continue
            done, job.done = job.done, _HANDED_ON
            try:
                done(job.audio, job.error)
            except Exception:  # an owner's callback must not take code2wav down for every other stream
                logger.exception("qwen3: a code2wav callback failed")
            job.audio = None

    def _windows(self, batch: list[DecodeJob]) -> list[DecodeJob]:
        """Build each job's window (on the decode stream, after its frames' event); those that fail end."""
        built = []
        stream = self.stream
        for job in batch:
            assert job.state is not None
            try:
                if stream is None:
                    job.window = job.state.window(job.frames)
                else:
                    with stream.active():
                        if job.ready is not None:
                            stream.wait(job.ready)
                        frames = job.frames
                        for tensor in frames if isinstance(frames, (list, tuple)) else (frames,):
                            stream.keep(tensor)  # made on the loop's stream, read on this one
                        job.window = job.state.window(frames)
                if job.window is None:
                    raise RuntimeError("no frames to decode")
                built.append(job)
            except BaseException as exc:
                logger.exception("qwen3: code2wav could not build a window")
                job.error = exc
                job.finished = True
        return built

    def _decode(self, jobs: list[DecodeJob]) -> None:
        windows = [job.window for job in jobs]
        try:
            if self.stream is not None:
                with self.stream.active():
                    audio = decode_windows(self._decoder, windows)  # type: ignore[arg-type]
            else:
                audio = decode_windows(self._decoder, windows)  # type: ignore[arg-type]
            for job, samples in zip(jobs, audio, strict=True):
                job.audio = samples
        except BaseException as exc:
            logger.exception("qwen3: code2wav failed for %d chunks", len(jobs))
            for job in jobs:
                job.error = exc
        finally:
            self.stats.calls += 1
            self.stats.chunks += len(jobs)
            self.stats.max_batch = max(self.stats.max_batch, len(jobs))
            for job in jobs:
                job.window = None
                job.finished = True


def _handed_on(audio: Float32Array | None, error: BaseException | None) -> None:
    """The callback of a job whose callback already ran."""


_HANDED_ON: Done = _handed_on


def buckets(requests: list[DecodeJob], cap: int) -> list[list[DecodeJob]]:
    """The requests in decode calls: shortest first, each call at most ``cap`` windows of at most
    ``PAD_SHARE`` times its shortest span (frames through the audio-rate part; shorter ones are padded).

    Shortest first: a new stream's first chunk (a couple of frames, no history) does not wait behind the
    long chunks of streams that have audio buffered; a bound on the padding keeps it from costing more
    than the calls it saves. Two windows of one group (``DecodeJob.group``) never share a call."""
    ordered = sorted(requests, key=lambda request: _span(request.window))
    calls: list[list[DecodeJob]] = []
    groups: list[set[int]] = []
    first_open = 0
    """Calls before this one are closed: their shortest span is too short for what comes (sorted by span)."""
    for request in ordered:
        span = _span(request.window)
        group = id(request.group if request.group is not None else request.owner)
        while first_open < len(calls) and span > PAD_SHARE * _span(calls[first_open][0].window):
            first_open += 1
        for call, members in zip(calls[first_open:], groups[first_open:], strict=True):
            if len(call) < cap and group not in members:
                call.append(request)
                members.add(group)
                break
        else:
            calls.append([request])
            groups.append({group})
    return calls


def _span(window: DecodeWindow | None) -> int:
    assert window is not None
    return int(window.codes.shape[1]) - window.latent_skip


def windows_in(free_bytes: int, per_window: int, ceiling: int) -> int:
    """Windows of ``per_window`` bytes that fit in ``free_bytes``: at least 1, at most ``ceiling``."""
    return max(1, min(int(ceiling), math.floor(max(free_bytes, 0) / max(per_window, 1))))
