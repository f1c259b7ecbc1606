"""Baseten's timestamp shape on the vLLM-Omni WebSocket, and LiveKit's Baseten Qwen3-TTS plugin, unchanged.

``timestamp_type: "word"`` with ``timestamp_transport_strategy: "sync"`` puts each sentence's
``timestamp_info.word_alignment`` (``words``, ``word_start_times_seconds``, ``word_end_times_seconds``, seconds from
the sentence's first sample) in its ``audio.done``. ``livekit-plugins-baseten``'s ``TTS(model="qwen3-tts",
word_timestamps=True)`` asks for exactly that (with ``response_format: "pcm"``, ``stream_audio: true``,
``task_type: "Base"``, ``language: "Auto"``) and turns it into LiveKit ``TimedString``s. Real loopback server, real
Piper voice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import pytest
from livekit.agents.tts.tts import USERDATA_TIMED_TRANSCRIPT
from livekit.agents.types import TimedString
from livekit.plugins import baseten
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.aligners import register_spread
from support.baseten import BASETEN, alignment, speak
from support.live_server import LiveServer, start_server

TEXT = "Thanks for calling, Dr. Smith. Your order of $25 ships on Jan 5 — it's 50% off! Bye 😀"
RATE = 24000


async def test_audio_done_carries_each_sentences_word_alignment(server: LiveServer) -> None:
    sentences = await speak(server, BASETEN, TEXT)
    assert len(sentences) >= 3 and "".join(s.text for s in sentences) == TEXT
    words: list[str] = []
    for sentence in sentences:
        assert sentence.done["error"] is False
        timed = alignment(sentence)
        assert [w for w, _, _ in timed] == sentence.text.split()
        duration_s = sentence.audio_bytes / 2 / RATE
        previous_end = 0.0
        for _, start, end in timed:  # seconds from this sentence's first sample, inside its audio
            assert previous_end <= start <= end <= duration_s + 0.001
            previous_end = end
        words += [w for w, _, _ in timed]
    assert words == TEXT.split()
    assert alignment(sentences[0])[0][1] < 0.5  # each sentence starts again near zero, not on the utterance's clock
    assert alignment(sentences[-1])[0][1] < 0.5


async def test_word_alignment_is_the_word_timestamps_paths_words(server: LiveServer) -> None:
    both = await speak(server, {**BASETEN, "word_timestamps": True}, TEXT)  # vLLM-Omni's trailing audio.chunk stays
    alone = await speak(server, BASETEN, TEXT)
    assert [s.text for s in both] == [s.text for s in alone]
    for with_chunks, without in zip(both, alone, strict=True):
        assert with_chunks.chunk_words is not None
        vllm = [(w["word"], w["start_ms"] / 1000, w["end_ms"] / 1000) for w in with_chunks.chunk_words]
        assert alignment(with_chunks) == vllm
        assert alignment(without) == vllm  # seeded: the same audio, the same words and times
        assert with_chunks.audio_bytes == without.audio_bytes


async def test_word_alignment_rides_per_sentence_files_too(server: LiveServer) -> None:
    streamed = await speak(server, BASETEN, TEXT)
    files = await speak(server, {**BASETEN, "stream_audio": False, "response_format": "wav"}, TEXT)
    assert [alignment(s) for s in files] == [alignment(s) for s in streamed]


async def test_without_timestamp_type_audio_done_has_no_timestamp_info(server: LiveServer) -> None:
    sentences = await speak(server, {**BASETEN, "timestamp_type": "none"}, "Just audio.")
    assert sentences and all("timestamp_info" not in s.done for s in sentences)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [("timestamp_type", "character", "'none', 'word'"), ("timestamp_type", 1, "'none', 'word'"),
     ("timestamp_transport_strategy", "async", "'sync'"), ("timestamp_transport_strategy", "later", "'sync'")],
)  # fmt: skip
async def test_unknown_timestamp_values_get_an_error_naming_the_allowed_ones(
    server: LiveServer, field: str, value: object, allowed: str
) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({**BASETEN, field: value}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert error["type"] == "error" and error["code"] == "invalid_config" and error["param"] == field
        assert field in error["message"] and allowed in error["message"] and repr(value) in error["message"]
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 30)
        assert ws.close_code == 1008


async def speak_with_plugin(ws_url: str) -> tuple[bytes, set[int], list[TimedString]]:
    """TEXT through LiveKit's Baseten Qwen3-TTS plugin, unchanged: its audio, sample rates and timed transcript."""
    http = aiohttp.ClientSession()  # outside an agent worker the plugin needs one handed in
    # CustomVoice here; the plugin's default (Base with a named voice) is tested in test_baseten_voices.py.
    tts = baseten.TTS(model="qwen3-tts", model_endpoint=ws_url, api_key="local", voice="alloy",
                      task_type="CustomVoice", word_timestamps=True, http_session=http)  # fmt: skip
    assert tts.capabilities.aligned_transcript
    pcm, rates, timed = bytearray(), set(), []
    try:
        stream = tts.stream()
        stream.push_text(TEXT)
        stream.end_input()
        async with asyncio.timeout(120):
            async for event in stream:
                pcm += event.frame.data.tobytes()
                rates.add(event.frame.sample_rate)
                timed += event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
        await stream.aclose()
    finally:
        await tts.aclose()
        await http.close()
    return bytes(pcm), rates, timed


def assert_timed_transcript(pcm: bytes, rates: set[int], timed: list[TimedString], *, step_s: float = 0.0) -> None:
    """``step_s``: how far a word may start before the previous one's end (times are sent in millisecond steps)."""
    assert rates == {24000} and pcm
    assert [str(t).strip() for t in timed] == TEXT.split()
    audio_s = len(pcm) / 2 / RATE
    previous_end = 0.0
    for word in timed:  # rebased by the plugin onto the turn's timeline: in order, inside the audio
        assert previous_end - step_s <= word.start_time <= word.end_time <= audio_s + 0.001
        previous_end = word.end_time
    assert timed[-1].start_time > 1.0


def test_livekit_baseten_qwen3_plugin_gets_a_timed_transcript(server: LiveServer) -> None:
    assert_timed_transcript(*asyncio.run(speak_with_plugin(server.ws_url)))


@pytest.fixture(scope="module")
def aligned_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    """Piper whose words come from an aligner (``support.aligners.SpreadAligner``), after each sentence's end."""
    register_spread()
    live = start_server(Settings(aligner="spread"), engine=piper_engine)
    yield live
    live.stop()


def test_livekit_baseten_plugin_places_an_aligners_words_on_their_own_sentences(aligned_server: LiveServer) -> None:
    # The plugin rebases a sentence's words on the audio it had at the latest audio.start: with "sync" each
    # sentence's audio.done (and its words) comes before the next sentence starts, however late the aligner is.
    # A spread word ends at its sentence's last sample, rounded to the millisecond: up to 1 ms past the next start.
    assert_timed_transcript(*asyncio.run(speak_with_plugin(aligned_server.ws_url)), step_s=0.001)
