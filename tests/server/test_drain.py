"""Scale-in without cutting a sentence (server.drain), over a real ``speakwire serve`` process and SIGTERM.

Orderings and counts only, no timings: an utterance is kept in flight by holding its ``input.done`` back until
the test has seen what it wants, so nothing depends on how fast this machine synthesizes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart

from speakwire.server.drain import drain
from speakwire.settings import Settings
from support.live_server import LiveServer, free_port, start_server

SLOW_RCVBUF = 16 * 1024
"""A slow reader's receive buffer: small, so what it has not read stays on the server's side."""
SLOW_MSS = 1448
"""A slow reader's segment size, Ethernet's rather than loopback's 64 KiB: Linux sizes the server's send buffer
in segments, so its kernel holds ~0.6 MB for this reader (``ss -tm``), not the 4 MB a whole download fitted in."""
SLOW_READER_LIMIT = 16 * 1024
"""A slow reader's asyncio buffer stops reading the socket at twice this (a 1 MiB limit let 2 MiB in)."""
SLOW_READ_BYTES_S = 500_000
"""A slow download's pace: most of the body is still on the server's side when the grace after a drain
(``GRACE_AFTER_DRAIN_S``, 2 s) is over, and all of it comes well within the drain timeout."""
PLAYBACK_BYTES_S = 60_000
"""A Wyoming client reading about as fast as it plays (Piper's 22 kHz 16-bit mono is 44 kB/s)."""
AHEAD_S = 5.0
"""How long the slow Wyoming readers take nothing before the signal, so the server gets as far ahead of them as it
goes with a client playing a long reply in real time: its socket buffers full, then ``max_lead_s`` queued."""
SENTENCES = ["The drain lets this sentence finish. ", "And this one, whose end comes after the signal."]
LONG_TEXT = "A long reply that is still being spoken when the drain time runs out. " * 120


@contextmanager
def serve(tmp_path: Path, **env: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    port = free_port()
    log = tmp_path / "server.log"
    environ = {**os.environ, "SPEAKWIRE_MAX_STREAMS": "8", **env}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "speakwire", "serve", "--port", str(port), "--seed", "7"],
            stdout=out, stderr=subprocess.STDOUT, env=environ,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield url, process, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def wait_draining(url: str) -> httpx.Response:
    """/ready once the SIGTERM has landed (200 until then)."""
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            ready = await client.get(f"{url}/ready")
            if ready.status_code == 503:
                return ready
            await asyncio.sleep(0.02)


async def wait_logged(log: Path, text: str) -> None:
    """Until the server's log has ``text`` (a server that stops listening soon after cannot be asked /ready)."""
    while text not in await asyncio.to_thread(log.read_text):
        await asyncio.sleep(0.02)


@asynccontextmanager
async def stream_session(url: str) -> AsyncIterator[ClientConnection]:
    async with connect(url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        yield ws


async def receive_until_closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int, int | None]:
    """JSON events, audio bytes, and the close code, until the server closes."""
    events: list[dict[str, Any]] = []
    audio = 0
    try:
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                audio += len(message)
            else:
                events.append(json.loads(message))
    except ConnectionClosed as exc:
        return events, audio, exc.rcvd.code if exc.rcvd else None


async def first_event(ws: ClientConnection, kind: str) -> None:
    while True:
        message = await ws.recv()
        if isinstance(message, str) and json.loads(message)["type"] == kind:
            return


async def wyoming_until_closed(client: AsyncTcpClient) -> list[Event]:
    """Wyoming events until the server closes the connection."""
    events: list[Event] = []
    while (event := await asyncio.wait_for(client.read_event(), 60)) is not None:
        events.append(event)
    return events


async def wyoming_until(client: AsyncTcpClient, kind: str) -> list[Event]:
    events: list[Event] = []
    while not events or events[-1].type != kind:
        event = await asyncio.wait_for(client.read_event(), 60)
        assert event is not None, [e.type for e in events]
        events.append(event)
    return events


def assert_no_traceback(log: str) -> None:
    assert "Traceback" not in log and "CancelledError" not in log, log


