"""Wyoming (Home Assistant) over TCP, driven by the official ``wyoming`` client against a real server.

The server's engine is the real Piper voice made noise-free (as a ``seed`` makes it over HTTP), so the audio
Wyoming sends can be compared sample for sample with what ``POST /v1/audio/speech`` returns for the same text.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import httpx
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from speakwire.engines.base import EngineInfo, SynthesisRequest, SynthesisRun
from speakwire.engines.piper import PiperEngine
from speakwire.server.request_ids import NO_REQUEST, RequestIdFilter
from speakwire.server.state import ServerState
from speakwire.server.wyoming import protocol as p
from speakwire.server.wyoming.listener import WyomingListener
from speakwire.settings import Settings
from speakwire.text.segmenter import split_text
from support.live_server import LiveServer, free_port, start_server

TEXT = "Hello there. The quick brown fox jumps over the lazy dog. Is that all?"
RATE = 22050
TIMEOUT = 60


class NoiseFreePiper:
    """The Piper voice with every request seeded (noise-free): the same text always gives the same samples."""

    def __init__(self, engine: PiperEngine) -> None:
        self._engine = engine

    @property
    def info(self) -> EngineInfo:
        return self._engine.info

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        return self._engine.validate(replace(request, seed=0 if request.seed is None else request.seed))

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        return self._engine.prepare(request)

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None):  # type: ignore[no-untyped-def]
        return self._engine.synthesize(text, request, run)

    def close(self) -> None:
        pass


@dataclass
class Live:
    server: LiveServer
    port: int


@pytest.fixture(scope="module")
def wyoming(piper_engine: PiperEngine) -> Iterator[Live]:
    port = free_port()
    # Untrimmed: a streamed reply's second sentence is compared with the same sentence alone over HTTP, whose
    # leading silence would otherwise be cut (only an utterance's start is trimmed; test_leading_silence_trim).
    settings = Settings(wyoming_port=port, trim_leading_silence=False)
    live = start_server(settings, engine=NoiseFreePiper(piper_engine))  # type: ignore[arg-type]
    yield Live(live, port)
    live.stop()


def client(live: Live) -> AsyncTcpClient:
    return AsyncTcpClient("127.0.0.1", live.port)


@dataclass
class Reply:
    """What the server sent, in order."""

    events: list[Event] = field(default_factory=list)

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def audio(self) -> bytes:
        return b"".join(AudioChunk.from_event(e).audio for e in self.events if AudioChunk.is_type(e.type))

    def streams(self) -> list[bytes]:
        """The PCM of each audio-start … audio-stop."""
        streams: list[bytes] = []
        for event in self.events:
            if AudioStart.is_type(event.type):
                streams.append(b"")
            elif AudioChunk.is_type(event.type):
                streams[-1] += AudioChunk.from_event(event).audio
        return streams


async def read_until(c: AsyncTcpClient, last: str) -> Reply:
    reply = Reply()
    while True:
        event = await asyncio.wait_for(c.read_event(), TIMEOUT)
        assert event is not None, f"connection closed after {reply.types}"
        reply.events.append(event)
        if event.type == last:
            return reply


async def http_pcm(live: Live, text: str, **body: object) -> bytes:
    """Our OpenAI route's PCM for the same text, at the engine's rate."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.post(
            f"{live.server.url}/v1/audio/speech",
            json={"input": text, "response_format": "pcm", "sample_rate": RATE, **body},
        )
    assert response.status_code == 200, response.text
    return response.content


def active(live: Live) -> int:
    pipeline = live.server.state.pipeline
    assert pipeline is not None
    active: int = pipeline.active
    return active


