"""``first_chunk_s`` and ``afirst_chunk_s``: the dialect probes' time to first audio."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from bench.timing import afirst_chunk_s, first_chunk_s


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


async def test_afirst_chunk_s_reads_an_async_stream_to_its_end_and_raises_without_audio() -> None:
    read: list[str] = []

    async def events(kinds: tuple[str, ...]) -> AsyncIterator[str]:
        for kind in kinds:
            read.append(kind)
            yield kind

    started = time.perf_counter()
    seconds = await afirst_chunk_s(events(("start", "chunk", "stop")), started, is_audio=lambda e: e == "chunk")
    assert 0 <= seconds <= time.perf_counter() - started
    assert read == ["start", "chunk", "stop"]
    with pytest.raises(RuntimeError, match="no audio"):
        await afirst_chunk_s(events(("start", "stop")), started, is_audio=lambda e: e == "chunk")
