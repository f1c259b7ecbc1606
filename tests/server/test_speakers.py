"""SpeakerChain: speakers run in order, whatever ends the one before, and a failure is said, not swallowed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from speakwire.server.speakers import Speaker, SpeakerChain


async def test_speakers_run_in_order_even_after_one_fails_and_the_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chain = SpeakerChain()
    spoken: list[str] = []

    async def broken(_: Speaker) -> None:
        await asyncio.sleep(0.01)
        spoken.append("first")
        raise ValueError("the dialect's mapping broke")

    async def fine(_: Speaker) -> None:
        spoken.append("second")

    with caplog.at_level(logging.ERROR, logger="speakwire.server.speakers"):
        first = chain.start(None, broken)
        second = chain.start(None, fine)
        await asyncio.wait([first.task, second.task])
    assert spoken == ["first", "second"]
    assert first.task.exception() is None  # said in the log, not left on a task nobody awaits
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ValueError]
    assert not chain.busy


async def test_cancel_all_stops_a_speaker_still_waiting_for_its_turn() -> None:
    chain = SpeakerChain()
    started: list[str] = []
    hold = asyncio.Event()

    async def long(_: Speaker) -> None:
        started.append("long")
        await hold.wait()

    async def later(_: Speaker) -> None:
        started.append("later")

    chain.start(None, long)
    chain.start(None, later)
    await asyncio.sleep(0.01)
    stopped = await chain.cancel_all()
    assert len(stopped) == 2 and started == ["long"] and not chain.busy