def exit_code(process: subprocess.Popen[bytes], log: Path) -> int:
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server still running after the drain:\n{log.read_text()}")


async def test_sigterm_lets_streams_in_flight_finish_and_refuses_new_ones(tmp_path: Path) -> None:
    with serve(tmp_path) as (url, process, log):
        speech = {"model": "tts-1", "voice": "alloy", "input": "".join(SENTENCES), "response_format": "pcm"}
        async with httpx.AsyncClient(timeout=60) as http:
            reference = (await http.post(f"{url}/v1/audio/speech", json=speech)).content  # same seed: same bytes
            async with stream_session(url) as ws, http.stream("POST", f"{url}/v1/audio/speech", json=speech) as body:
                # In flight at SIGTERM: a WebSocket utterance whose input.done has not come (its first sentence
                # speaks once the next one begins; the last waits for the end of its text), and an HTTP stream.
                for text in SENTENCES:
                    await ws.send(json.dumps({"type": "input.text", "text": text}))
                await first_event(ws, "audio.start")
                chunks = body.aiter_raw()
                received = [await anext(chunks)]
                process.send_signal(signal.SIGTERM)

                ready = await wait_draining(url)
                assert ready.json()["status"] == "draining" and "retry-after" in ready.headers
                ping = await http.get(f"{url}/ping")
                assert ping.status_code == 503
                refused = await http.post(f"{url}/v1/audio/speech", json=speech)
                assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
                assert refused.json()["error"]["type"] == "ServiceUnavailableError"
                async with connect(url.replace("http", "ws") + "/v1/audio/speech/stream") as late:  # refused: 1013
                    late_events, _, late_code = await receive_until_closed(late)
                assert late_code == 1013
                assert [(e["type"], e.get("code")) for e in late_events] == [("error", "shutting_down")]

                # The utterance in flight goes on: its end, all its audio, then the 1001.
                await ws.send(json.dumps({"type": "input.done"}))
                events, audio, code = await receive_until_closed(ws)
                received += [chunk async for chunk in chunks]
        kinds = [e["type"] for e in events]
        assert kinds.index("session.done") < len(kinds) - 1 and events[-1]["type"] == "error"
        assert events[-1]["code"] == "shutting_down" and code == 1001
        done = next(e for e in events if e["type"] == "session.done")
        assert done["total_sentences"] == 2 and kinds.count("audio.done") == 2
        assert not any(e.get("error") for e in events if e["type"] == "audio.done") and audio > 0
        # The HTTP stream in flight: its whole body. Equal to 1 LSB, not byte for byte: a later sentence is decoded
        # whole or in windows depending on the listener's buffer (under the drain's load, not the reference's).
        whole, alone = np.frombuffer(b"".join(received), np.int16), np.frombuffer(reference, np.int16)
        assert len(whole) == len(alone) and int(np.abs(whole.astype(np.int32) - alone).max()) <= 1
        assert exit_code(process, log) == 0, log.read_text()
    text = log.read_text()
    assert "draining" in text and "drain done: 1 session(s) closed after their final event, 0 utterance(s) cut" in text
    assert_no_traceback(text)


async def test_past_the_drain_timeout_what_remains_is_closed_with_1001(tmp_path: Path) -> None:
    with serve(tmp_path, SPEAKWIRE_DRAIN_TIMEOUT="0.5") as (url, process, log):
        speech = {"model": "tts-1", "voice": "alloy", "input": LONG_TEXT, "response_format": "pcm"}
        async with (
            httpx.AsyncClient(timeout=60) as http,
            stream_session(url) as ws,
            http.stream("POST", f"{url}/v1/audio/speech", json=speech) as body,
        ):
            for text in SENTENCES:  # never finished: no input.done
                await ws.send(json.dumps({"type": "input.text", "text": text}))
            await first_event(ws, "audio.start")  # admitted before the signal
            chunks = body.aiter_raw()
            first = await anext(chunks)
            process.send_signal(signal.SIGTERM)
            events, _, code = await receive_until_closed(ws)
            with pytest.raises(httpx.HTTPError):  # cut before the end of the body: not taken for complete
                async for _ in chunks:
                    pass
        assert first
        assert code == 1001 and events[-1]["type"] == "error" and events[-1]["code"] == "shutting_down"
        assert "session.done" not in [e["type"] for e in events]
        assert exit_code(process, log) == 0, log.read_text()
    text = log.read_text()
    assert "2 utterance(s) still in flight are cut" in text
    # The HTTP stream is cut by the drain itself, one line, not by uvicorn cancelling it (a CancelledError traceback).
    assert "drain timeout (0.5 s): 2 utterance(s) still in flight are cut, 1 HTTP response(s) still sending" in text
    assert "drain: 1 connection(s) still sending at the drain timeout (0.5 s) are cut short" in text
    assert_no_traceback(text)


