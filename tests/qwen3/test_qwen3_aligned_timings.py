"""Qwen3 word timings from an aligner (issue 29): a tiny random checkpoint behind a real server.

Random weights speak babble, and PocketSphinx rightly refuses to align babble with English text (its beams
prune every path, as they do for noise): over PocketSphinx these tests check that such sentences go without
words and keep their audio. The wiring (each sentence aligned once final, its words after its end with no audio
held for them, on the utterance's clock and offsets, through every dialect) is checked with
``support.aligners.SpreadAligner``, a real ``Aligner`` that spreads a sentence's words over its audio by length,
registered like any other aligner.
Accuracy is ``bench/aligner_accuracy``'s business, on real speech.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from speakwire.settings import Settings
from support.live_server import LiveServer, start_server
from support.timed_stream import TimedStream

pytest.importorskip("pocketsphinx", reason="pip install 'speakwire[align]'")

RATE = 24000
TEXT = "Hello there, my friend. The weather is fine today."
FRAMES = {"max_new_tokens": 40, "seed": 3}
"""Random weights rarely stop on their own: a few seconds of babble per request."""


@pytest.fixture(scope="module")
def aligned_server(tiny_checkpoints: dict[str, Path], custom_voice_engine: Any) -> Iterator[LiveServer]:
    settings = Settings(engine="qwen3", model=str(tiny_checkpoints["custom_voice"]), aligner="pocketsphinx")
    live = start_server(settings, engine=custom_voice_engine)
    yield live
    live.stop()


def assert_timed(text: str, words: list[dict[str, Any]], audio_ms: float) -> None:
    """Every timed word is a word of ``text`` at its own offsets, in order, inside the audio, none skipped (the
    sentences babble never reached have no audio, so no words: the words are the text's first ones)."""
    previous_end, previous_char = 0, 0
    for word in words:
        assert text[word["char_start"] : word["char_end"]] == word["word"]
        assert word["char_start"] >= previous_char
        assert previous_end <= word["start_ms"] <= word["end_ms"] <= audio_ms + 1
        previous_end, previous_char = word["end_ms"], word["char_end"]
    assert words and [w["word"] for w in words] == text.split()[: len(words)]


def sse(server: LiveServer) -> tuple[bytes, list[dict[str, Any]]]:
    """The audio and the words of an SSE speech request."""
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True,
            "language": "English", **FRAMES}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    words = [item for e in events if e["type"] == "speech.audio.words" for item in e["words"]]
    return audio, words


def test_sse_carries_aligned_words_for_a_qwen3_voice(spread_server: LiveServer) -> None:
    audio, words = sse(spread_server)
    assert_timed(TEXT, words, len(audio) / 2 / RATE * 1000)


def test_pocketsphinx_gives_babble_no_words_and_keeps_its_audio(aligned_server: LiveServer) -> None:
    audio, words = sse(aligned_server)
    assert len(audio) > RATE // 2 and words == []


async def test_vllm_omni_websocket_carries_aligned_word_timestamps(spread_server: LiveServer) -> None:
    config = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
              "language": "English", **FRAMES}  # fmt: skip
    stream = TimedStream()  # each sentence's words after its audio.done, matched to it by sentence_index
    async with connect(spread_server.ws_url) as ws:
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws)
    sentences = stream.in_order()
    assert "".join(s.text for s in sentences) == TEXT
    for sentence in sentences:
        assert "audio.done" in sentence.events and sentence.events[-1] == "words"
        if sentence.audio:  # a sentence with audio has every word timed
            assert [w["word"] for w in sentence.words or []] == sentence.text.split()
    assert_timed(TEXT, stream.utterance_words(), sum(s.audio_ms for s in sentences))


async def test_barge_in_on_qwen3_reports_only_words_whose_audio_was_sent(spread_server: LiveServer) -> None:
    text = "Hello there, my friend. The weather is fine today. " * 3
    config = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
              "language": "English", "seed": 2, "max_new_tokens": 100}  # fmt: skip
    stream = TimedStream()
    async with connect(spread_server.ws_url) as ws:
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws, until=lambda s: any(t.words for t in s.sentences.values()))
        await ws.send(json.dumps({"type": "input.cancel"}))  # barge in once a sentence was timed
        await stream.read(ws, until=lambda s: s.last["type"] == "input.cancelled")
    event = stream.last
    received = sum(len(s.audio) for s in stream.sentences.values())
    words = stream.utterance_words()
    """Every word the client got, on the utterance: offsets into the text, ms from its first sample."""
    assert event["audio_sent_s"] == pytest.approx(received / 2 / RATE, abs=0.002)
    # Characters through the last word the client got whose audio it had whole.
    heard_end = max((w["char_end"] for w in words if w["end_ms"] <= received / 2 / RATE * 1000 + 1), default=0)
    spoken = event["spoken_chars"]
    assert event["spoken_text"] == text[:spoken]
    assert 0 < heard_end <= spoken < len(text)  # the cancel came before the last sentence's audio was sent
    assert text[heard_end:spoken].strip() == ""  # nothing past the last word sent (a whole sentence: its space)