async def test_describe_lists_our_voices_and_streaming(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(Describe().event())
        event = await asyncio.wait_for(c.read_event(), TIMEOUT)
    assert event is not None and Info.is_type(event.type)
    info = Info.from_event(event)
    assert len(info.tts) == 1
    program = info.tts[0]
    engine_info = wyoming.server.state.engine.info
    assert program.installed and program.supports_synthesize_streaming
    assert program.name == "speakwire"
    assert [v.name for v in program.voices] == list(engine_info.voices)
    voice = program.voices[0]
    # What wyoming-piper advertises for this voice file, so Home Assistant lists it the same way.
    assert voice.installed and voice.languages == ["en_US"]
    assert voice.attribution.url == "https://github.com/rhasspy/piper"


async def test_ping_gets_pong_with_its_text(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(Ping(text="hi").event())
        event = await asyncio.wait_for(c.read_event(), TIMEOUT)
    assert event is not None and Pong.is_type(event.type)
    assert Pong.from_event(event).text == "hi"


async def test_one_shot_is_one_audio_stream_with_the_http_samples(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(Synthesize(text=TEXT).event())
        reply = await read_until(c, AudioStop().event().type)
    assert reply.types[0] == "audio-start" and reply.types.count("audio-start") == 1
    assert set(reply.types[1:-1]) == {"audio-chunk"}
    start = AudioStart.from_event(reply.events[0])
    assert (start.rate, start.width, start.channels) == (RATE, 2, 1)
    chunks = [AudioChunk.from_event(e) for e in reply.events[1:-1]]
    assert all(c.rate == RATE and c.width == 2 and c.channels == 1 for c in chunks)
    assert all(c.samples == 1024 for c in chunks[:-1]) and 0 < chunks[-1].samples <= 1024
    assert reply.audio() == await http_pcm(wyoming, TEXT)


async def test_one_shot_with_a_named_voice_and_speaker_and_by_language(wyoming: Live) -> None:
    name = wyoming.server.state.engine.info.voices[0]
    expected = await http_pcm(wyoming, "Good morning.")
    async with client(wyoming) as c:
        for voice in (SynthesizeVoice(name=name), SynthesizeVoice(name=name, speaker=name),
                      SynthesizeVoice(language="en_US"), SynthesizeVoice(name="alloy")):  # fmt: skip
            await c.write_event(Synthesize(text="Good morning.", voice=voice).event())
            reply = await read_until(c, "audio-stop")
            assert reply.audio() == expected, voice


async def test_streaming_gives_one_audio_stream_per_sentence_then_stopped(wyoming: Live) -> None:
    sentences = ["Hello there. ", "The quick brown fox ", "jumps over the lazy dog. ", "Is that all?"]
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart().event())
        for piece in sentences:
            await c.write_event(SynthesizeChunk(text=piece).event())
        # Home Assistant also sends the whole text as a plain synthesize, for servers that cannot stream.
        await c.write_event(Synthesize(text="".join(sentences)).event())
        await c.write_event(SynthesizeStop().event())
        reply = await read_until(c, SynthesizeStopped().event().type)
    segments = split_text("".join(sentences))
    assert reply.types.count("audio-start") == reply.types.count("audio-stop") == len(segments) >= 2
    assert reply.types[-1] == "synthesize-stopped" and reply.types[-2] == "audio-stop"
    # Each audio-start is closed before the next one opens.
    opened = 0
    for kind in reply.types:
        opened += {"audio-start": 1, "audio-stop": -1}.get(kind, 0)
        assert opened in (0, 1)
    assert b"".join(reply.streams()) == await http_pcm(wyoming, TEXT)


async def test_streamed_sentences_are_spoken_before_the_stream_stops(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text="Hello there. The").event())
        first = await read_until(c, "audio-stop")  # no synthesize-stop sent yet
        await c.write_event(SynthesizeChunk(text=" rest arrives later.").event())
        await c.write_event(SynthesizeStop().event())
        rest = await read_until(c, "synthesize-stopped")
    assert first.types[0] == "audio-start" and first.audio() == await http_pcm(wyoming, "Hello there.")
    assert rest.types.count("audio-start") == 1 and rest.audio() == await http_pcm(wyoming, "The rest arrives later.")


async def test_a_plain_synthesize_after_a_stream_is_spoken_again(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text="First. ").event())
        await c.write_event(SynthesizeStop().event())
        await read_until(c, "synthesize-stopped")
        await c.write_event(Synthesize(text="Second.").event())
        reply = await read_until(c, "audio-stop")
    assert reply.types[0] == "audio-start" and reply.audio() == await http_pcm(wyoming, "Second.")


