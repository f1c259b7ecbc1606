"""Qwen3's aligned words in ElevenLabs' ``alignment`` and Cartesia's ``word_timestamps`` (issue 29).

A tiny random checkpoint behind a real server, its words from ``support.aligners.SpreadAligner`` (the
``spread_server`` of ``conftest``). An aligner's words come after their sentence's audio, which is never held for
them: ElevenLabs then sends each sentence's alignment in a message of its own (empty ``audio``) whose span runs
from the previous alignment's end to the sentence's end, so the spans add up to the audio as pipecat and LiveKit
add them up; Cartesia sends a ``timestamps`` event after the audio it times; Baseten's shape puts them in the
sentence's ``audio.done``. Either way nothing is timed past the audio already sent, also when the client barges in.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import websockets.exceptions
import websockets.sync.client
from cartesia import Cartesia
from qwen3_testing import steer_eos

from support.baseten import BASETEN, alignment, speak
from support.live_server import LiveServer

pytestmark = pytest.mark.qwen

RATE = 24000
TEXT = "Hello there, my friend. The weather is fine today."
LONG = " ".join(f"This is sentence number {n} of a long answer." for n in range(1, 7))
S16 = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE}
VOICE = {"mode": "id", "id": "alloy"}


@pytest.fixture(autouse=True)
def babble_to_the_budget(custom_voice_engine: Any) -> Iterator[None]:
    """No random EOS: every sentence gets audio (the frame budget ends each utterance), so every sentence is timed."""
    with steer_eos(custom_voice_engine, after=None):
        yield


def elevenlabs(server: LiveServer, route: str, **query: object) -> websockets.sync.client.ClientConnection:
    query = {"model_id": "eleven_flash_v2_5", "output_format": f"pcm_{RATE}", "sync_alignment": "true", **query}
    url = f"{server.url.replace('http://', 'ws://')}/v1/text-to-speech/alloy/{route}?{urlencode(query)}"
    return websockets.sync.client.connect(url, open_timeout=30, max_size=16 * 1024 * 1024)


class AlignmentClock:
    """Reads ElevenLabs messages as pipecat does: alignment times restart at each message, and its clock advances
    by each alignment's span; the audio clock by each message's audio. Checks that no alignment runs ahead."""

    def __init__(self) -> None:
        self.audio_ms = 0.0
        self.aligned_ms = 0
        self.chars: list[str] = []
        self.starts: list[int] = []
        self.words_only = 0
        """Alignments that came in a message of their own, after their audio."""

    def read(self, message: dict[str, Any]) -> None:
        audio = base64.b64decode(message.get("audio") or "")
        self.audio_ms += len(audio) / 2 / RATE * 1000
        alignment = message.get("alignment")
        assert message.get("normalizedAlignment") == alignment
        if not alignment:
            return
        self.words_only += not audio
        self.chars += alignment["chars"]
        self.starts += [self.aligned_ms + start for start in alignment["charStartTimesMs"]]
        assert all(duration >= 0 for duration in alignment["charDurationsMs"])
        self.aligned_ms += alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1]
        assert self.aligned_ms <= self.audio_ms + 1  # nothing timed past the audio sent so far


def test_elevenlabs_alignment_carries_a_qwen3_voices_aligned_words_after_their_audio(spread_server: LiveServer) -> None:
    with elevenlabs(spread_server, "stream-input") as ws:
        for text in (" ", TEXT, ""):
            ws.send(json.dumps({"text": text}))
        messages = []
        try:
            while True:
                messages.append(json.loads(ws.recv(timeout=120)))
        except websockets.exceptions.ConnectionClosed:
            pass
    clock = AlignmentClock()
    for message in messages:
        assert "error" not in message, message
        clock.read(message)
    assert "".join(clock.chars).split() == TEXT.split()  # every character placed once, in order
    assert clock.starts == sorted(clock.starts)
    assert clock.words_only >= 2  # one per sentence, after its audio
    assert abs(clock.aligned_ms - clock.audio_ms) <= 1  # the spans add up to the audio


def test_elevenlabs_close_context_mid_speech_times_nothing_past_the_audio_sent(spread_server: LiveServer) -> None:
    contexts: dict[str, AlignmentClock] = {"a": AlignmentClock(), "b": AlignmentClock()}
    with elevenlabs(spread_server, "multi-stream-input", auto_mode="true") as ws:
        for context, text in (("a", LONG), ("b", TEXT)):
            ws.send(json.dumps({"text": " ", "context_id": context}))
            ws.send(json.dumps({"text": text + " ", "context_id": context}))
            ws.send(json.dumps({"context_id": context, "flush": True}))
        ws.send(json.dumps({"context_id": "b", "close_context": True}))  # b is spoken to its end
        finals: set[str] = set()
        closed = False
        while finals != {"a", "b"}:
            message = json.loads(ws.recv(timeout=120))
            assert "error" not in message, message
            if message.get("isFinal"):
                finals.add(message["contextId"])
                continue
            clock = contexts[message["contextId"]]
            clock.read(message)
            if message["contextId"] == "a" and clock.words_only and not closed:
                ws.send(json.dumps({"context_id": "a", "close_context": True}))  # barge in once a sentence is timed
                closed = True
        ws.send(json.dumps({"close_socket": True}))
    assert closed and contexts["a"].words_only >= 1
    assert "".join(contexts["b"].chars).split() == TEXT.split()
    assert abs(contexts["b"].aligned_ms - contexts["b"].audio_ms) <= 1


async def test_baseten_word_alignment_carries_a_qwen3_voices_aligned_words(spread_server: LiveServer) -> None:
    sentences = await speak(spread_server, {**BASETEN, "word_timestamps": True}, TEXT)
    assert "".join(s.text for s in sentences) == TEXT
    assert all(s.audio_bytes for s in sentences)
    for sentence in sentences:
        timed = alignment(sentence)
        assert [w for w, _, _ in timed] == sentence.text.split()
        previous_end = 0.0
        for _, start, end in timed:  # seconds from this sentence's first sample, inside its audio
            assert previous_end <= start <= end <= sentence.audio_bytes / 2 / RATE + 0.001
            previous_end = end
        assert [w["word"] for w in sentence.chunk_words or []] == [w for w, _, _ in timed]  # vLLM-Omni's, the same


def test_cartesia_word_timestamps_carry_a_qwen3_voices_aligned_words_after_their_audio(
    spread_server: LiveServer,
) -> None:
    client = Cartesia(api_key="unused", base_url=spread_server.url,
                      websocket_base_url=spread_server.url.replace("http://", "ws://"), max_retries=0)  # fmt: skip
    with client.tts.websocket_connect() as conn:
        ctx = conn.context("words", voice=VOICE, output_format=S16, add_timestamps=True)
        ctx.push(TEXT)
        ctx.no_more_inputs()
        words: list[str] = []
        starts: list[float] = []
        ends: list[float] = []
        received_s = 0.0
        for event in ctx.receive():
            assert event.type != "error", event
            if event.type == "chunk":
                received_s += len(event.audio or b"") / 2 / RATE
            elif event.type == "timestamps":
                stamps = event.word_timestamps
                assert max(stamps.end) <= received_s + 0.001  # after the audio it times
                words += stamps.words
                starts += stamps.start
                ends += stamps.end
    assert words == TEXT.split()
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    assert all(e <= s for e, s in zip(ends, starts[1:], strict=False))
    assert starts[0] >= 0 and ends[-1] <= received_s + 0.001


def test_cartesia_cancel_mid_speech_times_nothing_past_the_audio_sent(spread_server: LiveServer) -> None:
    client = Cartesia(api_key="unused", base_url=spread_server.url,
                      websocket_base_url=spread_server.url.replace("http://", "ws://"), max_retries=0)  # fmt: skip
    with client.tts.websocket_connect() as conn:
        talker = conn.context("talker", voice=VOICE, output_format=S16, add_timestamps=True)
        talker.push(LONG)
        talker.no_more_inputs()
        received_s = 0.0
        timed = 0
        for event in talker.receive():
            if event.type == "chunk":
                received_s += len(event.audio or b"") / 2 / RATE
            elif event.type == "timestamps":
                assert max(event.word_timestamps.end) <= received_s + 0.001
                timed += len(event.word_timestamps.words)
                talker.cancel()  # barge in once a sentence is timed
                break
        other = conn.context("other", voice=VOICE, output_format=S16, add_timestamps=True)
        other.push(TEXT)
        other.no_more_inputs()
        rest = list(other.receive())
    # The SDK hands a cancelled context's late events to whoever reads next: only what was already on the wire.
    for event in (e for e in rest if e.context_id == "talker"):
        if event.type == "chunk":
            received_s += len(event.audio or b"") / 2 / RATE
        else:
            assert event.type == "timestamps" and max(event.word_timestamps.end) <= received_s + 0.001
    assert 0 < timed < len(LONG.split())
    assert rest[-1].type == "done" and rest[-1].context_id == "other"
    assert [w for e in rest if e.type == "timestamps" and e.context_id == "other" for w in e.word_timestamps.words] == (
        TEXT.split()
    )
