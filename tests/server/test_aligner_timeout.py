"""A hung aligner never holds audio (issue 29): a sentence waits for its words at most its bound, then goes without.

Over a real Piper server whose aligner (``support.aligners.StallingAligner``, registered like any aligner) blocks on
every sentence holding a trigger word until the test releases it: the utterance's audio arrives whole and in order
and it completes; the sentences behind the stalled call go without words instead of queueing behind it; the log
says why once; no second aligner thread is started; and once the call returns, sentences are aligned again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from speakwire.aligners.registry import register_aligner
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.aligners import StallingAligner
from support.live_server import LiveServer, start_server

TEXT = "Hello there, my friend. Meanwhile the rain keeps on falling. The weather is fine today."
TRIGGER = "Meanwhile"
BOUND_S = 2.0
"""The bound the test server gives each sentence (``--aligner-timeout``); the stand-in aligns in microseconds."""
CONFIG = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
          "seed": 1}  # fmt: skip


@dataclass
class Sentence:
    text: str
    audio: bytes = b""
    words: list[dict[str, Any]] | None = None
    events: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def stalling() -> Iterator[StallingAligner]:
    aligner = StallingAligner(TRIGGER)
    register_aligner("stalling", lambda: aligner, aligner.languages)
    yield aligner
    aligner.release.set()  # a call still blocked returns, so the server's aligner thread ends


@pytest.fixture(scope="module")
def stalling_server(piper_engine: PiperEngine, stalling: StallingAligner) -> Iterator[LiveServer]:
    live = start_server(Settings(aligner="stalling", aligner_timeout_s=BOUND_S), engine=piper_engine)
    yield live
    stalling.release.set()
    live.stop()


async def speak(server: LiveServer, text: str) -> list[Sentence]:
    """One utterance over the vLLM-Omni WebSocket with word timestamps: its sentences, their audio and words."""
    sentences: list[Sentence] = []
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps(CONFIG))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        async with asyncio.timeout(60):
            while True:
                event = json.loads(await ws.recv())
                assert event["type"] != "error", event
                if event["type"] == "audio.start":
                    sentences.append(Sentence(event["sentence_text"]))
                elif event["type"] == "audio.chunk" and event["audio_b64"]:
                    sentences[-1].audio += base64.b64decode(event["audio_b64"])
                elif event["type"] == "audio.chunk":
                    sentences[-1].words = event["timestamps"]
                elif event["type"] == "session.done":
                    return sentences
                if sentences:
                    sentences[-1].events.append(event["type"])


def aligner_threads() -> int:
    return sum(thread.name == "speakwire-aligner" for thread in threading.enumerate())


def assert_same_audio(got: list[Sentence], expected: list[Sentence]) -> None:
    """Sentence by sentence, the same seeded audio (within the 1e-3 Piper allows its streamed windows)."""
    assert [s.text for s in got] == [s.text for s in expected]
    for a, b in zip(got, expected, strict=True):
        x, y = np.frombuffer(a.audio, "<i2").astype(np.int32), np.frombuffer(b.audio, "<i2").astype(np.int32)
        assert len(x) == len(y) and int(np.abs(x - y).max()) <= 33


async def test_a_stalled_aligner_never_holds_audio_and_aligning_resumes_when_it_returns(
    stalling_server: LiveServer, server: LiveServer, stalling: StallingAligner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="speakwire.synthesis.aligning")
    aligner = stalling_server.state.pipeline.aligner
    threads = aligner_threads()
    reference = await speak(server, TEXT)  # Piper's own timings, no aligner: the audio to expect
    sentences = [s.text.strip() for s in reference]
    stall = next(i for i, sentence in enumerate(sentences) if TRIGGER in sentence)
    assert 0 < stall < len(sentences) - 1
    warm_up = len(stalling.calls)  # the start-up measurement's calls

    stalled = await speak(stalling_server, TEXT)
    assert_same_audio(stalled, reference)
    assert all(s.events[0] == "audio.start" and s.events[-1] == "audio.done" for s in stalled)
    assert [s.words is not None for s in stalled] == [i < stall for i in range(len(sentences))]
    assert [[w["word"] for w in s.words] for s in stalled[:stall] if s.words] == [s.split() for s in sentences[:stall]]
    # The sentence whose call hangs went without words at its bound; those behind it were dropped, never run.
    assert stalling.calls[warm_up:] == sentences[: stall + 1]
    assert aligner.timed_out == len(sentences) - stall

    while_stuck = await speak(stalling_server, TEXT)  # the call still hangs: no words, and no wait for them
    assert_same_audio(while_stuck, reference)
    assert [s.words for s in while_stuck] == [None] * len(sentences)
    assert stalling.calls[warm_up:] == sentences[: stall + 1]
    assert aligner.timed_out == 2 * len(sentences) - stall
    assert aligner_threads() == threads  # the hung thread was not replaced by another

    stalling.release.set()
    deadline = time.monotonic() + 30
    while stalling.returned < len(stalling.calls) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    recovered = await speak(stalling_server, TEXT)
    assert_same_audio(recovered, reference)
    assert [[w["word"] for w in s.words or []] for s in recovered] == [s.split() for s in sentences]
    assert stalling.calls[warm_up:] == sentences[: stall + 1] + sentences
    assert aligner.timed_out == 2 * len(sentences) - stall
    assert aligner_threads() == threads
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{stalling_server.url}/metrics", timeout=10)).text
    timeouts = 'speakwire_aligner_timeouts_total{aligner="stalling",engine="piper"}'
    assert f"{timeouts} {float(aligner.timed_out)}" in metrics.splitlines()

    said = [r.getMessage() for r in caplog.records if r.name == "speakwire.synthesis.aligning"]
    assert len([m for m in said if "still being aligned" in m]) == 1  # why, once
    assert len([m for m in said if "aligning again" in m]) == 1
