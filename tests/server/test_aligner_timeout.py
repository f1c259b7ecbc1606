"""Audio never waits for an aligner (issue 29), and a hung one never holds words forever.

Over a real Piper server whose aligner (``support.aligners.StallingAligner``, registered like any aligner) blocks on
every sentence holding a trigger word until the test releases it:

- with a long bound, the sentences after a blocked one arrive whole (their audio and ``audio.done``) before its
  words, which follow once the call returns, in order and inside their audio — on the vLLM-Omni WebSocket and SSE;
- with a short bound, the utterance's audio arrives whole and in order and it completes; the sentence whose call
  hangs and those behind it go without words instead of queueing behind it; the log says why once; no second
  aligner thread is started; and once the call returns, sentences are aligned again;
- the start-up measurement's clip past its bound is not counted in ``speakwire_aligner_timeouts_total``.

Orderings and counts only: what arrived before what, never how long it took.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
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
from support.timed_stream import TimedSentence, TimedStream

TEXT = "Hello there, my friend. Meanwhile the rain keeps on falling. The weather is fine today."
TRIGGER = "Meanwhile"
BOUND_S = 2.0
"""The bound the test server gives each sentence (``--aligner-timeout``); the stand-in aligns in microseconds."""
CONFIG = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
          "seed": 1}  # fmt: skip


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


async def speak(server: LiveServer, text: str) -> list[TimedSentence]:
    """One utterance over the vLLM-Omni WebSocket with word timestamps: its sentences, their audio and words."""
    stream = TimedStream()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps(CONFIG))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws, timeout_s=60)
    return stream.in_order()


def aligner_threads() -> int:
    return sum(thread.name == "speakwire-aligner" for thread in threading.enumerate())


def assert_same_audio(got: list[TimedSentence], expected: list[TimedSentence]) -> None:
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
    for sentence in stalled:  # an aligner's words (null here when untimed) come after their sentence's end
        assert sentence.events == ["audio.start", *["audio"] * sentence.events.count("audio"), "audio.done", "words"]
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


BLOCKER = "there"
"""In the first segment of ``TEXT`` ("Hello there, ": the first cut comes early) and not in the start-up clip."""
LONG_BOUND_S = 60.0
"""Long enough that no bound passes while a test holds the aligner."""


@pytest.fixture(scope="module")
def blocking() -> Iterator[StallingAligner]:
    aligner = StallingAligner(BLOCKER)
    register_aligner("blocking", lambda: aligner, aligner.languages)
    yield aligner
    aligner.release.set()


@pytest.fixture(scope="module")
def blocking_server(piper_engine: PiperEngine, blocking: StallingAligner) -> Iterator[LiveServer]:
    live = start_server(Settings(aligner="blocking", aligner_timeout_s=LONG_BOUND_S), engine=piper_engine)
    yield live
    blocking.release.set()
    live.stop()


@pytest.fixture
def blocked(blocking: StallingAligner) -> Iterator[StallingAligner]:
    """The aligner blocks on the first sentence until the test releases it (released at the end whatever happens)."""
    blocking.release.clear()
    yield blocking
    blocking.release.set()


def assert_in_order_inside(words: list[dict[str, Any]], text: str, audio_ms: float) -> None:
    assert [w["word"] for w in words] == text.split()
    previous_end = 0
    for word in words:
        assert text[word["char_start"] : word["char_end"]] == word["word"]
        assert previous_end <= word["start_ms"] <= word["end_ms"]
        previous_end = word["end_ms"]
    assert words[-1]["end_ms"] <= audio_ms + 1


def last_sentence_ended(stream: TimedStream) -> bool:
    return any("weather" in s.text and "audio.done" in s.events for s in stream.sentences.values())


async def test_a_sentence_still_being_aligned_holds_back_no_later_sentences_audio(
    blocking_server: LiveServer, blocked: StallingAligner
) -> None:
    stream = TimedStream()
    async with connect(blocking_server.ws_url) as ws:
        await ws.send(json.dumps(CONFIG))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        # The first sentence's aligner call blocks until released; the rest of the utterance comes meanwhile.
        await stream.read(ws, until=last_sentence_ended, timeout_s=60)
        last = max(stream.sentences)
        assert last >= 2 and BLOCKER in stream.sentences[0].text
        assert ("words", 0) not in stream.order and not stream.done  # its words are still being aligned
        assert all(s.audio for s in stream.sentences.values())
        blocked.release.set()
        await stream.read(ws, timeout_s=60)
    sentences = stream.in_order()
    assert "".join(s.text for s in sentences) == TEXT
    # Every sentence's audio and end before the first sentence's words; the words then in sentence order.
    assert stream.first("words", 0) > stream.first("audio.done", last)
    arrivals = [stream.first("words", s.index) for s in sentences]
    assert arrivals == sorted(arrivals)
    assert_in_order_inside(stream.utterance_words(), TEXT, sum(s.audio_ms for s in sentences))


async def test_barge_in_while_words_are_being_aligned_counts_only_whole_sentences_sent(
    blocking_server: LiveServer, blocked: StallingAligner
) -> None:
    text = ("Hello there, my friend. This second sentence goes on for a good long while, so that the listener is "
            "still hearing it when the barge-in comes. The end.")  # fmt: skip
    stream = TimedStream()
    async with connect(blocking_server.ws_url) as ws:
        await ws.send(json.dumps(CONFIG))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws, until=lambda s: 1 in s.sentences and bool(s.sentences[1].audio), timeout_s=60)
        await ws.send(json.dumps({"type": "input.cancel"}))
        await stream.read(ws, until=lambda s: s.last["type"] == "input.cancelled", timeout_s=60)
    cancelled = stream.last
    assert not any(what == "words" for what, _ in stream.order)  # the first sentence's words never came
    sentences = stream.in_order()
    assert cancelled["audio_sent_s"] == pytest.approx(sum(len(s.audio) for s in sentences) / 2 / 24000, abs=0.002)
    # No word counts before its words come: the text runs through whole sentences whose audio all went out, the
    # first at least (its audio.done came), never into the sentence that was being spoken.
    boundaries = [len("".join(s.text for s in sentences[: n + 1])) for n in range(len(sentences))]
    spoken = cancelled["spoken_chars"]
    assert "audio.done" in sentences[0].events and spoken in boundaries and spoken >= boundaries[0]
    assert all(spoken >= boundaries[s.index] for s in sentences if "audio.done" in s.events)
    assert cancelled["spoken_text"] == text[:spoken]


def test_sse_sends_all_the_audio_before_a_blocked_sentences_words(
    blocking_server: LiveServer, server: LiveServer, blocked: StallingAligner
) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True, "seed": 1}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as response:
        reference = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    # The same seeded audio (Piper timing it itself): how much there is to wait for.
    expected = sum(len(base64.b64decode(e["audio"])) for e in reference if e["type"] == "speech.audio.delta")
    kinds: list[str] = []
    events: list[dict[str, Any]] = []
    audio = 0
    with httpx.stream("POST", f"{blocking_server.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = (json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: "))
        for event in lines:
            kinds.append(event["type"])
            if event["type"] == "speech.audio.delta":
                audio += len(base64.b64decode(event["audio"]))
            if audio == expected:
                break
        assert audio == expected and "speech.audio.words" not in kinds  # every sample before the first words
        blocked.release.set()
        events = list(lines)
    assert events[-1]["type"] == "speech.audio.done"
    assert all(e["type"] != "speech.audio.delta" or not base64.b64decode(e["audio"]) for e in events)
    words = [item for e in events if e["type"] == "speech.audio.words" for item in e["words"]]
    assert_in_order_inside(words, TEXT, audio / 2 / 24000 * 1000)


def test_the_start_up_clip_past_its_bound_is_not_counted_as_a_clients_sentence(piper_engine: PiperEngine) -> None:
    aligner = StallingAligner("Hello")  # the start-up measurement's clip says "Hello."
    register_aligner("stalling-at-start", lambda: aligner, aligner.languages)
    live = start_server(Settings(aligner="stalling-at-start", aligner_timeout_s=0.5), engine=piper_engine)
    try:
        assert aligner.calls == ["Hello."] and aligner.returned == 0  # it hung past its bound, and still does
        assert live.state.pipeline.aligner.timed_out == 0
        metrics = httpx.get(f"{live.url}/metrics", timeout=10).text
        timeouts = 'speakwire_aligner_timeouts_total{aligner="stalling",engine="piper"}'  # the aligner's own name
        assert f"{timeouts} 0.0" in metrics.splitlines()
    finally:
        aligner.release.set()
        live.stop()