async def test_requests_on_one_connection_are_answered_in_order(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(Synthesize(text="One.").event())
        await c.write_event(Synthesize(text="Two, three.").event())
        first = await read_until(c, "audio-stop")
        second = await read_until(c, "audio-stop")
    assert first.audio() == await http_pcm(wyoming, "One.")
    assert second.audio() == await http_pcm(wyoming, "Two, three.")


async def test_empty_stream_is_just_stopped(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeStop().event())
        reply = await read_until(c, "synthesize-stopped")
    assert reply.types == ["synthesize-stopped"]


@pytest.mark.parametrize(
    ("request_event", "code"),
    [
        (Synthesize(text="Hello.", voice=SynthesizeVoice(name="nobody")).event(), "voice_not_found"),
        (Synthesize(text="Hello.", voice=SynthesizeVoice(language="xx")).event(), "language_not_found"),
        (Synthesize(text=" \u200b ?! ").event(), "nothing_to_speak"),
    ],
)
async def test_a_failed_one_shot_gets_an_error_and_the_connection_closes(
    wyoming: Live, request_event: Event, code: str
) -> None:
    """As wyoming-piper does: Home Assistant's one-shot client ignores errors and reads to audio-stop or EOF."""
    async with client(wyoming) as c:
        await c.write_event(request_event)
        reply = await read_until(c, "error")
        assert Error.from_event(reply.events[-1]).code == code
        assert await asyncio.wait_for(c.read_event(), timeout=10) is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("   ", "Nothing to speak: the text has no letters or digits."),
        ("\u200b?!", "Nothing to speak: the text has no letters or digits."),
        ("a" * 10_001, "Text is 10001 characters; the limit is 10000. Stream it (synthesize-start/-chunk/-stop)."),
    ],
)
async def test_a_refused_one_shot_says_why_in_wyomings_words(wyoming: Live, text: str, error: str) -> None:
    async with client(wyoming) as c:
        await c.write_event(Synthesize(text=text).event())
        reply = await read_until(c, "error")
        refusal = Error.from_event(reply.events[-1])
        assert refusal.text == error
        assert refusal.code == ("too_large" if "limit" in error else "nothing_to_speak")
        assert await asyncio.wait_for(c.read_event(), timeout=10) is None
    assert active(wyoming) == 0


@pytest.fixture
def wyoming_long_inputs(piper_engine: PiperEngine) -> Iterator[Live]:
    port = free_port()
    live = start_server(Settings(wyoming_port=port, max_input_chars=200_000), engine=piper_engine)
    yield Live(live, port)
    live.stop()


async def test_a_one_shot_over_the_stream_buffer_but_within_max_input_chars_is_spoken(
    wyoming_long_inputs: Live,
) -> None:
    # An operator's max_input_chars over 100,000 once let the text overflow the utterance's own buffer
    # after it was admitted, and the connection ended with an internal error instead of audio.
    text = " ".join(["Operators may allow texts longer than the stream buffer."] * 2_000)  # ~116,000 characters
    async with client(wyoming_long_inputs) as c:
        await c.write_event(Synthesize(text=text).event())
        reply = await read_until(c, "audio-chunk")  # hanging up after it cancels the rest
    assert reply.types[0] == "audio-start"
    deadline = time.monotonic() + TIMEOUT
    while active(wyoming_long_inputs) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert active(wyoming_long_inputs) == 0


@pytest.mark.parametrize(
    ("request_event", "code"),
    [
        (SynthesizeChunk(text="no stream").event(), "no_stream"),
        (Event(type="synthesize", data={"text": 5}), "invalid_event"),
    ],
)
async def test_errors_leave_the_connection_usable(wyoming: Live, request_event: Event, code: str) -> None:
    async with client(wyoming) as c:
        await c.write_event(request_event)
        reply = await read_until(c, "error")
        error = Error.from_event(reply.events[-1])
        assert error.code == code and error.text
        await c.write_event(Synthesize(text="Still here.").event())
        reply = await read_until(c, "audio-stop")
    assert reply.types[0] == "audio-start" and reply.audio()


