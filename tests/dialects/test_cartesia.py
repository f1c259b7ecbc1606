"""The official ``cartesia`` SDK, unchanged, against speakwire's Cartesia dialect.

The client is pointed at us with ``Cartesia(base_url=..., websocket_base_url=...)``. Synthesis is seeded
(``seed`` rides along as an extra field, which the SDK passes through), so the same text gives the same
samples on every route and audio can be compared with our own ``/v1/audio/speech``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile
from cartesia import AsyncCartesia, AuthenticationError, BadRequestError, Cartesia, NotFoundError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from speakwire.engines.piper import PiperEngine
from speakwire.server.cartesia import protocol as p
from speakwire.settings import Settings
from support.audio import decode
from support.live_server import LiveServer, start_server

VOICE = {"mode": "id", "id": "alloy"}
RATE = 22050
S16 = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE}
F32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": RATE}
TEXT = "Hello there. How are you today?"
PIECES = ["Hello there. ", "How are ", "you today?"]
ODD_RATE: Any = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12345}
WAV_S16: Any = {"container": "wav", "encoding": "pcm_s16le", "sample_rate": RATE}
LONG = (
    "This is the first sentence of a long answer. Here comes the second one, a little longer than the first. "
    "The third sentence keeps going for a while. A fourth follows it. And a fifth. The sixth one ends it all."
)


def client_for(server: LiveServer, api_key: str = "unused") -> Cartesia:
    return Cartesia(api_key=api_key, base_url=server.url, websocket_base_url=ws_base(server), max_retries=0)


def ws_base(server: LiveServer) -> str:
    return server.url.replace("http://", "ws://")


def openai_audio(server: LiveServer, text: str, fmt: str = "pcm", rate: int = RATE) -> bytes:
    """What our own HTTP route says for the same text (seeded, so the samples are repeatable)."""
    body = {"input": text, "response_format": fmt, "sample_rate": rate, "seed": 1}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def int16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.int32)


def assert_same_pcm(got: bytes, expected: bytes) -> None:
    assert len(got) == len(expected)
    assert np.max(np.abs(int16(got) - int16(expected)), initial=0) <= 2


def audio_of(events: list[Any], context_id: str) -> bytes:
    return b"".join(e.audio or b"" for e in events if e.type == "chunk" and e.context_id == context_id)


# ----- WebSocket ---------------------------------------------------------------------------


def test_a_context_fed_in_pieces_speaks_what_http_speaks(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("talk", model_id="sonic-3", voice=VOICE, output_format=S16, language="en")
        for piece in PIECES:
            ctx.push(piece, seed=1)
        ctx.no_more_inputs()
        events = list(ctx.receive())
    assert [e.type for e in events[:-1]] == ["chunk"] * (len(events) - 1) and len(events) > 2
    assert events[-1].type == "done" and events[-1].context_id == "talk"
    assert all(e.status_code == 206 and e.done is False and e.step_time >= 0 for e in events[:-1])
    assert_same_pcm(audio_of(events, "talk"), openai_audio(server, TEXT))


def test_pcm_f32le_the_sdk_default_is_the_same_signal_as_s16le(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("f32", voice=VOICE, output_format=F32)
        ctx.push(TEXT, seed=1)
        ctx.no_more_inputs()
        floats = np.frombuffer(audio_of(list(ctx.receive()), "f32"), dtype="<f4")
    reference = int16(openai_audio(server, TEXT)) / 32767.0
    assert len(floats) == len(reference)
    assert np.max(np.abs(floats - reference)) <= 2.5 / 32767


@pytest.mark.parametrize(("encoding", "fmt"), [("pcm_mulaw", "ulaw"), ("pcm_alaw", "alaw")])
def test_telephony_encodings_match_ours(server: LiveServer, encoding: str, fmt: str) -> None:
    output_format = {"container": "raw", "encoding": encoding, "sample_rate": 8000}
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("phone", voice=VOICE, output_format=output_format)
        ctx.push("Your order shipped.", seed=1)
        ctx.no_more_inputs()
        got = audio_of(list(ctx.receive()), "phone")
    expected = openai_audio(server, "Your order shipped.", fmt=fmt, rate=8000)
    assert len(got) == len(expected)
    assert np.mean(np.frombuffer(got, np.uint8) == np.frombuffer(expected, np.uint8)) > 0.99


def test_cancel_stops_one_context_and_the_other_completes(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        talker = conn.context("talker", voice=VOICE, output_format=S16)
        other = conn.context("other", voice=VOICE, output_format=S16)
        talker.push(LONG, seed=1)
        talker.no_more_inputs()
        other.push(TEXT, seed=1)
        other.no_more_inputs()
        heard = b""
        for event in talker.receive():
            if event.type == "chunk":
                heard += event.audio or b""
                talker.cancel()  # barge-in after the first chunk
                break
        rest = list(other.receive())
    assert rest[-1].type == "done" and rest[-1].context_id == "other"
    assert_same_pcm(audio_of(rest, "other"), openai_audio(server, TEXT))
    # The SDK hands events of a cancelled context to whoever reads next; only chunks already on the wire may come.
    late = [e for e in rest if e.context_id == "talker"]
    assert all(e.type == "chunk" for e in late)
    assert len(heard + audio_of(late, "talker")) < len(openai_audio(server, LONG)) / 2


async def test_the_async_sdk_speaks_two_contexts_at_once(server: LiveServer) -> None:
    client = AsyncCartesia(api_key="unused", base_url=server.url, websocket_base_url=ws_base(server), max_retries=0)
    async with client.tts.websocket_connect() as conn:

        async def speak(context_id: str, text: str) -> list[Any]:
            ctx = conn.context(context_id, voice=VOICE, output_format=S16)
            await ctx.push(text, seed=1)
            await ctx.no_more_inputs()
            return [event async for event in ctx.receive()]

        first, second = await asyncio.gather(speak("one", TEXT), speak("two", "Your order shipped."))
    assert first[-1].type == second[-1].type == "done"
    assert_same_pcm(audio_of(first, "one"), await asyncio.to_thread(openai_audio, server, TEXT))
    assert_same_pcm(audio_of(second, "two"), await asyncio.to_thread(openai_audio, server, "Your order shipped."))


def test_the_v2_compatible_send_returns_the_whole_audio(server: LiveServer) -> None:
    ws = client_for(server).tts.websocket()
    try:
        output = ws.send(model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=S16, stream=False, seed=1)
    finally:
        ws.close()
    assert not isinstance(output, Iterator) and output.audio is not None
    assert_same_pcm(output.audio, openai_audio(server, TEXT))


def test_leaving_mid_speech_releases_every_stream(server: LiveServer) -> None:
    state = server.state
    with raw_connect(server) as ws:
        for context_id in ("a", "b"):
            ws.send(json.dumps({"context_id": context_id, "transcript": LONG, "voice": VOICE, "output_format": S16,
                                "continue": True}))  # fmt: skip
        assert json.loads(ws.recv(timeout=30))["type"] == "chunk"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (state.pipeline.active or state.pipeline.scheduler.busy):
        time.sleep(0.05)
    assert state.pipeline.active == 0
    assert state.pipeline.scheduler.busy == 0 and state.pipeline.scheduler.queued == 0


def test_flush_ends_a_group_with_flush_done_and_later_text_gets_the_next_id(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("flush", voice=VOICE, output_format=S16)
        ctx.push("Stay hungry, ", seed=1)
        ctx.push("", flush=True)
        ctx.push("stay foolish.", seed=1)
        ctx.no_more_inputs()
        events = list(ctx.receive())
    kinds = [(e.type, e.flush_id if e.type in ("chunk", "flush_done") else None) for e in events]
    done_at = kinds.index(("flush_done", 1))
    assert kinds[:done_at] == [("chunk", 1)] * done_at and done_at > 0
    assert kinds[done_at + 1 : -1] == [("chunk", 2)] * (len(kinds) - done_at - 2) and len(kinds) > done_at + 2
    assert kinds[-1] == ("done", None)
    first = b"".join(e.audio for e in events[:done_at] if e.audio)
    assert_same_pcm(first, openai_audio(server, "Stay hungry,"))


def test_text_held_mid_sentence_is_spoken_after_max_buffer_delay(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("held", voice=VOICE, output_format=S16, max_buffer_delay_ms=0, timeout=30)
        ctx.push("Let me check that for you", seed=1)  # no sentence end, and the input stays open
        first = next(iter(ctx.receive()))
        assert first.type == "chunk"
        ctx.no_more_inputs()
        events = [first, *ctx.receive()]
    assert events[-1].type == "done"
    assert_same_pcm(audio_of(events, "held"), openai_audio(server, "Let me check that for you"))


def test_a_whole_sentence_is_spoken_without_waiting_for_the_next_request(server: LiveServer) -> None:
    # pipecat sends one sentence per request; the segmenter would hold "Paris." until it sees the next word.
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("sentence", voice=VOICE, output_format=S16, max_buffer_delay_ms=5000, timeout=4)
        ctx.push("The capital of France is Paris.", seed=1)
        first = next(iter(ctx.receive()))  # well before the 5 s buffering limit
        assert first.type == "chunk"
        ctx.push("It is lovely.", seed=1)
        ctx.no_more_inputs()
        events = [first, *ctx.receive()]
    assert events[-1].type == "done"
    assert len(audio_of(events, "sentence")) > len(openai_audio(server, "The capital of France is Paris."))


def test_word_timestamps_are_monotone_and_cover_the_text(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("words", voice=VOICE, output_format=S16, add_timestamps=True)
        for piece in PIECES:
            ctx.push(piece, seed=1)
        ctx.no_more_inputs()
        events = list(ctx.receive())
    stamps = [e.word_timestamps for e in events if e.type == "timestamps"]
    words = [w for s in stamps for w in s.words]
    starts = [t for s in stamps for t in s.start]
    ends = [t for s in stamps for t in s.end]
    duration = len(audio_of(events, "words")) / 2 / RATE
    assert words == TEXT.split()
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    assert starts[0] >= 0 and ends[-1] <= duration + 0.05


def test_unknown_voice_is_an_error_for_that_context_only(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        bad = conn.context("bad", voice={"mode": "id", "id": "nobody"}, output_format=S16)
        good = conn.context("good", voice=VOICE, output_format=S16)
        bad.push("Hello.")
        good.push(TEXT, seed=1)
        bad.no_more_inputs()  # after the error: ignored, not a second error
        good.no_more_inputs()
        failed = list(bad.receive())
        spoken = list(good.receive())
    assert [e.type for e in failed] == ["error"]
    error = failed[0]
    assert (error.context_id, error.status_code, error.title, error.error_code) == (
        "bad", 404, "Voice not found", "voice_not_found",
    )  # fmt: skip
    assert "nobody" in (error.message or "") and error.done is True and error.request_id
    assert spoken[-1].type == "done" and all(e.context_id == "good" for e in spoken)
    assert_same_pcm(audio_of(spoken, "good"), openai_audio(server, TEXT))


@pytest.mark.parametrize(
    ("output_format", "param"),
    [
        ({"container": "raw", "encoding": "pcm_s24le", "sample_rate": RATE}, "encoding"),
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12345}, "sample_rate"),
        ({"container": "mp3", "sample_rate": RATE}, "container"),
    ],
)
def test_bad_output_format_is_a_400_error_event(server: LiveServer, output_format: dict[str, Any], param: str) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("fmt", voice=VOICE, output_format=output_format)
        ctx.push("Hello.")
        events = list(ctx.receive())
    assert [(e.type, e.status_code, e.context_id) for e in events] == [("error", 400, "fmt")]
    assert param in (events[0].message or "")


def raw_connect(server: LiveServer) -> ClientConnection:
    return ws_connect(f"{ws_base(server)}/tts/websocket")


def receive_until(ws: ClientConnection, context_id: str) -> Iterator[dict[str, Any]]:
    while True:
        event = json.loads(ws.recv(timeout=30))
        yield event
        if event.get("context_id") == context_id and event["type"] in ("done", "error"):
            return


def test_malformed_messages_are_errors_and_the_connection_goes_on(server: LiveServer) -> None:
    generate = {"model_id": "sonic-3", "voice": VOICE, "output_format": S16, "seed": 1}
    with raw_connect(server) as ws:
        ws.send(json.dumps({**generate, "context_id": "ok", "transcript": "Hello there. ", "continue": True}))
        ws.send("this is not json")
        ws.send(b"\x00\x01")
        ws.send(json.dumps({"context_id": "nothing", "voice": VOICE}))
        ws.send(json.dumps({"cancel": True, "context_id": "never-opened"}))
        ws.send(json.dumps({**generate, "context_id": "ok", "transcript": "How are you today?", "continue": False}))
        events = list(receive_until(ws, "ok"))
    errors = [e for e in events if e["type"] == "error"]
    assert [(e.get("context_id"), e["status_code"]) for e in errors] == [(None, 400), (None, 400), ("nothing", 400)]
    assert all(e["title"] and e["message"] and e["done"] is True for e in errors)
    assert events[-1] == {"type": "done", "context_id": "ok", "done": True, "status_code": 206}
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    assert_same_pcm(audio, openai_audio(server, TEXT))


def test_text_after_the_end_of_input_is_an_error(server: LiveServer) -> None:
    with client_for(server).tts.websocket_connect() as conn:
        ctx = conn.context("closed", voice=VOICE, output_format=S16)
        ctx.send(transcript=LONG, voice=VOICE, continue_=False)
        ctx.send(transcript="More text.", voice=VOICE, continue_=False)  # the SDK's push() would refuse this
        events = list(ctx.receive())
    assert (events[-1].type, events[-1].status_code, events[-1].context_id) == ("error", 400, "closed")
    assert "continue=false" in (events[-1].message or "")


def test_each_utterance_names_its_request_id_on_its_audio_and_errors_name_the_connection(server: LiveServer) -> None:
    """Each flush group is one utterance with its own id, ``<X-Request-ID>-<n>``, on its chunks and timestamps."""
    conn_manager = client_for(server).tts.websocket_connect(extra_headers={"X-Request-ID": "car-ws"})
    with conn_manager as conn:
        ctx = conn.context("ids", voice=VOICE, output_format=S16, add_timestamps=True)
        ctx.push("Stay hungry, ", seed=1)
        ctx.push("", flush=True)
        ctx.push("stay foolish.", seed=1)
        ctx.no_more_inputs()
        events = list(ctx.receive())
        bad = conn.context("bad", voice={"mode": "id", "id": "nobody"}, output_format=S16)
        bad.push("Hello.")
        failed = list(bad.receive())
    audio = [e for e in events if e.type in ("chunk", "timestamps")]
    assert {e.type for e in audio} == {"chunk", "timestamps"}
    assert [(e.flush_id, getattr(e, "request_id", None)) for e in audio] == [
        (e.flush_id, f"car-ws-{e.flush_id}") for e in audio
    ] and {e.flush_id for e in audio} == {1, 2}
    assert [(e.type, e.request_id) for e in failed] == [("error", "car-ws")]


def active_streams(server: LiveServer) -> str:
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    return next(line for line in metrics.splitlines() if line.startswith("speakwire_active_streams{") and
                'protocol="cartesia"' in line)  # fmt: skip


def assert_slots_given_back(server: LiveServer) -> None:
    state = server.state
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (state.pipeline.active or state.pipeline.scheduler.busy):
        time.sleep(0.05)
    assert state.pipeline.active == 0 and state.pipeline.scheduler.queued == 0
    assert active_streams(server).endswith(" 0.0")


def test_admission_slots_are_given_back_on_every_path(server: LiveServer) -> None:
    generate = {"voice": VOICE, "output_format": S16, "seed": 1}
    with raw_connect(server) as ws:
        # Cancelled mid-speech, with a second flush group already admitted behind it.
        ws.send(json.dumps({**generate, "context_id": "cut", "transcript": LONG, "flush": True, "continue": True}))
        ws.send(json.dumps({**generate, "context_id": "cut", "transcript": LONG, "continue": True}))
        assert json.loads(ws.recv(timeout=30))["type"] == "chunk"
        ws.send(json.dumps({"cancel": True, "context_id": "cut"}))
        # Ended by an error while speaking: text after its end of input.
        ws.send(json.dumps({**generate, "context_id": "late", "transcript": LONG, "continue": False}))
        ws.send(json.dumps({**generate, "context_id": "late", "transcript": "More.", "continue": False}))
        events = list(receive_until(ws, "late"))
        assert (events[-1]["type"], events[-1]["status_code"]) == ("error", 400)
        # Spoken to its end.
        ws.send(json.dumps({**generate, "context_id": "whole", "transcript": "Hi.", "continue": False}))
        assert list(receive_until(ws, "whole"))[-1]["type"] == "done"
        assert_slots_given_back(server)
        # Left open mid-sentence, then the client goes.
        ws.send(json.dumps({**generate, "context_id": "open", "transcript": LONG + " And then", "continue": True}))
        assert json.loads(ws.recv(timeout=30))["type"] == "chunk"
    assert_slots_given_back(server)
    # HTTP: the reader leaves mid-stream.
    body = {"model_id": "sonic-3", "transcript": LONG, "voice": VOICE, "output_format": S16}
    with httpx.stream("POST", f"{server.url}/tts/bytes", json=body, timeout=30) as response:
        assert response.status_code == 200
        next(response.iter_raw())
    assert_slots_given_back(server)


# ----- HTTP --------------------------------------------------------------------------------


def test_tts_bytes_streams_raw_wav_and_mp3(server: LiveServer) -> None:
    client = client_for(server)
    raw = client.tts.generate(model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=S16,
                              extra_body={"seed": 1}).read()  # fmt: skip
    assert_same_pcm(raw, openai_audio(server, TEXT))
    wav = client.tts.generate(
        model_id="sonic-3", transcript=TEXT, voice=VOICE, extra_body={"seed": 1},
        output_format={"container": "wav", "encoding": "pcm_f32le", "sample_rate": 44100},
    ).read()  # fmt: skip
    samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    reference = len(openai_audio(server, TEXT, rate=44100)) // 2
    assert rate == 44100 and len(samples) == reference
    mp3_format: Any = {"container": "mp3", "sample_rate": 24000, "bit_rate": 128000}
    with client.tts.with_streaming_response.generate(
        model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=mp3_format, extra_body={"seed": 1}
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        mp3 = b"".join(response.iter_bytes())
    decoded, mp3_rate = decode(mp3, "mp3")
    assert mp3_rate == 24000 and abs(len(decoded) / 24000 - len(raw) / 2 / RATE) < 0.1


def test_tts_sse_sends_chunks_then_done(server: LiveServer) -> None:
    with client_for(server).tts.generate_sse(
        model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=S16, context_id="sse", extra_body={"seed": 1}
    ) as stream:
        events = list(stream)
    assert [e.type for e in events[:-1]] == ["chunk"] * (len(events) - 1) and events[-1].type == "done"
    assert all(e.context_id == "sse" for e in events)
    assert_same_pcm(b"".join(e.audio for e in events[:-1] if e.audio), openai_audio(server, TEXT))


def test_http_errors_come_in_cartesias_shape(server: LiveServer) -> None:
    client = client_for(server)
    with pytest.raises(NotFoundError) as missing:
        client.tts.generate(model_id="sonic-3", transcript=TEXT, voice={"mode": "id", "id": "nobody"},
                            output_format=S16)  # fmt: skip
    body = missing.value.body
    assert isinstance(body, dict) and body["error_code"] == "voice_not_found" and body["title"] == "Voice not found"
    assert "nobody" in body["message"] and body["request_id"]
    with pytest.raises(BadRequestError) as bad_rate:
        client.tts.generate(model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=ODD_RATE)
    assert "sample_rate" in str(bad_rate.value)
    with pytest.raises(BadRequestError):
        client.tts.generate(model_id="sonic-3", transcript="", voice=VOICE, output_format=S16)
    with pytest.raises(BadRequestError):  # SSE is raw only
        list(client.tts.generate_sse(model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=WAV_S16))
    response = httpx.post(f"{server.url}/tts/bytes", content=b"{nope", headers={"Cartesia-Version": "2026-08-14"})
    assert response.status_code == 400 and response.json()["error_code"] == "invalid_request"


def test_http_errors_and_sse_events_carry_the_x_request_id(server: LiveServer) -> None:
    client = client_for(server)
    with pytest.raises(NotFoundError) as missing:
        client.tts.generate(model_id="sonic-3", transcript=TEXT, voice={"mode": "id", "id": "nobody"},
                            output_format=S16, extra_headers={"X-Request-ID": "car-404"})  # fmt: skip
    assert missing.value.response.headers["x-request-id"] == "car-404"
    assert isinstance(missing.value.body, dict) and missing.value.body["request_id"] == "car-404"
    with client.tts.generate_sse(
        model_id="sonic-3", transcript=TEXT, voice=VOICE, output_format=S16, add_timestamps=True,
        extra_headers={"X-Request-ID": "car-sse"},
    ) as stream:  # fmt: skip
        events = list(stream)
    audio = [e for e in events if e.type in ("chunk", "timestamps")]
    assert {e.type for e in audio} == {"chunk", "timestamps"}
    assert {getattr(e, "request_id", None) for e in audio} == {"car-sse"}
    anonymous = httpx.post(f"{server.url}/tts/bytes", content=b"{nope", headers={"Cartesia-Version": "2026-08-14"})
    assert anonymous.json()["request_id"] == anonymous.headers["x-request-id"]


# ----- keys --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(api_key="sk_car_test"), engine=piper_engine)
    yield live
    live.stop()


def test_a_bad_key_is_refused_at_the_handshake_with_401(keyed: LiveServer) -> None:
    with pytest.raises(InvalidStatus) as refused, client_for(keyed, api_key="wrong").tts.websocket_connect() as conn:
        conn.context(voice=VOICE).push("Hi.")
    response = refused.value.response
    assert response.status_code == 401
    assert json.loads(response.body or b"{}")["title"] == "Invalid API key"
    with pytest.raises(AuthenticationError):
        client_for(keyed, api_key="wrong").tts.generate(model_id="sonic-3", transcript=TEXT, voice=VOICE,
                                                        output_format=S16)  # fmt: skip


def test_the_key_is_taken_from_bearer_x_api_key_or_the_query(keyed: LiveServer) -> None:
    with client_for(keyed, api_key="sk_car_test").tts.websocket_connect() as conn:
        ctx = conn.context(voice=VOICE, output_format=S16)
        ctx.push("Hi.")
        ctx.no_more_inputs()
        assert list(ctx.receive())[-1].type == "done"
    url = f"{ws_base(keyed)}/tts/websocket"
    for query, headers in (
        ("", {"X-API-Key": "sk_car_test"}),  # pipecat's CartesiaTTSService
        ("?api_key=sk_car_test&cartesia_version=2026-08-14", {}),  # Cartesia's documented handshake query
    ):
        with ws_connect(url + query, additional_headers=headers) as ws:
            ws.send(json.dumps({"context_id": "k", "transcript": "Hi.", "voice": VOICE, "output_format": S16}))
            assert list(receive_until(ws, "k"))[-1]["type"] == "done"
    audio = (
        client_for(keyed, api_key="sk_car_test")
        .tts.generate(model_id="sonic-3", transcript="Hi.", voice=VOICE, output_format=S16)
        .read()
    )
    assert len(audio) > 0


# ----- protocol, without I/O -----------------------------------------------------------------


def test_flush_ids_count_from_one_and_text_after_the_end_is_refused() -> None:
    state = p.ContextInput()

    def request(text: str, *, more: bool = True, flush: bool = False) -> p.Generate:
        return p.Generate("c", text, more, flush, {})

    assert state.receive(request("a")) == p.ContextStep("a", None, close=False)
    assert state.receive(request("", flush=True)) == p.ContextStep("", 1, close=False)
    assert state.receive(request("b", flush=True)) == p.ContextStep("b", 2, close=False)
    assert state.receive(request("", more=False)) == p.ContextStep("", None, close=True)
    assert state.receive(request("", more=False)) == p.ContextStep("", None, close=False)
    with pytest.raises(p.MessageError):
        state.receive(request("late"))


def test_output_formats_map_to_our_encoders() -> None:
    cases = {
        ("raw", "pcm_f32le"): "pcm_f32le", ("raw", "pcm_s16le"): "pcm", ("raw", "pcm_mulaw"): "ulaw",
        ("raw", "pcm_alaw"): "alaw", ("wav", "pcm_f32le"): "wav_f32le", ("wav", "pcm_s16le"): "wav",
        ("mp3", None): "mp3",
    }  # fmt: skip
    for (container, encoding), expected in cases.items():
        value = {"container": container, "encoding": encoding, "sample_rate": 44100}
        assert p.parse_output_format(value, ("raw", "wav", "mp3")).encoder_format == expected
    with pytest.raises(p.BadRequestError, match="wav container"):
        p.parse_output_format({"container": "wav", "encoding": "pcm_mulaw", "sample_rate": 8000}, ("wav",))
    assert (p.model_name("sonic-3"), p.model_name("sonic-latest"), p.model_name("tts-1")) == (None, None, "tts-1")
    assert (p.language_name("en"), p.language_name("en-GB"), p.language_name("xx")) == ("English", "English", "xx")
    assert p.voice_id("abc") == p.voice_id({"mode": "id", "id": "abc"}) == "abc"
