"""Code2wav for every stream on one thread, batched: the chunks that are due together decode together.

Each stream keeps its own ``StreamDecoder`` (its history), and asks for its next chunk with
``decode``. The batcher's thread takes every request waiting, groups them by window shape
(streams at the same point of the chunk schedule have the same shape: at steady state, all
of them) and decodes each group in one batched call. While it works, new requests queue up,
so the batch grows with the load by itself; nothing waits on purpose.

On CUDA the decodes run on a stream of their own, so they overlap the talker's steps instead
of queueing behind them (and the talker's behind them) on the default stream.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from speakwire.audio.chunk import Float32Array
from speakwire.engines.qwen3.stream_decoder import DecodeWindow, StreamDecoder, decode_windows

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Request:
    window: DecodeWindow
    done: threading.Event = field(default_factory=threading.Event)
    audio: Float32Array | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class DecodeStats:
    calls: int = 0
    chunks: int = 0
    max_batch: int = 0


class DecodeBatcher:
    """One code2wav thread for a loaded model's decoder."""

    def __init__(self, decoder: Any) -> None:
        import torch

        self._torch = torch
        self._decoder = decoder
        device = decoder.device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]
        self._cond = threading.Condition()
        self._waiting: list[_Request] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = DecodeStats()

    def decode(self, state: StreamDecoder, frames: Any) -> Float32Array:
        """The audio of ``frames`` for the stream ``state`` (blocks until decoded)."""
        window = state.window(frames)
        if window is None:
            import numpy as np

            return np.zeros(0, dtype=np.float32)
        request = _Request(window)
        with self._cond:
            if self._closed:
                raise RuntimeError("decoder is closed")
            self._waiting.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="qwen3-code2wav", daemon=True)
                self._thread.start()
            self._cond.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.audio is not None
        return request.audio

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
            groups: dict[tuple[int, int, int], list[_Request]] = defaultdict(list)
            for request in batch:
                groups[request.window.shape].append(request)
            for requests in groups.values():
                self._decode(requests)

    def _decode(self, requests: list[_Request]) -> None:
        torch = self._torch
        try:
            if self._stream is not None:
                # The codes came from the talker's (default) stream: wait for them, and keep their memory alive.
                self._stream.wait_stream(torch.cuda.default_stream(self._stream.device))
                for request in requests:
                    request.window.codes.record_stream(self._stream)
                with torch.cuda.stream(self._stream):
                    audio = decode_windows(self._decoder, [r.window for r in requests])
            else:
                audio = decode_windows(self._decoder, [r.window for r in requests])
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
                request.done.set()
