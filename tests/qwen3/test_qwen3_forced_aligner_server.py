"""``--aligner qwen3:<dir>`` behind a real server: Qwen3-TTS's words timed by Qwen3-ForcedAligner (issue 29).

Both models are tiny random checkpoints built offline (``tiny_checkpoint``, ``support.forced_aligner``), so the
audio is babble and the times are noise; what is real is the path — the aligner loaded from its directory, each
sentence aligned once final, off the event loop, its units mapped back to the client's text — and the structure
checked here: every word of each sentence with audio (each character of Chinese), at its offsets into the
sentence, in order, inside the sentence's audio.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qwen3_testing import steer_eos
from websockets.asyncio.client import connect

from speakwire.settings import Settings
from support.live_server import LiveServer, start_server
from support.timed_stream import TimedStream

pytestmark = pytest.mark.qwen

RATE = 24000
FRAMES = {"max_new_tokens": 100, "seed": 3}
"""Random weights rarely stop on their own: a few seconds of babble per request."""


@pytest.fixture(scope="module")
def forced_aligner_server(
    tiny_checkpoints: dict[str, Path], custom_voice_engine: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    pytest.importorskip("qwen_asr", reason='pip install "speakwire[qwen,align-qwen]" && pip install --no-deps qwen-asr')
    from support.forced_aligner import build_tiny_forced_aligner

    directory = build_tiny_forced_aligner(tmp_path_factory.mktemp("forced-aligner"))
    settings = Settings(engine="qwen3", model=str(tiny_checkpoints["custom_voice"]), aligner=f"qwen3:{directory}",
                        device="cpu")  # fmt: skip
    live = start_server(settings, engine=custom_voice_engine)
    yield live
    live.stop()


async def speak(server: LiveServer, text: str, language: str) -> list[tuple[str, bytes, list[dict[str, Any]] | None]]:
    """One utterance over the vLLM-Omni WebSocket with word timestamps: (sentence, its audio, its words)."""
    config = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
              "language": language, **FRAMES}  # fmt: skip
    stream = TimedStream()  # each sentence's words matched to it by sentence_index: they come after its end
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws)
    return [(s.text, s.audio, s.words) for s in stream.in_order()]


def assert_timed(sentence: str, audio: bytes, words: list[dict[str, Any]] | None) -> list[str]:
    """Each word a piece of ``sentence`` at its own offsets, in order, inside its audio; the pieces."""
    assert words, f"a sentence with audio has its words: {sentence!r}"
    previous_end, previous_char = 0, 0
    for word in words:
        assert sentence[word["char_start"] : word["char_end"]] == word["word"]
        assert word["char_start"] >= previous_char
        assert previous_end <= word["start_ms"] <= word["end_ms"] <= len(audio) / 2 / RATE * 1000 + 1
        previous_end, previous_char = word["end_ms"], word["char_end"]
    return [word["word"] for word in words]


async def test_qwen3_forced_aligner_times_every_word_of_a_qwen3_utterance(
    forced_aligner_server: LiveServer, custom_voice_engine: Any
) -> None:
    text = "Hello there, my friend. The weather is fine today."
    with steer_eos(custom_voice_engine, after=None):  # babble to max_new_tokens: every sentence gets audio
        sentences = await speak(forced_aligner_server, text, "English")
    assert "".join(sentence for sentence, _, _ in sentences) == text
    spoken = [(sentence, audio, words) for sentence, audio, words in sentences if audio]
    assert len(spoken) == len(sentences) >= 2
    for sentence, audio, words in spoken:
        assert assert_timed(sentence, audio, words) == sentence.split()


async def test_qwen3_forced_aligner_times_chinese_per_character(
    forced_aligner_server: LiveServer, custom_voice_engine: Any
) -> None:
    text = "你好，世界。今天天气很好。"
    with steer_eos(custom_voice_engine, after=None):
        sentences = await speak(forced_aligner_server, text, "Chinese")
    assert "".join(sentence for sentence, _, _ in sentences) == text
    spoken = [(sentence, audio, words) for sentence, audio, words in sentences if audio]
    assert len(spoken) == len(sentences) >= 2
    for sentence, audio, words in spoken:
        timed = assert_timed(sentence, audio, words)
        assert all(sum(ch.isalpha() for ch in word) == 1 for word in timed)  # one character each
        assert "".join(timed) == sentence.strip()  # punctuation riding on the character before it