async def test_past_the_drain_timeout_wyoming_requests_end_the_wyoming_way(tmp_path: Path) -> None:
    wyoming_port = free_port()
    with serve(tmp_path, SPEAKWIRE_DRAIN_TIMEOUT="0.5", SPEAKWIRE_WYOMING_PORT=str(wyoming_port)) as (_, process, log):
        async with (
            AsyncTcpClient("127.0.0.1", wyoming_port) as stream,
            AsyncTcpClient("127.0.0.1", wyoming_port) as once,
            AsyncTcpClient("127.0.0.1", wyoming_port) as idle,
        ):
            await stream.write_event(SynthesizeStart().event())
            for text in SENTENCES:  # never stopped: no synthesize-stop
                await stream.write_event(SynthesizeChunk(text=text).event())
            await once.write_event(Synthesize(text=LONG_TEXT).event())
            await idle.write_event(Describe().event())
            clients = {"stream": stream, "once": once, "idle": idle}
            firsts = {"stream": "audio-start", "once": "audio-start", "idle": "info"}  # admitted before the signal
            before = {name: await wyoming_until(client, firsts[name]) for name, client in clients.items()}
            process.send_signal(signal.SIGTERM)
            after = {name: await wyoming_until_closed(client) for name, client in clients.items()}
        assert exit_code(process, log) == 0, log.read_text()
    got = {name: " ".join(e.type for e in before[name] + after[name]) for name in before}
    # Each request gets what Wyoming owes it after the error saying why: a stream every audio-stop and its
    # synthesize-stopped, a one-shot its one audio-stop; the idle connection only the error. Then the end.
    assert re.fullmatch(r"(audio-start (audio-chunk )*audio-stop )*(audio-start (audio-chunk )*)?error "
                        r"(audio-stop )?synthesize-stopped", got["stream"]), got["stream"]  # fmt: skip
    assert got["stream"].count("audio-start") == got["stream"].count("audio-stop")
    assert re.fullmatch(r"audio-start (audio-chunk )+error audio-stop", got["once"]), got["once"]
    assert got["idle"] == "info error"
    for name, events in after.items():
        [error] = [Error.from_event(e) for e in events if Error.is_type(e.type)]
        assert error.code == "shutting_down" and "shutting down" in error.text, name
    text = log.read_text()
    assert "2 utterance(s) still in flight are cut" in text and "drain done: 3 session(s)" in text
    assert_no_traceback(text)


