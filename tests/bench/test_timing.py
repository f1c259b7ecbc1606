"""``first_chunk_s``: the dialect probes' time to first audio."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from speakwire.bench.timing import first_chunk_s


def test_first_chunk_s_times_the_first_audio_chunk_and_reads_the_rest() -> None:
    read: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"", b"audio", b"more"):
            read.append(chunk)
            yield chunk

    started = time.perf_counter()
    seconds = first_chunk_s(chunks(), started)
    assert 0 <= seconds <= time.perf_counter() - started
    assert read == [b"", b"audio", b"more"]


def test_first_chunk_s_uses_is_audio_and_raises_the_missing_message_when_none_is_audio() -> None:
    message = "no audio before done"
    with pytest.raises(RuntimeError, match=message):
        first_chunk_s(["text", "done"], time.perf_counter(), is_audio=lambda event: event == "chunk", missing=message)
