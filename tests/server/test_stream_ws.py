"""The speech stream WebSocket over a real loopback server with the real Piper voice."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time

import pytest
import soundfile as sf
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from speakwire.client.stream import SpeechStreamClient
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

PARAGRAPH = (
    "Good morning, and welcome to the show. Today we talk about streaming speech. "
    "It starts playing before the text is finished."
)


async def recv_json(ws: ClientConnection, timeout: float = 30) -> dict:
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(message, str):
            return json.loads(message)


async def collect_until(ws: ClientConnection, kind: str, timeout: float = 60) -> list[dict | bytes]:
    out: list[dict | bytes] = []
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.recv()
            item = json.loads(message) if isinstance(message, str) else message
            out.append(item)
            if isinstance(item, dict) and item.get("type") == kind:
                return out


def events_of(items: list[dict | bytes], kind: str) -> list[dict]:
    return [i for i in items if isinstance(i, dict) and i.get("type") == kind]


async def test_older_generation_session_gets_one_wav_file_per_sentence(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "wav"}))
        await ws.send(json.dumps({"type": "input.text", "text": PARAGRAPH}))
        await ws.send(json.dumps({"type": "input.done"}))
        items = await collect_until(ws, "session.done")
    starts, dones = events_of(items, "audio.start"), events_of(items, "audio.done")
    files = [i for i in items if isinstance(i, bytes)]
    assert len(starts) == len(dones) == len(files) >= 3
    assert "".join(s["sentence_text"] for s in starts) == PARAGRAPH
    assert [s["sentence_index"] for s in starts] == list(range(len(starts)))
    for start, done, data in zip(starts, dones, files, strict=True):
        assert start["format"] == "wav" and start["sample_rate"] == 24000 and start["channels"] == 1
        assert done["total_bytes"] == len(data) and done["error"] is False
        audio, rate = sf.read(io.BytesIO(data))
        assert rate == 24000 and len(audio) > 2400
    session_done = events_of(items, "session.done")[0]
    assert session_done["utterance_index"] == 0 and session_done["total_sentences"] == len(starts)
    usage = session_done["usage"]
    assert usage["characters"] == len(PARAGRAPH) and usage["audio_seconds"] > 3
    assert usage["time_to_first_audio_ms"] > 0


async def test_newer_generation_keeps_the_socket_for_several_utterances(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        for utterance in range(2):
            await ws.send(json.dumps({"type": "input.text", "text": f"Utterance number {utterance + 1}."}))
            await ws.send(json.dumps({"type": "input.done"}))
            items = await collect_until(ws, "session.done")
            assert events_of(items, "session.done")[0]["utterance_index"] == utterance
            assert sum(len(i) for i in items if isinstance(i, bytes)) > 24000
            assert all(s["utterance_index"] == utterance for s in events_of(items, "audio.start"))
            # A new config between utterances is accepted.
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                                      "speed": 1.2}))  # fmt: skip
        await ws.send(json.dumps({"type": "session.close"}))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


async def test_text_streamed_word_by_word_yields_audio_before_input_done(server: LiveServer) -> None:
    words = PARAGRAPH.split(" ")
    done_sent = asyncio.Event()
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))

        async def send_words() -> None:
            for word in words:
                await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
                await asyncio.sleep(0.05)
            await ws.send(json.dumps({"type": "input.done"}))
            done_sent.set()

        sender = asyncio.create_task(send_words())
        first = await asyncio.wait_for(ws.recv(), 30)
        while isinstance(first, str):
            first = await asyncio.wait_for(ws.recv(), 30)
        audio_before_done = not done_sent.is_set()
        await sender
        await collect_until(ws, "session.done")
    assert audio_before_done, "the first audio frame should arrive while text is still being sent"


async def test_cancel_stops_the_utterance_and_the_session_stays_usable(server: LiveServer) -> None:
    long_text = " ".join(["This is a long sentence that goes on and on."] * 30)
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": long_text}))
        await ws.send(json.dumps({"type": "input.done"}))
        while not isinstance(await asyncio.wait_for(ws.recv(), 30), bytes):
            pass
        await ws.send(json.dumps({"type": "input.cancel"}))
        items = await collect_until(ws, "input.cancelled")
        assert events_of(items, "input.cancelled")[0]["utterance_index"] == 0
        assert not events_of(items, "session.done")
        # After the ack: nothing more of utterance 0; the next utterance works.
        await ws.send(json.dumps({"type": "input.text", "text": "A fresh start."}))
        await ws.send(json.dumps({"type": "input.done"}))
        after = await collect_until(ws, "session.done")
    first_start = next(i for i, item in enumerate(after) if isinstance(item, dict) and item["type"] == "audio.start")
    assert not any(isinstance(item, bytes) for item in after[:first_start])
    assert all(e["utterance_index"] == 1 for e in after if isinstance(e, dict) and "utterance_index" in e)
    assert events_of(after, "session.done")[0]["utterance_index"] == 1


async def test_disconnect_mid_utterance_frees_its_work(server: LiveServer) -> None:
    state = server.state
    baseline_threads = threading.active_count()
    long_text = " ".join(["Nobody will listen to the end of this sentence."] * 40)
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": long_text}))
        while not isinstance(await asyncio.wait_for(ws.recv(), 30), bytes):
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (state.pipeline.active or state.pipeline.scheduler.busy):
        await asyncio.sleep(0.05)
    assert state.pipeline.active == 0
    assert state.pipeline.scheduler.busy == 0 and state.pipeline.scheduler.queued == 0
    assert threading.active_count() <= baseline_threads


async def test_bad_input_gets_error_events_and_the_session_goes_on(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "input.text", "text": "too early"}))
        assert "session.config" in (await recv_json(ws))["message"]
        await ws.send("{not json")
        assert "Invalid JSON" in (await recv_json(ws))["message"]
        await ws.send(json.dumps({"type": "dance"}))
        assert "Unknown event type" in (await recv_json(ws))["message"]
        await ws.send(b"\x00\x01")
        assert "Binary" in (await recv_json(ws))["message"]
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                                  "temperature": 0.7}))  # fmt: skip
        warning = await recv_json(ws)
        assert warning["type"] == "warning" and "temperature" in warning["message"]
        await ws.send(json.dumps({"type": "input.text", "text": 42}))
        assert (await recv_json(ws))["type"] == "error"
        await ws.send(json.dumps({"type": "input.text", "text": "Still here"}))
        await ws.send(json.dumps({"type": "session.config", "response_format": "wav"}))
        assert "input.done" in (await recv_json(ws))["message"]
        await ws.send(json.dumps({"type": "input.done"}))
        items = await collect_until(ws, "session.done")
        assert sum(len(i) for i in items if isinstance(i, bytes)) > 0


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"response_format": "wav", "stream_audio": True}, "pcm"),
        ({"response_format": "wma"}, "response_format"),
        ({"voice": "nobody"}, "nobody"),
        ({"split_granularity": "word"}, "split_granularity"),
        ({"speed": "fast"}, "speed"),
    ],
)
async def test_invalid_config_ends_the_session_with_policy_close(server: LiveServer, config: dict, needle: str) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", **config}))
        error = await recv_json(ws)
        assert error["type"] == "error" and needle in error["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_oversized_text_message_is_refused_with_close_1009(server: LiveServer) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
        await ws.send(json.dumps({"type": "input.text", "text": "a" * (128 * 1024 + 1)}))
        assert "exceeds" in (await recv_json(ws))["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_session_buffer_limit_is_enforced(server: LiveServer) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "split_granularity": "none"}))
        for _ in range(2):
            await ws.send(json.dumps({"type": "input.text", "text": "word " * 12_000}))
        items = await collect_until(ws, "error")
        assert "100000" in events_of(items, "error")[0]["message"]
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_ping_is_answered(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        pong = await ws.ping()
        await asyncio.wait_for(pong, 5)


async def test_twenty_concurrent_sessions_each_get_only_their_own_audio(server: LiveServer) -> None:
    texts = [f"Session {n} says the number {n * 7}." for n in range(20)]

    async def one(text: str) -> tuple[list[dict], bytes]:
        async with await SpeechStreamClient.connect(server.ws_url) as client:
            await client.configure(response_format="pcm", stream_audio=True, seed=5)
            result = await client.speak(text)
        return result.events, result.audio

    results = await asyncio.gather(*(one(t) for t in texts))
    # Deterministic synthesis (seed) lets us compare each session with the same text spoken alone.
    alone = await one(texts[3])
    for text, (events, audio) in zip(texts, results, strict=True):
        assert "".join(e["sentence_text"] for e in events if e["type"] == "audio.start") == text
        assert audio
    assert results[3][1] == alone[1]
    assert len({audio for _, audio in results}) == len(texts)


async def test_split_granularity_clause_and_none(server: LiveServer) -> None:
    text = (
        "After the long and tiring meeting had finally ended, everyone in the building went home quietly "
        "and slowly, and the whole office was silent for the night. Then more."
    )
    counts = {}
    for granularity in ("none", "sentence", "clause"):
        async with await SpeechStreamClient.connect(server.ws_url) as client:
            await client.configure(response_format="pcm", stream_audio=True, split_granularity=granularity)
            result = await client.speak(text)
        counts[granularity] = [len(e["sentence_text"]) for e in result.events if e["type"] == "audio.start"]
    assert len(counts["none"]) == 1
    assert len(counts["sentence"]) > 1
    # Clause mode cuts at commas too, so no segment is as long as the long sentence.
    assert max(counts["clause"]) < max(counts["sentence"])


@pytest.fixture(scope="module")
def strict_server(piper_engine: PiperEngine):  # type: ignore[no-untyped-def]
    live = start_server(Settings(api_key="sekrit", ws_config_timeout_s=0.5, ws_idle_timeout_s=1.0), engine=piper_engine)
    yield live
    live.stop()


async def test_no_config_in_time_closes_with_an_error(strict_server: LiveServer) -> None:
    async with connect(strict_server.ws_url + "?api_key=sekrit") as ws:
        error = await recv_json(ws)
        assert error["type"] == "error" and "session.config" in error["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_idle_session_is_closed_after_the_timeout(strict_server: LiveServer) -> None:
    async with connect(strict_server.ws_url + "?api_key=sekrit") as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
        error = await recv_json(ws, timeout=10)
        assert "Idle" in error["message"]
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)


async def test_api_key_is_accepted_from_header_query_or_config(strict_server: LiveServer) -> None:
    for url, headers, config in [
        (strict_server.ws_url, {"Authorization": "Bearer sekrit"}, {}),
        (strict_server.ws_url + "?api_key=sekrit", None, {}),
        (strict_server.ws_url, None, {"api_key": "sekrit"}),
    ]:
        async with connect(url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", **config}))
            await ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
            await ws.send(json.dumps({"type": "input.done"}))
            items = await collect_until(ws, "session.done")
            assert not events_of(items, "error")
    async with connect(strict_server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "api_key": "wrong"}))
        assert "API key" in (await recv_json(ws))["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_piper_warns_that_it_ignores_initial_codec_chunk_frames(server: LiveServer) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True,
                                  "initial_codec_chunk_frames": 2}))  # fmt: skip
        warning = await recv_json(ws)
        assert warning == {"type": "warning", "message": "Ignored fields: initial_codec_chunk_frames."}
