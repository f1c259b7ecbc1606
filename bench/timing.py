"""Time to first audio as a client sees it: read a stream of chunks or events to its end, note the first audio.

Every dialect probe (``bench.dialects``) times its vendor's client with these: the probes differ
only in how they connect and what they send, not in how first audio is read.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def first_chunk_s(
    chunks: Iterable[T],
    started: float,
    *,
    is_audio: Callable[[T], bool] = bool,
    missing: str = "no audio",
) -> float:
    """Seconds from ``started`` to the first chunk that is audio; the rest of ``chunks`` is read and dropped.

    The stream is read to its end so every request finishes normally before the probe's next one starts.

    Args:
        chunks: What the client yields, in order; the stream ends when it is exhausted.
        started: A ``time.perf_counter()`` reading taken when the request was sent.
        is_audio: Whether a chunk carries audio; by default, whether it is non-empty.
        missing: The ``RuntimeError`` message when no chunk was audio.

    Raises:
        RuntimeError: No chunk was audio.
    """
    first: float | None = None
    for chunk in chunks:
        if first is None and is_audio(chunk):
            first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(missing)
    return first


async def afirst_chunk_s(
    chunks: AsyncIterable[T],
    started: float,
    *,
    is_audio: Callable[[T], bool] = bool,
    missing: str = "no audio",
) -> float:
    """``first_chunk_s`` for an asynchronous stream (an asyncio client's events)."""
    first: float | None = None
    async for chunk in chunks:
        if first is None and is_audio(chunk):
            first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(missing)
    return first
