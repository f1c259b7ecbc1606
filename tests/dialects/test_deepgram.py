"""The official deepgram-sdk speaks to speakwire unchanged: Aura's /v1/speak WebSocket and REST endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.exceptions
import websockets.sync.client
from deepgram import AsyncDeepgramClient, DeepgramClient, DeepgramClientEnvironment
from deepgram.core.api_error import ApiError
from deepgram.speak.v1 import SpeakV1Text

from speakwire.engines.piper import PiperEngine
from speakwire.server.deepgram import protocol as p
from speakwire.settings import Settings
from support.audio import decode
from support.live_server import LiveServer, start_server

SEED = {"additional_query_parameters": {"seed": 1}}
"""Our ``seed`` extension: noise-free synthesis, so the same text gives the same samples on every route."""
TWO_SENTENCES = "Hello from the Deepgram SDK. It speaks on speakwire."
LONG = " ".join(f"This is sentence number {n} of a long answer that keeps going." for n in range(1, 9))


def environment(server: LiveServer) -> DeepgramClientEnvironment:
    host = f"127.0.0.1:{server.settings.port}"
    return DeepgramClientEnvironment(base=f"http://{host}", production=f"ws://{host}", agent=f"ws://{host}",
                                     agent_rest=f"http://{host}")  # fmt: skip


def client_for(server: LiveServer, api_key: str = "unused") -> DeepgramClient:
    return DeepgramClient(api_key=api_key, environment=environment(server))


def http_audio(server: LiveServer, text: str, fmt: str = "pcm", rate: int = 24000) -> bytes:
    body = {"input": text, "response_format": fmt, "sample_rate": rate, "seed": 1}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def until(socket: Any, kind: str) -> list[Any]:
    """Messages (audio bytes and parsed events) up to and including the first event of ``kind``."""
    items: list[Any] = []
    for message in socket:
        items.append(message)
        if not isinstance(message, bytes) and message.type == kind:
            return items
    raise AssertionError(f"socket closed before {kind}")


def audio_of(items: list[Any]) -> bytes:
    return b"".join(item for item in items if isinstance(item, bytes))


def events_of(items: list[Any]) -> list[Any]:
    return [item for item in items if not isinstance(item, bytes)]


@pytest.fixture(scope="module")
def keyed_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(api_key="dg-k3y"), engine=piper_engine)
    yield live
    live.stop()


# ----- WebSocket ----------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "rate", "fmt"), [("linear16", 24000, "pcm"), ("linear16", 16000, "pcm"),
                                                       ("mulaw", 8000, "ulaw"), ("alaw", 8000, "alaw")])  # fmt: skip
def test_speak_and_flush_give_the_http_audio_then_flushed(server: LiveServer, encoding: str, rate: int,
                                                          fmt: str) -> None:  # fmt: skip
    with client_for(server).speak.v1.connect(model="aura-2-thalia-en", encoding=encoding, sample_rate=rate,
                                             request_options=SEED) as socket:  # fmt: skip
        socket.send_text(SpeakV1Text(text=TWO_SENTENCES))
        socket.send_flush()
        items = until(socket, "Flushed")
        socket.send_close()
    first = items[0]
    assert first.type == "Metadata" and first.model_name == "aura-2-thalia-en"
    assert first.request_id and first.model_uuid and first.model_version
    assert [e.type for e in events_of(items)] == ["Metadata", "Flushed"] and items[-1].sequence_id == 0
    # Same engine, same seed: exactly the samples our OpenAI route gives, in the asked encoding and rate.
    assert audio_of(items) == http_audio(server, TWO_SENTENCES, fmt, rate)


def test_text_fed_in_pieces_is_one_utterance_and_flushes_count(server: LiveServer) -> None:
    pieces = ["Hello from ", "the Deepgram", " SDK. It speaks", " on speakwire."]
    with client_for(server).speak.v1.connect(request_options=SEED) as socket:
        until(socket, "Metadata")
        for piece in pieces:
            socket.send_text(SpeakV1Text(text=piece))
        socket.send_flush()
        first = until(socket, "Flushed")
        socket.send_flush()  # nothing buffered: answered at once, with the next id
        empty = until(socket, "Flushed")
        socket.send_text(SpeakV1Text(text="Again."))
        socket.send_flush()
        third = until(socket, "Flushed")
    assert audio_of(first) == http_audio(server, "".join(pieces))
    assert first[-1].sequence_id == 0 and empty == [empty[-1]] and empty[-1].sequence_id == 1
    assert third[-1].sequence_id == 2 and audio_of(third) == http_audio(server, "Again.")


def test_our_voice_names_work_as_the_model(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect(model="en_US-joe-medium", request_options=SEED) as socket:
        socket.send_text(SpeakV1Text(text="Joe speaks."))
        socket.send_flush()
        items = until(socket, "Flushed")
    assert items[0].model_name == "en_US-joe-medium"
    assert audio_of(items) == http_audio(server, "Joe speaks.")


def test_clear_stops_the_audio_now_and_the_next_speak_works(server: LiveServer) -> None:
    full = len(http_audio(server, LONG))
    with client_for(server).speak.v1.connect(request_options=SEED) as socket:
        until(socket, "Metadata")
        socket.send_text(SpeakV1Text(text=LONG))
        socket.send_flush()
        before = []
        for message in socket:  # wait until audio is flowing
            before.append(message)
            if isinstance(message, bytes):
                break
        socket.send_clear()
        cleared = until(socket, "Cleared")
        socket.send_text(SpeakV1Text(text="A new answer."))
        socket.send_flush()
        after = until(socket, "Flushed")
    assert [e.type for e in events_of(cleared)] == ["Cleared"]  # the dropped flush is never answered
    assert cleared[-1].sequence_id == 1  # one flush so far: every id below 1 is done or dropped
    assert len(audio_of(before) + audio_of(cleared)) < full
    assert isinstance(after[0], bytes) and after[-1].sequence_id == 1
    assert audio_of(after) == http_audio(server, "A new answer.")
    assert _settles(server)


def test_clear_drops_every_queued_flush_even_empty_ones(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect() as socket:
        until(socket, "Metadata")
        socket.send_text(SpeakV1Text(text=LONG))
        socket.send_flush()
        socket.send_flush()  # an empty flush queued behind the long answer
        next(m for m in socket if isinstance(m, bytes))
        socket.send_clear()
        cleared = until(socket, "Cleared")
    assert [e.type for e in events_of(cleared)] == ["Cleared"] and cleared[-1].sequence_id == 2


def test_close_closes_the_socket_now_with_1000(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect() as socket:
        until(socket, "Metadata")
        socket.send_text(SpeakV1Text(text=LONG))
        socket.send_flush()
        next(m for m in socket if isinstance(m, bytes))
        socket.send_close()
        rest = list(socket)  # iteration ends when the server closes
        assert socket._websocket.close_code == 1000
    assert not any(not isinstance(m, bytes) and m.type == "Flushed" for m in rest)
    assert _settles(server)


def test_bad_messages_get_warnings_and_the_session_goes_on(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect(request_options=SEED) as socket, \
            client_for(server).speak.v1.connect(request_options=SEED) as other:  # fmt: skip
        until(socket, "Metadata")
        raw = socket._websocket
        bad: list[str | bytes] = ['{"type": "Speek", "text": "hi"}', "not json", b"\x00\x01",
                                  json.dumps({"type": "Speak", "text": "x" * 2001}), '{"type": "Speak"}']  # fmt: skip
        for message in bad:
            raw.send(message)
        warnings = [next(m for m in socket if not isinstance(m, bytes)) for _ in bad]
        socket.send_text(SpeakV1Text(text="Still here."))
        socket.send_flush()
        items = until(socket, "Flushed")
        other.send_text(SpeakV1Text(text="Me too."))
        other.send_flush()
        others = until(other, "Flushed")
    assert [w.type for w in warnings] == ["Warning"] * len(bad)
    codes = [w.code for w in warnings]
    assert codes == ["UNKNOWN_MESSAGE_TYPE", "INVALID_JSON", "BINARY_NOT_SUPPORTED", "TEXT_LENGTH_EXCEEDED",
                     "INVALID_MESSAGE"]  # fmt: skip
    assert all(w.description for w in warnings) and "2000" in warnings[3].description
    assert warnings[0].warn_code == "UNKNOWN_MESSAGE_TYPE"  # Deepgram's own field names ride along
    assert audio_of(items) == http_audio(server, "Still here.")
    assert audio_of(others) == http_audio(server, "Me too.")


def test_a_client_that_leaves_mid_speech_leaves_nothing_running(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect() as socket:
        socket.send_text(SpeakV1Text(text=LONG))
        socket.send_flush()
        next(m for m in socket if isinstance(m, bytes))
    assert _settles(server)


def test_metadata_is_the_connections_request_id_and_flushed_names_its_utterance(server: LiveServer) -> None:
    options: Any = {**SEED, "additional_headers": {"X-Request-ID": "dg-ws-abc"}}
    with client_for(server).speak.v1.connect(request_options=options) as socket:
        metadata = until(socket, "Metadata")[-1]
        assert socket._websocket.response.headers["dg-request-id"] == "dg-ws-abc"
        socket.send_text(SpeakV1Text(text="Hello there."))
        socket.send_flush()
        first = until(socket, "Flushed")[-1]
        socket.send_flush()  # nothing buffered: no utterance to name
        empty = until(socket, "Flushed")[-1]
        socket.send_text(SpeakV1Text(text="Again."))
        socket.send_flush()
        second = until(socket, "Flushed")[-1]
    assert metadata.request_id == "dg-ws-abc"
    ids = [getattr(flushed, "request_id", None) for flushed in (first, empty, second)]
    assert ids == ["dg-ws-abc-1", None, "dg-ws-abc-2"]


def active_streams(server: LiveServer) -> str:
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    return next(line for line in metrics.splitlines() if line.startswith("speakwire_active_streams{") and
                'protocol="deepgram"' in line)  # fmt: skip


def test_admission_slots_are_given_back_on_clear_close_and_a_reader_leaving(server: LiveServer) -> None:
    with client_for(server).speak.v1.connect() as socket:
        until(socket, "Metadata")
        socket.send_text(SpeakV1Text(text=LONG))
        socket.send_flush()
        socket.send_text(SpeakV1Text(text=LONG))  # a second utterance admitted behind it, never flushed
        next(m for m in socket if isinstance(m, bytes))
        socket.send_clear()
        until(socket, "Cleared")
        assert _settles(server) and active_streams(server).endswith(" 0.0")
        socket.send_text(SpeakV1Text(text=LONG))  # open, unflushed, when the client closes
        socket.send_close()
        list(socket)
    assert _settles(server) and active_streams(server).endswith(" 0.0")
    with httpx.stream("POST", f"{server.url}/v1/speak?encoding=linear16", json={"text": LONG}, timeout=30) as response:
        assert response.status_code == 200
        next(response.iter_raw())
    assert _settles(server) and active_streams(server).endswith(" 0.0")


def _settles(server: LiveServer, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = server.state
        if state.pipeline.active == 0 and state.pipeline.scheduler.busy == 0:
            return True
        time.sleep(0.05)
    return False


# ----- refused handshakes -------------------------------------------------------------------


def _refusal(server: LiveServer, query: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    url = f"ws://127.0.0.1:{server.settings.port}/v1/speak?{query}"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        websockets.sync.client.connect(url, additional_headers=headers or {})
    response = refused.value.response
    assert response.headers["dg-request-id"]
    return response.status_code, json.loads(response.body or b"{}")


def test_a_bad_key_is_refused_with_401_as_deepgram_does(keyed_server: LiveServer) -> None:
    # The sync SDK lets websockets' InvalidStatus through (its compat import finds the legacy class);
    # the async one wraps it in ApiError. Both carry the 401.
    refused = pytest.raises((ApiError, websockets.exceptions.InvalidStatus))
    with refused as sync_refused, client_for(keyed_server, "wrong").speak.v1.connect():
        pass
    error = sync_refused.value
    status = error.status_code if isinstance(error, ApiError) else error.response.status_code
    assert status == 401

    async def connect_async() -> None:
        client = AsyncDeepgramClient(api_key="wrong", environment=environment(keyed_server))
        async with client.speak.v1.connect():
            pass

    with pytest.raises(ApiError) as async_refused:
        asyncio.run(connect_async())
    assert async_refused.value.status_code == 401

    status, body = _refusal(keyed_server, "model=aura-2-thalia-en", {"Authorization": "Token wrong"})
    assert status == 401 and body["err_code"] == "INVALID_AUTH" and body["request_id"]


def test_the_key_is_taken_from_token_bearer_query_and_subprotocol(keyed_server: LiveServer) -> None:
    def metadata(socket: Any) -> Any:
        return until(socket, "Metadata")[0]

    with client_for(keyed_server, "dg-k3y").speak.v1.connect() as socket:
        assert metadata(socket).type == "Metadata"
    bearer = DeepgramClient(access_token="dg-k3y", environment=environment(keyed_server))
    with bearer.speak.v1.connect() as socket:
        assert metadata(socket).type == "Metadata"
    base = f"ws://127.0.0.1:{keyed_server.settings.port}/v1/speak"
    with websockets.sync.client.connect(f"{base}?token=dg-k3y") as raw:
        assert json.loads(raw.recv())["type"] == "Metadata"
    with websockets.sync.client.connect(base, subprotocols=["token", "dg-k3y"]) as raw:  # type: ignore[list-item]
        assert raw.subprotocol == "token" and json.loads(raw.recv())["type"] == "Metadata"


@pytest.mark.parametrize(
    ("query", "needle"),
    [("encoding=mp3", "encoding"), ("encoding=mulaw&sample_rate=24000", "sample_rate"),
     ("sample_rate=12345", "sample_rate"), ("model=nobody", "nobody"), ("speed=fast", "speed"),
     ("speed=9", "speed")],
)  # fmt: skip
def test_bad_parameters_are_refused_with_400(server: LiveServer, query: str, needle: str) -> None:
    status, body = _refusal(server, query)
    assert status == 400 and body["err_code"] == "INVALID_QUERY_PARAMETER" and needle in body["err_msg"]
    with pytest.raises(ApiError) as refused:
        asyncio.run(_async_connect(server, query))
    assert refused.value.status_code == 400


async def _async_connect(server: LiveServer, query: str) -> None:
    params = dict(part.split("=") for part in query.split("&"))
    client = AsyncDeepgramClient(api_key="unused", environment=environment(server))
    async with client.speak.v1.connect(request_options={"additional_query_parameters": params}):
        pass


# ----- REST ---------------------------------------------------------------------------------


def test_rest_speak_through_the_sdk(server: LiveServer) -> None:
    client = client_for(server)
    pcm = b"".join(client.speak.v1.audio.generate(text=TWO_SENTENCES, encoding="linear16", container="none",
                                                  sample_rate=24000, request_options=SEED))  # fmt: skip
    assert pcm == http_audio(server, TWO_SENTENCES)
    raw = client.speak.v1.audio.with_raw_response
    with raw.generate(text=TWO_SENTENCES, model="aura-2-thalia-en", request_options=SEED) as response:
        mp3 = b"".join(response.data)
        headers = response.headers
    assert headers["content-type"] == "audio/mpeg"  # Deepgram's default: MP3 at 22050 Hz
    assert headers["dg-model-name"] == "aura-2-thalia-en" and headers["dg-request-id"]
    assert headers["dg-char-count"] == str(len(TWO_SENTENCES)) and headers["dg-model-uuid"]
    samples, rate = decode(mp3, "mp3")
    assert rate == 22050 and len(samples) / rate == pytest.approx(len(pcm) / 2 / 24000, abs=0.1)


@pytest.mark.parametrize(("encoding", "container", "fmt", "rate"), [("linear16", None, "wav", 24000),
                                                                    ("mulaw", None, "wav", 8000),
                                                                    ("alaw", "wav", "wav", 16000),
                                                                    ("mulaw", "none", "ulaw", 8000),
                                                                    ("opus", None, "opus", 48000),
                                                                    ("flac", None, "flac", 48000),
                                                                    ("aac", None, "aac", 22050)])  # fmt: skip
def test_rest_encodings_and_containers(server: LiveServer, encoding: str, container: str | None, fmt: str,
                                       rate: int) -> None:  # fmt: skip
    query = {"encoding": encoding, "seed": "1", **({"container": container} if container else {})}
    if encoding == "alaw":
        query["sample_rate"] = str(rate)
    response = httpx.post(f"{server.url}/v1/speak", params=query, json={"text": "Short and sweet."}, timeout=60)
    assert response.status_code == 200, response.text
    samples, decoded_rate = decode(response.content, fmt, rate)
    assert decoded_rate == rate
    expected = len(http_audio(server, "Short and sweet.")) / 2 / 24000
    assert len(samples) / rate == pytest.approx(expected, abs=0.1)


@pytest.mark.parametrize(
    ("query", "body", "status", "code"),
    [({"encoding": "wma"}, {"text": "Hi."}, 400, "INVALID_QUERY_PARAMETER"),
     ({"encoding": "mp3", "sample_rate": "48000"}, {"text": "Hi."}, 400, "INVALID_QUERY_PARAMETER"),
     ({"encoding": "mp3", "container": "wav"}, {"text": "Hi."}, 400, "INVALID_QUERY_PARAMETER"),
     ({"model": "nobody"}, {"text": "Hi."}, 400, "INVALID_QUERY_PARAMETER"),
     ({}, {"text": "   "}, 400, "BAD_REQUEST"), ({}, {"input": "Hi."}, 400, "BAD_REQUEST"),
     ({}, {"text": "x " * 6000}, 413, "PAYLOAD_TOO_LARGE")],
)  # fmt: skip
def test_rest_errors_have_deepgrams_shape(server: LiveServer, query: dict[str, str], body: dict[str, str],
                                          status: int, code: str) -> None:  # fmt: skip
    response = httpx.post(f"{server.url}/v1/speak", params=query, json=body, timeout=30)
    assert response.status_code == status
    error = response.json()
    assert set(error) == {"err_code", "err_msg", "request_id"} and error["err_code"] == code
    assert response.headers["dg-request-id"] == error["request_id"] and response.headers["dg-error"]


def test_rest_errors_through_the_sdk(server: LiveServer, keyed_server: LiveServer) -> None:
    with pytest.raises(ApiError) as bad:
        b"".join(client_for(server).speak.v1.audio.generate(text="Hi.", encoding="wma"))
    assert bad.value.status_code == 400 and bad.value.body["err_code"] == "INVALID_QUERY_PARAMETER"
    with pytest.raises(ApiError) as unauthorized:
        b"".join(client_for(keyed_server, "wrong").speak.v1.audio.generate(text="Hi."))
    assert unauthorized.value.status_code == 401
    audio = b"".join(client_for(keyed_server, "dg-k3y").speak.v1.audio.generate(text="Hi.", encoding="linear16"))
    assert audio[:4] == b"RIFF"


# ----- the sans-I/O core ---------------------------------------------------------------------


def test_query_defaults_follow_deepgram() -> None:
    ws = p.parse_ws_query({})
    assert (ws.encoding, ws.sample_rate, ws.response_format) == ("linear16", 24000, "pcm")
    assert p.parse_ws_query({"encoding": "mulaw"}).sample_rate == 8000
    rest = p.parse_rest_query({})
    assert (rest.encoding, rest.container, rest.sample_rate, rest.response_format) == ("mp3", "none", 22050, "mp3")
    linear = p.parse_rest_query({"encoding": "linear16"})
    assert (linear.container, linear.response_format, linear.wav_prefix()) == ("wav", "wav", b"")
    assert p.parse_rest_query({"encoding": "opus"}).container == "ogg"
    assert p.parse_rest_query({"sample_rate": "22050.0"}).sample_rate == 22050
    with pytest.raises(p.DeepgramError):
        p.parse_rest_query({"callback": "https://example.com/hook"})


def test_model_names_map_to_our_models_and_voices() -> None:
    served = ["piper/en_US-joe-medium"]
    assert p.speech_target(None, served) == (None, None)
    # Aura names are voices: resolve_speech maps them to the default voice (speakwire.voice_presets).
    assert p.speech_target("aura-2-thalia-en", served) == (None, "aura-2-thalia-en")
    assert p.speech_target("aura-asteria-en", served) == (None, "aura-asteria-en")
    assert p.speech_target("PIPER/en_US-joe-medium", served) == ("PIPER/en_US-joe-medium", None)
    assert p.speech_target("my-saved-voice", served) == (None, "my-saved-voice")


def test_g711_wav_header_is_read_by_ffmpeg() -> None:
    data = p.g711_wav_header("alaw", 16000) + bytes([0xD5]) * 1600
    samples, rate = decode(data, "wav")
    assert rate == 16000 and len(samples) == 1600 and float(abs(samples).max()) < 0.01


def test_sequence_ids_count_flushes() -> None:
    sequence = p.FlushSequence()
    assert sequence.watermark() == 0
    assert [sequence.next_flush(), sequence.next_flush()] == [0, 1] and sequence.watermark() == 2