async def slow_connection(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A loopback connection for a reader that takes its time: what it has not read waits in the server's own
    buffers (its transport's, where the drain sees it), not in the kernel's or in this process's.

    Both are set before connecting: the receive buffer's size and the segment size go out in the handshake."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, SLOW_MSS)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=SLOW_READER_LIMIT)


async def read_slowly(reader: asyncio.StreamReader, n: int) -> bytes:
    """Up to ``n`` bytes at ``SLOW_READ_BYTES_S``, fewer if the connection ends first."""
    got = bytearray()
    while len(got) < n and (data := await asyncio.wait_for(reader.read(min(8192, n - len(got))), 60)):
        got += data
        await asyncio.sleep(len(data) / SLOW_READ_BYTES_S)
    return bytes(got)


async def test_a_slow_download_started_before_sigterm_gets_its_whole_file(tmp_path: Path) -> None:
    # A whole WAV file gives its utterance back before its body goes out: the drain waits for the body too.
    with serve(tmp_path) as (url, process, log):
        body = json.dumps({"model": "tts-1", "voice": "alloy", "input": LONG_TEXT[:1200], "response_format": "wav"})
        reader, writer = await slow_connection(int(url.rsplit(":", 1)[1]))
        writer.write(f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n{body}".encode())  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
        assert head.startswith(b"HTTP/1.1 200"), head
        length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(wait_logged(log, "SIGTERM: draining"), 60)
        wav = await read_slowly(reader, length)
        assert await reader.read() == b""  # then the server closes
        writer.close()
        assert exit_code(process, log) == 0, log.read_text()
    assert len(wav) == length > 2**21 and wav[:4] == b"RIFF"
    assert int.from_bytes(wav[40:44], "little") == length - 44  # the header's data size: every sample came
    text = log.read_text()
    assert "1 HTTP response(s) sending" in text  # the drain began with the body still going out
    assert "drain timeout" not in text and "cut short" not in text
    assert_no_traceback(text)


async def wyoming_slowly(reader: asyncio.StreamReader) -> list[Event]:
    """Wyoming events read at ``PLAYBACK_BYTES_S`` until the server closes (a reset fails the test)."""
    events: list[Event] = []
    while (event := await asyncio.wait_for(async_read_event(reader), 60)) is not None:
        events.append(event)
        await asyncio.sleep(len(event.payload or b"") / PLAYBACK_BYTES_S)
    return events


async def test_a_slow_wyoming_reader_hears_the_endings_not_the_queued_audio(tmp_path: Path) -> None:
    # Up to max_lead_s of audio is queued for each request when the drain ends; a client reading at its
    # own pace gets the endings right after the write in progress, not after all of it (nor dropped). Sent after
    # the queued audio, the endings would still be waiting when the drain's deadline drops the connection.
    wyoming_port = free_port()
    with serve(tmp_path, SPEAKWIRE_DRAIN_TIMEOUT="0.5", SPEAKWIRE_WYOMING_PORT=str(wyoming_port)) as (_, process, log):
        once_r, once_w = await slow_connection(wyoming_port)
        stream_r, stream_w = await slow_connection(wyoming_port)
        await async_write_event(Synthesize(text=LONG_TEXT).event(), once_w)
        await async_write_event(SynthesizeStart().event(), stream_w)
        await async_write_event(SynthesizeChunk(text=LONG_TEXT).event(), stream_w)  # never stopped
        for reader in (once_r, stream_r):  # admitted and speaking before the signal
            first = await asyncio.wait_for(async_read_event(reader), 120)
            assert first is not None and first.type == "audio-start"
        await asyncio.sleep(AHEAD_S)
        process.send_signal(signal.SIGTERM)
        once, stream = await asyncio.gather(wyoming_slowly(once_r), wyoming_slowly(stream_r))
        for writer in (once_w, stream_w):
            writer.close()
        assert exit_code(process, log) == 0, log.read_text()
    got = {
        name: " ".join(["audio-start", *(e.type for e in events)])
        for name, events in [("once", once), ("stream", stream)]
    }
    assert re.fullmatch(r"audio-start (audio-chunk )+error audio-stop", got["once"]), got["once"][-200:]
    assert re.fullmatch(r"(audio-start (audio-chunk )*audio-stop )*(audio-start (audio-chunk )*)?error "
                        r"(audio-stop )?synthesize-stopped", got["stream"]), got["stream"][-200:]  # fmt: skip
    assert got["stream"].count("audio-start") == got["stream"].count("audio-stop")
    for events in (once, stream):
        [error] = [Error.from_event(e) for e in events if Error.is_type(e.type)]
        assert error.code == "shutting_down"
    text = log.read_text()
    assert "2 utterance(s) still in flight are cut" in text and "drain done: 2 session(s)" in text
    assert_no_traceback(text)


# ----- every dialect, in process: the 1001 with its final event, then refusals -------------------------------


@pytest.fixture
def live(piper_engine: Any) -> Iterator[LiveServer]:
    server = start_server(Settings(wyoming_port=free_port()), engine=piper_engine)
    yield server
    server.stop()


async def messages_until_closed(ws: ClientConnection) -> tuple[list[str | bytes], int | None]:
    received: list[str | bytes] = []
    try:
        while True:
            received.append(await ws.recv())
    except ConnectionClosed as exc:
        return received, exc.rcvd.code if exc.rcvd else None


def dialect_urls(live: LiveServer) -> dict[str, str]:
    base = live.url.replace("http", "ws")
    return {
        "deepgram": f"{base}/v1/speak?model=aura-2-helena-en&encoding=linear16&sample_rate=24000",
        "elevenlabs": f"{base}/v1/text-to-speech/alloy/stream-input?output_format=pcm_24000",
        "cartesia": f"{base}/tts/websocket",
        "stream": f"{base}/v1/audio/speech/stream",
    }


async def test_every_dialect_hears_why_at_the_end_of_a_drain_and_new_ones_are_refused(live: LiveServer) -> None:
    urls = dialect_urls(live)
    sockets = {name: await connect(url) for name, url in urls.items()}
    wyoming = AsyncTcpClient("127.0.0.1", live.settings.wyoming_port)
    await wyoming.connect()
    try:
        await wyoming.write_event(Describe().event())
        await wyoming_until(wyoming, "info")
        async with asyncio.timeout(30):
            while len(live.state.sessions) < len(sockets) + 1:  # each registers once its handshake is done
                await asyncio.sleep(0.01)
        loop = next(iter(live.server.server_state.tasks)).get_loop()  # the server's own loop
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(drain(live.state, 0), loop))
        results = {name: await messages_until_closed(ws) for name, ws in sockets.items()}
        wyoming_events = await wyoming_until_closed(wyoming)
    finally:
        for ws in sockets.values():
            await ws.close()
        await wyoming.disconnect()
    last = {name: json.loads([m for m in got if isinstance(m, str)][-1]) for name, (got, _) in results.items()}
    assert {name: code for name, (_, code) in results.items()} == dict.fromkeys(urls, 1001)
    assert (last["deepgram"]["type"], last["deepgram"]["code"]) == ("Warning", "SHUTTING_DOWN")
    assert (last["elevenlabs"]["error"], last["elevenlabs"]["code"]) == ("shutting_down", 1001)
    assert (last["cartesia"]["type"], last["cartesia"]["status_code"]) == ("error", 503)
    assert (last["stream"]["type"], last["stream"]["code"]) == ("error", "shutting_down")
    assert [(e.type, Error.from_event(e).code) for e in wyoming_events] == [("error", "shutting_down")]

    # Still draining: a new session of each is refused as one at capacity is, with 1013.
    for url in urls.values():
        async with connect(url) as late:
            _, code = await messages_until_closed(late)
        assert code == 1013, url
    async with AsyncTcpClient("127.0.0.1", live.settings.wyoming_port) as late_wyoming:
        await late_wyoming.write_event(Synthesize(text="Refused while draining.").event())
        late_events = await wyoming_until_closed(late_wyoming)  # a refused one-shot closes, as wyoming-piper's
    assert [(e.type, Error.from_event(e).code) for e in late_events] == [("error", "shutting_down")]
    speak = {"text": "Refused while draining."}
    cartesia = {"model_id": "sonic-2", "transcript": speak["text"], "voice": {"mode": "id", "id": "alloy"},
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}  # fmt: skip
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as http:
        replies = [
            await http.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": speak["text"]}),
            await http.post("/v1/speak", json=speak),
            await http.post("/v1/text-to-speech/alloy/stream", json=speak),
            await http.post("/tts/bytes", json=cartesia, headers={"Cartesia-Version": "2026-08-14"}),
        ]
    refusals = [(r.status_code, "retry-after" in r.headers) for r in replies]
    assert refusals == [(503, True)] * 4, [r.text for r in replies]
