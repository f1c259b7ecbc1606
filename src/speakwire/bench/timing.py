"""Time to first audio as a client sees it: read a stream of chunks or events to its end, note the first audio.

Shared by the dialect probes in ``bench/dialects/``. They are loaded by file path (``bench/dialect_latency.py``)
and drop their own folder from ``sys.path`` so that ``deepgram.py`` does not hide the ``deepgram`` SDK, so a
helper beside them could not be imported; this package is on the path wherever they run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
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
