"""Word timings over our own protocols, on a real loopback server with the real Piper voice.

vLLM-Omni's WebSocket (``word_timestamps: true``: JSON ``audio.chunk`` frames, then one per sentence with the
words), SSE on ``POST /v1/audio/speech`` (``speech.audio.words``), and what ``input.cancelled`` says was heard.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from support.live_server import LiveServer
from support.timed_stream import TimedStream

TEXT = "Thanks for calling, Dr. Smith. Your order of $25 ships on Jan 5 — it's 50% off! Bye 😀"
RATE = 24000
CLIENT = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "clients" / "vllm-omni"
CONFIG = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "word_timestamps": True,
          "seed": 1}  # fmt: skip


@dataclass
class Word:
    text: str
    char_start: int
    char_end: int
    start_ms: int
    end_ms: int


@dataclass
class Spoken:
    sentences: list[str]
    words: list[Word]
    """On the utterance: offsets into the whole text, milliseconds from its first sample."""
    audio_ms: float
    sentence_ms: list[float]


async def speak(server: LiveServer, pieces: list[str]) -> Spoken:
    """One utterance of ``pieces``, each sentence's words matched to it by ``sentence_index`` (``TimedStream``)."""
    stream = TimedStream()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps(CONFIG))
        for piece in pieces:
            await ws.send(json.dumps({"type": "input.text", "text": piece}))
        await ws.send(json.dumps({"type": "input.done"}))
        await stream.read(ws)
    sentences = stream.in_order()
    words = [Word(w["word"], w["char_start"], w["char_end"], w["start_ms"], w["end_ms"])
             for w in stream.utterance_words()]  # fmt: skip
    audio_ms = sum(len(s.audio) for s in sentences) / 2 / RATE * 1000
    return Spoken([s.text for s in sentences], words, audio_ms, [s.audio_ms for s in sentences])


def assert_covers(text: str, spoken: Spoken) -> None:
    assert [w.text for w in spoken.words] == text.split()
    previous_end = 0
    for word in spoken.words:
        assert text[word.char_start : word.char_end] == word.text
        assert previous_end <= word.start_ms <= word.end_ms
        previous_end = word.end_ms
    assert spoken.words[-1].end_ms <= spoken.audio_ms + 1


async def test_websocket_word_timestamps_cover_every_word_in_order(server: LiveServer) -> None:
    spoken = await speak(server, [TEXT])
    assert "".join(spoken.sentences) == TEXT
    assert_covers(TEXT, spoken)
    by_text = {w.text: w for w in spoken.words}
    assert by_text["$25"].end_ms - by_text["$25"].start_ms > 500  # "twenty-five dollars"
    assert all(w.end_ms > w.start_ms for w in spoken.words if w.text != "—")


async def test_websocket_word_timestamps_are_the_same_for_text_sent_word_by_word(server: LiveServer) -> None:
    whole = await speak(server, [TEXT])
    pieces = [word + " " for word in TEXT.split(" ")]
    pieces[-1] = pieces[-1].rstrip()
    by_word = await speak(server, pieces)
    assert_covers(TEXT, by_word)
    assert [(w.text, w.char_start, w.char_end) for w in by_word.words] == [
        (w.text, w.char_start, w.char_end) for w in whole.words
    ]
    if by_word.sentences == whole.sentences:  # the same cuts (the segmenter promises it) give the same audio
        assert by_word.words == whole.words


async def test_word_timestamps_need_streamed_pcm(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({**CONFIG, "stream_audio": False}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert error["type"] == "error" and "word_timestamps" in error["message"]
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 30)
        assert ws.close_code == 1008


async def test_input_cancelled_says_how_much_of_the_text_was_sent_as_audio(server: LiveServer) -> None:
    text = " ".join(["This sentence is long enough to keep the engine busy for a while."] * 12)
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({**CONFIG, "word_timestamps": False, "seed": 1}))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        received = 0
        async with asyncio.timeout(120):
            while received < RATE * 2 * 2:  # two seconds of audio, then barge in
                message = await ws.recv()
                if isinstance(message, bytes):
                    received += len(message)
            await ws.send(json.dumps({"type": "input.cancel"}))
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    received += len(message)
                    continue
                event = json.loads(message)
                if event["type"] == "input.cancelled":
                    break
    assert event["utterance_index"] == 0
    assert event["audio_sent_s"] == pytest.approx(received / 2 / RATE, abs=0.002)
    spoken = event["spoken_chars"]
    assert 0 < spoken < len(text)
    assert event["spoken_text"] == text[:spoken]
    assert text[spoken] == " " or text[spoken - 1] == " "  # it ends with a whole word
    assert len(event["spoken_text"].split()) >= 4  # two seconds of this voice say a handful of words


def sse_events(server: LiveServer, body: dict[str, object]) -> list[dict[str, object]]:
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def test_sse_words_events_cover_the_input(server: LiveServer) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True, "seed": 1}
    events = sse_events(server, body)
    assert events[-1]["type"] == "speech.audio.done"
    audio = b"".join(base64.b64decode(str(e["audio"])) for e in events if e["type"] == "speech.audio.delta")
    items = [item for e in events if e["type"] == "speech.audio.words" for item in e["words"]]  # type: ignore[attr-defined]
    words = [Word(i["word"], i["char_start"], i["char_end"], i["start_ms"], i["end_ms"]) for i in items]
    assert_covers(TEXT, Spoken([TEXT], words, len(audio) / 2 / RATE * 1000, []))
    # Each words event follows the delta whose audio its first word starts in.
    heard = 0.0
    for event in events:
        if event["type"] == "speech.audio.delta":
            heard += len(base64.b64decode(str(event["audio"]))) / 2 / RATE * 1000
        elif event["type"] == "speech.audio.words":
            assert all(item["start_ms"] <= heard + 1 for item in event["words"])  # type: ignore[attr-defined]


def test_sse_without_word_timestamps_has_no_words_events(server: LiveServer) -> None:
    events = sse_events(server, {"input": "Just audio.", "response_format": "pcm", "stream_format": "sse"})
    assert {e["type"] for e in events} == {"speech.audio.delta", "speech.audio.done"}


@pytest.mark.skipif(not CLIENT.exists(), reason="../shared/reference/clients is not checked out")
def test_vllm_omni_example_client_gets_word_timestamps_unchanged(server: LiveServer, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(CLIENT / "streaming_speech_client.py"), "--url", server.ws_url, "--text", TEXT,
         "--output-dir", str(tmp_path), "--stream-audio", "--response-format", "pcm", "--word-timestamps"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout and "0 bytes, 0 timestamp(s)" not in result.stdout, result.stdout
    saved = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("sentence_*_timestamps.json"))]
    assert saved and " ".join(s["covered_text"] for s in saved) == " ".join(TEXT.split())
    assert "".join(s["sentence_text"] for s in saved) == TEXT
