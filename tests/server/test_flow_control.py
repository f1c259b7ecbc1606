"""Flow control on every protocol, over real loopback servers: synthesis follows what the transport takes.

A reader that stops reading finds at most the lead (``Settings.max_lead_s``, plus the one engine chunk that
crossed it) made and not taken, as the server's utterance counts it; when it reads again it gets the same
bytes a fast reader gets (same seed). A reader stalled past ``write_stall_timeout_s`` is let go: WebSocket
close 1008 with a reason, an HTTP body cut short, a Wyoming connection closed; its admission slot is reused
and ``speakwire_stalled_closes_total`` counts it. Clients read through a 4 KiB receive buffer, so the
kernel does not hide a stalled reader behind megabytes of loopback buffers. No timings are asserted.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from speakwire.engines.base import SynthesisRun
from speakwire.engines.piper import PiperEngine
from speakwire.server.wyoming import protocol as wp
from speakwire.settings import Settings
from speakwire.synthesis import Utterance
from support.live_server import LiveServer, free_port, start_server

LEAD_S = 2.0
RCVBUF = 4096
SENTENCES = (
    "The order shipped this morning. ",
    "It should arrive on Tuesday. ",
    "Is there anything else I can help with? ",
    "Your account number ends in four two seven. ",
    "Thanks for calling today. ",
)
TEXT = "".join(SENTENCES[i % len(SENTENCES)] for i in range(24)).strip()
"""About 40 s of audio in short sentences (an engine chunk is at most one sentence)."""
SHORT = "Hello there."


def small_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: the window scale fits it
    sock.settimeout(120)
    sock.connect(("127.0.0.1", port))
    return sock


@dataclass
class Ending:
    """How the server ended a connection: a WebSocket close, or whether a body/stream was complete."""

    complete: bool
    code: int | None = None
    reason: str = ""


class Conn:
    def read_all(self) -> tuple[bytes, Ending]:
        raise NotImplementedError


# ----- WebSocket protocols --------------------------------------------------------------------------


@dataclass
class WsCase:
    name: str
    protocol: str
    path: str
    messages: Callable[[str], list[dict[str, Any]]]
    audio: Callable[[str | bytes], bytes]
    done: Callable[[str | bytes], bool]
    streams: bool = True

    def open(self, server: LiveServer, text: str, *, small: bool = True) -> Conn:
        url = f"ws://127.0.0.1:{server.settings.port}{self.path}"
        sock = small_socket(server.settings.port) if small else None
        ws = ws_connect(url, sock=sock, max_size=None, max_queue=1, open_timeout=30)
        for message in self.messages(text):
            ws.send(json.dumps(message))
        return WsConn(self, ws)


@dataclass
class WsConn(Conn):
    case: WsCase
    ws: ClientConnection

    def read_all(self) -> tuple[bytes, Ending]:
        audio = b""
        try:
            while True:
                message = self.ws.recv(timeout=120)
                audio += self.case.audio(message)
                if self.case.done(message):
                    self.ws.close()
                    return audio, Ending(True)
        except ConnectionClosed as exc:
            return audio, Ending(False, exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "")


def _json(message: str | bytes) -> dict[str, Any]:
    return json.loads(message) if isinstance(message, str) else {}


def _binary(message: str | bytes) -> bytes:
    return message if isinstance(message, bytes) else b""


def _b64(key: str, where: Callable[[dict[str, Any]], bool] = lambda _: True) -> Callable[[str | bytes], bytes]:
    def audio(message: str | bytes) -> bytes:
        event = _json(message)
        value = event.get(key)
        return base64.b64decode(value) if isinstance(value, str) and where(event) else b""

    return audio


def _stream_messages(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "session.config", "response_format": "pcm", "stream_audio": True},
        {"type": "input.text", "text": text},
        {"type": "input.done"},
    ]


S16 = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
WS_CASES = [
    WsCase("stream", "websocket", "/v1/audio/speech/stream", _stream_messages, _binary,
           lambda m: _json(m).get("type") == "session.done"),
    WsCase("sagemaker-bidi", "sagemaker", "/invocations-bidirectional-stream", _stream_messages, _binary,
           lambda m: _json(m).get("type") == "session.done"),
    WsCase("elevenlabs", "elevenlabs",
           "/v1/text-to-speech/alloy/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_24000",
           lambda text: [{"text": " "}, {"text": text}, {"text": ""}], _b64("audio"),
           lambda m: _json(m).get("isFinal") is True),
    WsCase("cartesia", "cartesia", "/tts/websocket",
           lambda text: [{"context_id": "c", "model_id": "sonic-3", "transcript": text,
                          "voice": {"mode": "id", "id": "alloy"}, "output_format": S16, "continue": False}],
           _b64("data", lambda e: e.get("type") == "chunk"), lambda m: _json(m).get("type") == "done"),
    WsCase("deepgram", "deepgram", "/v1/speak?encoding=linear16&sample_rate=24000",
           lambda text: [{"type": "Speak", "text": text}, {"type": "Flush"}], _binary,
           lambda m: _json(m).get("type") == "Flushed"),
    WsCase("magpie", "magpie", "/invocations-bidirectional-stream",
           lambda text: [{"type": "synthesize_session.update",
                          "session": {"output_audio_params": {"sample_rate_hz": 24000}}},
                         {"type": "input_text.append", "text": text}, {"type": "input_text.commit"},
                         {"type": "input_text.done"}],
           _b64("audio", lambda e: e.get("type") == "conversation.item.speech.data"),
           lambda m: _json(m).get("type") == "conversation.item.speech.completed"),
]  # fmt: skip


# ----- HTTP protocols ------------------------------------------------------------------------------


class SmallHTTPConnection(http.client.HTTPConnection):
    def __init__(self, port: int, small: bool) -> None:
        super().__init__("127.0.0.1", port, timeout=120)
        self._small = small

    def connect(self) -> None:
        if self._small:
            self.sock = small_socket(self.port)
        else:
            super().connect()


@dataclass
class HttpCase:
    name: str
    protocol: str
    path: str
    body: Callable[[str], dict[str, Any]]
    decode: Callable[[bytes], bytes] = lambda raw: raw
    streams: bool = True
    headers: dict[str, str] = field(default_factory=dict)

    def open(self, server: LiveServer, text: str, *, small: bool = True) -> Conn:
        conn = SmallHTTPConnection(server.settings.port, small)
        conn.request("POST", self.path, body=json.dumps(self.body(text)),
                     headers={"Content-Type": "application/json", **self.headers})  # fmt: skip
        return HttpConn(self, conn)


@dataclass
class HttpConn(Conn):
    case: HttpCase
    conn: http.client.HTTPConnection

    def read_all(self) -> tuple[bytes, Ending]:
        response = self.conn.getresponse()
        assert response.status == 200, response.read()[:300]
        try:
            raw = response.read()
            complete = True
        except (http.client.IncompleteRead, ConnectionError) as exc:
            raw = getattr(exc, "partial", b"")
            complete = False
        finally:
            self.conn.close()
        return self.case.decode(raw), Ending(complete)


def _sse_audio(raw: bytes) -> bytes:
    audio = b""
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event.get("type") == "speech.audio.delta":
                audio += base64.b64decode(event["audio"])
    return audio


def _openai(fmt: str = "pcm", **extra: object) -> Callable[[str], dict[str, Any]]:
    return lambda text: {"model": "tts-1", "input": text, "response_format": fmt, **extra}


HTTP_CASES = [
    HttpCase("openai-raw", "http", "/v1/audio/speech", _openai()),
    HttpCase("openai-sse", "http", "/v1/audio/speech", _openai(stream_format="sse"), _sse_audio),
    HttpCase("openai-file", "http", "/v1/audio/speech", _openai("wav"), streams=False),
    HttpCase("sagemaker-invocations", "http", "/invocations", _openai(),
             headers={"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/speech"}),
    HttpCase("elevenlabs-http", "elevenlabs", "/v1/text-to-speech/alloy/stream?output_format=pcm_24000",
             lambda text: {"text": text, "model_id": "eleven_flash_v2_5"}),
    HttpCase("cartesia-http", "cartesia", "/tts/bytes",
             lambda text: {"model_id": "sonic-3", "transcript": text, "voice": {"mode": "id", "id": "alloy"},
                           "output_format": S16}),
    HttpCase("deepgram-http", "deepgram", "/v1/speak?encoding=linear16&sample_rate=24000&container=none",
             lambda text: {"text": text}),
    HttpCase("magpie-http", "magpie", "/invocations", lambda text: {"text": text, "sample_rate_hz": 24000}),
]  # fmt: skip


# ----- Wyoming ---------------------------------------------------------------------------------------


@dataclass
class WyomingCase:
    name: str = "wyoming"
    protocol: str = "wyoming"
    streams: bool = True

    def open(self, server: LiveServer, text: str, *, small: bool = True) -> Conn:
        port = server.settings.wyoming_port
        assert port is not None
        sock = small_socket(port) if small else socket.create_connection(("127.0.0.1", port), timeout=120)
        sock.sendall(wp.encode_event("synthesize", {"text": text}))
        return WyomingConn(sock)


@dataclass
class WyomingConn(Conn):
    sock: socket.socket

    def read_all(self) -> tuple[bytes, Ending]:
        decoder = wp.FrameDecoder()
        audio = b""
        try:
            while data := self.sock.recv(65536):
                for event in decoder.feed(data):
                    if event.type == "audio-chunk":
                        audio += event.payload or b""
                    elif event.type == "audio-stop":
                        return audio, Ending(True)
            return audio, Ending(False)
        except ConnectionError:
            return audio, Ending(False)
        finally:
            self.sock.close()


Case = WsCase | HttpCase | WyomingCase
CASES: list[Case] = [*WS_CASES, *HTTP_CASES, WyomingCase()]


# ----- servers and helpers ---------------------------------------------------------------------------


SNDBUF = 16 * 1024


class FrameStreamedPiper:
    """The Piper engine with every segment frame-streamed: the same samples whatever the load.

    Whether a later segment is frame-streamed or made whole depends on how much audio is buffered when it
    is queued (``synthesis``), and the two renderings differ in the last bit of a few samples; fixing the
    choice makes a stalled reader's audio comparable byte for byte, and gives the lead many chunk
    boundaries inside each segment to stop and resume at.
    """

    def __init__(self, engine: PiperEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def synthesize(self, text: str, request: Any, run: Any = None) -> Any:
        run = run if run is not None else SynthesisRun()
        run.latency_critical = True
        return self._engine.synthesize(text, request, run)


def _server(piper_engine: PiperEngine, **settings: Any) -> LiveServer:
    live = start_server(Settings(default_seed=3, wyoming_port=free_port(), **settings),
                        engine=FrameStreamedPiper(piper_engine))  # type: ignore[arg-type]  # fmt: skip
    # Loopback's 64 KiB segments let Linux grow a send buffer to megabytes even towards a closed window: a fixed
    # SO_SNDBUF on the listening sockets (accepted sockets inherit it) keeps the kernel's share small.
    listeners = [sock for server in live.server.servers for sock in server.sockets]
    for hook in live.state.ready_hooks:
        wyoming = getattr(hook, "__self__", None)
        if wyoming is not None and getattr(wyoming, "_server", None) is not None:
            listeners += wyoming._server.sockets
    for sock in listeners:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
    return live


@pytest.fixture(scope="module")
def lead_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = _server(piper_engine, max_lead_s=LEAD_S, write_stall_timeout_s=600)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def stall_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = _server(piper_engine, max_lead_s=LEAD_S, write_stall_timeout_s=1.0, max_streams=1)
    yield live
    live.stop()


@pytest.fixture
def opened(request: pytest.FixtureRequest) -> Iterator[list[Utterance]]:
    """Every utterance the server under test opens, in order."""
    server: LiveServer = request.getfixturevalue(request.param)
    pipeline = server.state.pipeline
    utterances: list[Utterance] = []
    original = pipeline.utterance

    def recording(*args: Any, **kwargs: Any) -> Utterance:
        utterance: Utterance = original(*args, **kwargs)
        utterances.append(utterance)
        return utterance

    pipeline.utterance = recording
    yield utterances
    del pipeline.utterance


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _settled(utterance: Utterance) -> bool:
    """Nothing more made over half a second: the reader (and the kernel's buffers for it) takes nothing now."""
    made = utterance.made_samples
    time.sleep(0.5)
    return utterance.waiting_for_reader and utterance.made_samples == made


def stalled_closes(server: LiveServer, protocol: str) -> float:
    metrics = server.state.metrics
    value: float = metrics.stalled_closes.labels(engine=metrics.engine, protocol=protocol)._value.get()
    return value


# ----- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("opened", ["lead_server"], indirect=True)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_reader_that_stalls_finds_at_most_the_lead_queued_and_then_the_same_audio(
    lead_server: LiveServer, opened: list[Utterance], case: Case
) -> None:
    fast, ending = case.open(lead_server, TEXT, small=False).read_all()
    assert ending.complete and fast
    conn = case.open(lead_server, TEXT)
    wait_for(lambda: len(opened) == 2, "the stalled reader's utterance")
    utterance = opened[1]
    if case.streams:
        wait_for(lambda: utterance.waiting_for_reader, "synthesis to wait for the reader")
        lead = int(LEAD_S * utterance.output_rate)
        wait_for(lambda: _settled(utterance), "the kernel's buffers to fill")
        assert utterance.waiting_for_reader and utterance.lead_samples >= lead // 2  # it waits at the lead...
        assert utterance.peak_lead_samples <= lead + utterance.largest_chunk_samples  # ...and went no further
        assert utterance.made_samples * 2 < len(fast) // 2  # far from the end: not all made for a stalled reader
    audio, ending = conn.read_all()
    assert ending.complete
    assert audio == fast  # resumed where it stopped: no gap, no duplicate
    wait_for(lambda: lead_server.state.pipeline.active == 0, "the slots to be given back")
    assert utterance.peak_lead_samples <= int(LEAD_S * utterance.output_rate) + utterance.largest_chunk_samples


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_reader_stalled_past_the_write_stall_timeout_is_let_go_and_its_slot_reused(
    stall_server: LiveServer, case: Case
) -> None:
    before = stalled_closes(stall_server, case.protocol)
    conn = case.open(stall_server, TEXT)
    wait_for(lambda: stalled_closes(stall_server, case.protocol) > before, "the stalled close")
    wait_for(lambda: stall_server.state.pipeline.active == 0, "the stalled stream's slot")
    again, ending = case.open(stall_server, SHORT, small=False).read_all()  # max_streams=1: the same slot
    assert ending.complete and again
    _, ending = conn.read_all()
    assert not ending.complete
    if isinstance(case, WsCase):
        assert ending.code == 1008
        assert "write-stall" in ending.reason
    assert stalled_closes(stall_server, case.protocol) == before + 1
