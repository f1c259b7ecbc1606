"""Driving rows of the Qwen3 generation loop from tests: load, request, send text, collect and compare codes.

The generation-loop and static-step tests both check a row's codes against a reference run (the package's
``generate``, a solo row, the eager step), and the step-failure tests read the ends of rows a failed step
ended; these are the steps they share, so each test reads as its behaviour.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.qwen3.generation_loop import Row, RowEnd

QUANTIZERS = 16  # codes per frame: the shape of a row that ended before its first frame


@contextlib.contextmanager
def loaded_engine(checkpoint: Path, *, max_batch: int) -> Iterator[Any]:
    """An engine of its own (not the session's shared one) with ``max_batch`` slots, closed afterwards."""
    from speakwire.engines.qwen3 import load_qwen3_engine

    engine = load_qwen3_engine(str(checkpoint), max_batch=max_batch)
    try:
        yield engine
    finally:
        engine.close()


def prepared(engine: Any, *, greedy: bool = False, sampling: Any = None, **fields: Any) -> SynthesisRequest:
    """A validated, prepared request; ``greedy`` and ``sampling`` go where the engine reads them (``extra``)."""
    extra: dict[str, Any] = {"greedy": True} if greedy else {}
    if sampling is not None:
        extra["sampling"] = sampling
    req = SynthesisRequest(**fields, extra=extra)
    ready: SynthesisRequest = engine.prepare(engine.validate(req))
    return ready


def send(row: Row, text: str) -> Row:
    """All of ``text`` at once, then the end of the text."""
    row.feed(text)
    row.finish()
    return row


def start_row(engine: Any, req: SynthesisRequest, text: str) -> Row:
    """A row opened with its whole text sent."""
    return send(engine.open_row(req), text)


def collect_to_end(row: Row, *, cancel_after: int | None = None, timeout: float = 120.0) -> tuple[np.ndarray, RowEnd]:
    """The row's codes (frames × quantizers) and its end, error ends included; cancels it once ``cancel_after``
    frames came."""
    frames: list[np.ndarray] = []
    deadline = time.monotonic() + timeout
    while True:
        event = row.events.get(timeout=max(0.1, deadline - time.monotonic()))
        if isinstance(event, RowEnd):
            return np.stack(frames) if frames else np.zeros((0, QUANTIZERS), np.int64), event
        frames.append(event.codes.cpu().numpy())
        if cancel_after is not None and len(frames) == cancel_after:
            row.cancel()


def collect(row: Row, *, cancel_after: int | None = None, timeout: float = 120.0) -> tuple[np.ndarray, str]:
    """The row's codes (frames × quantizers) and why it ended; cancels it once ``cancel_after`` frames came.

    An error end fails the test with the loop's error.
    """
    codes, end = collect_to_end(row, cancel_after=cancel_after, timeout=timeout)
    assert end.error is None, end.error
    return codes, end.reason


def solo_codes(engine: Any, req: SynthesisRequest, text: str) -> np.ndarray:
    """The codes of one row sent its whole text and collected to its end."""
    return collect(start_row(engine, req, text))[0]


def assert_rows_match(
    got: Sequence[tuple[np.ndarray, str]], expected: Sequence[np.ndarray], *, cancelled: Mapping[int, int] | None = None
) -> None:
    """Each row's codes equal its expected codes; a row in ``cancelled`` (index: frames it had when cancelled) ended
    ``"cancelled"`` and matches for those frames."""
    cancelled = cancelled or {}
    for i, ((codes, reason), want) in enumerate(zip(got, expected, strict=True)):
        if i in cancelled:
            assert reason == "cancelled"
            np.testing.assert_array_equal(codes[: cancelled[i]], want[: cancelled[i]])
        else:
            np.testing.assert_array_equal(codes, want)


def codes_of(results: Sequence[tuple[np.ndarray, str]]) -> list[np.ndarray]:
    """The codes of collected rows, without their end reasons."""
    return [codes for codes, _ in results]