async def test_a_refused_stream_answers_its_stop_and_the_next_stream_works(wyoming: Live) -> None:
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nobody")).event())
        await c.write_event(SynthesizeChunk(text="Dropped. ").event())
        await c.write_event(SynthesizeStop().event())
        reply = await read_until(c, "synthesize-stopped")
        assert reply.types == ["error", "synthesize-stopped"]
        assert Error.from_event(reply.events[0]).code == "voice_not_found"
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text="Kept.").event())
        await c.write_event(SynthesizeStop().event())
        reply = await read_until(c, "synthesize-stopped")
    assert reply.types.count("audio-start") == 1 and reply.audio() == await http_pcm(wyoming, "Kept.")


async def test_header_with_inline_data_is_accepted(wyoming: Live) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", wyoming.port)
    try:
        writer.write(b'{"type": "ping", "data": {"text": "inline"}}\n')
        await writer.drain()
        header = await asyncio.wait_for(reader.readline(), TIMEOUT)
        assert b'"pong"' in header
    finally:
        writer.close()


async def test_garbage_gets_an_error_and_the_connection_closes(wyoming: Live) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", wyoming.port)
    try:
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT)  # to the end: the server closed
    finally:
        writer.close()
    assert b'"error"' in data and b"invalid_frame" in data


async def test_disconnect_mid_synthesis_cancels_it(wyoming: Live) -> None:
    text = " ".join(f"This is sentence number {n}, which takes a while to say." for n in range(30))
    async with client(wyoming) as c:
        await c.write_event(Synthesize(text=text).event())
        await read_until(c, "audio-chunk")
        assert active(wyoming) == 1
    deadline = time.monotonic() + TIMEOUT
    while active(wyoming) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert active(wyoming) == 0
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metrics = (await http.get(f"{wyoming.server.url}/metrics")).text
    assert 'speakwire_active_streams{engine="piper",protocol="wyoming"} 0.0' in metrics
    # A connection left open mid-stream is cancelled at its end too.
    async with client(wyoming) as c:
        await c.write_event(SynthesizeStart().event())
        await c.write_event(SynthesizeChunk(text=text).event())
        await read_until(c, "audio-chunk")
    deadline = time.monotonic() + TIMEOUT
    while active(wyoming) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert active(wyoming) == 0


async def test_a_connections_log_lines_name_its_request_id(wyoming: Live) -> None:
    """TCP has no X-Request-ID: each connection gets an id of its own, bound while it is served."""
    seen: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = seen.append  # type: ignore[method-assign]
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger("speakwire.server.wyoming.listener")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        for _ in range(2):
            async with client(wyoming) as c:
                await c.write_event(Event(type="transcribe"))  # not a TTS event: ignored, with a debug line
                await c.write_event(Ping(text="after").event())
                await read_until(c, "pong")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    ids = [getattr(r, "request_id", None) for r in seen if "ignored transcribe" in r.getMessage()]
    assert len(ids) == 2 and NO_REQUEST not in ids and ids[0] != ids[1]


def test_listener_stops_with_the_server(piper_engine: PiperEngine) -> None:
    port = free_port()
    live = start_server(Settings(wyoming_port=port), engine=piper_engine)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    live.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# ----- the protocol core, without sockets ---------------------------------------------------------


def test_decoder_gives_the_same_events_however_the_bytes_are_split() -> None:
    wire = (
        p.encode_event("synthesize", {"text": "Hi.", "voice": {"name": "x"}})
        + b"\n"  # a blank line between events is tolerated
        + b'{"type": "ping", "data": {"text": "inline"}}\n'
        + p.encode_event("audio-chunk", {"rate": 1}, b"\x00\x01\x02\x03")
    )
    whole = p.FrameDecoder().feed(wire)
    decoder = p.FrameDecoder()
    split = [event for i in range(len(wire)) for event in decoder.feed(wire[i : i + 1])]
    assert whole == split
    assert [(e.type, e.data, e.payload) for e in whole] == [
        ("synthesize", {"text": "Hi.", "voice": {"name": "x"}}, None),
        ("ping", {"text": "inline"}, None),
        ("audio-chunk", {"rate": 1}, b"\x00\x01\x02\x03"),
    ]


async def test_the_official_reader_reads_what_we_encode() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(p.audio_chunk(RATE, b"\x01\x00" * 3) + p.error("nope", "busy") + p.synthesize_stopped())
    reader.feed_eof()
    chunk, error, stopped = [await async_read_event(reader) for _ in range(3)]
    assert chunk is not None and AudioChunk.from_event(chunk).samples == 3
    assert error is not None and Error.from_event(error) == Error(text="nope", code="busy")
    assert stopped is not None and SynthesizeStopped.is_type(stopped.type)


NOT_FRAMING = [
    b"not json\n",
    b"[1, 2]\n",
    b'{"data": {}}\n',
    b'{"type": "x", "data_length": -1}\n',
    b'{"type": "x", "payload_length": 99999999999}\n',
    b'{"type": "x", "data": 3}\n',
]


@pytest.mark.parametrize("line", NOT_FRAMING)
def test_decoder_refuses_what_is_not_wyoming_framing(line: bytes) -> None:
    with pytest.raises(p.FrameError):
        p.FrameDecoder().feed(line)


def test_session_ignores_the_compatibility_synthesize_only_inside_a_stream() -> None:
    session = p.WyomingSession()
    assert isinstance(session.receive(p.SynthesizeStart()), p.OpenStream)
    assert isinstance(session.receive(p.SynthesizeChunk("Hi. ")), p.StreamText)
    assert isinstance(session.receive(p.Synthesize("Hi. ")), p.Ignore)
    with pytest.raises(p.WyomingError, match="already open"):
        session.receive(p.SynthesizeStart())
    assert session.receive(p.SynthesizeStop()) == p.CloseStream(failed=False)
    assert isinstance(session.receive(p.Synthesize("Again.")), p.SpeakOnce)
    with pytest.raises(p.WyomingError) as raised:
        session.receive(p.SynthesizeStop())
    assert raised.value.code == "no_stream"


def test_pcm_is_cut_into_1024_sample_chunks() -> None:
    chunker = p.PcmChunker()
    chunks = chunker.add(b"\x00" * 1500) + chunker.add(b"\x00" * 1500) + chunker.flush()
    assert [len(c) for c in chunks] == [2048, 952]


# ----- configuration ---------------------------------------------------------------------------------


def test_wyoming_port_from_the_flag_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPEAKWIRE_WYOMING_PORT", raising=False)
    assert build_settings(build_parser().parse_args(["serve"])).wyoming_port is None
    assert build_settings(build_parser().parse_args(["serve", "--wyoming-port", "10200"])).wyoming_port == 10200
    monkeypatch.setenv("SPEAKWIRE_WYOMING_PORT", "10300")
    assert build_settings(build_parser().parse_args(["serve"])).wyoming_port == 10300


def test_serve_refuses_wyoming_on_a_public_host_without_insecure() -> None:
    command = [sys.executable, "-m", "speakwire", "serve", "--host", "0.0.0.0", "--api-key", "k", "--wyoming-port"]
    result = subprocess.run([*command, str(free_port())], capture_output=True, timeout=60, check=False)
    assert result.returncode == 2
    assert b"Wyoming" in result.stderr and b"--insecure" in result.stderr


async def test_a_taken_port_fails_the_start_with_a_clear_reason(piper_engine: PiperEngine) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        state = ServerState(Settings(wyoming_port=taken.getsockname()[1], warmup=False))
        state.ready_hooks.append(WyomingListener(state).start)
        await state.start(piper_engine)
        assert state._load_task is not None
        await state._load_task
        await state.stop()
    assert not state.ready
    assert state.load_error is not None and "cannot listen for Wyoming" in state.load_error
