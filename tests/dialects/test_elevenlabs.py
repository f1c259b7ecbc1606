"""The official elevenlabs SDK speaks to speakwire unchanged: stream-input, the HTTP routes, and
multi-stream-input driven the way pipecat drives it (the SDK has no client for that one)."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import av
import httpx
import numpy as np
import pytest
import websockets.exceptions
import websockets.sync.client
from elevenlabs import VoiceSettings
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError
from elevenlabs.errors.unprocessable_entity_error import UnprocessableEntityError

from speakwire.engines.piper import PiperEngine
from speakwire.server.elevenlabs.alignment import CharacterAligner, ws_alignment
from speakwire.settings import Settings
from speakwire.text.alignment import WordTiming
from support.audio import decode
from support.live_server import LiveServer, start_server

TEXT = "Hello from the ElevenLabs SDK. It speaks on speakwire."
UNKNOWN_VOICE = "UnknownVoiceId000000"
"""Shaped like an ElevenLabs voice id, and none of the premade ids (Rachel's and the rest mean the default voice)."""
LONG = " ".join(f"This is sentence number {n} of a long answer that keeps going." for n in range(1, 6))
PCM_BYTES_PER_S = 24000 * 2


def client_for(server: LiveServer, api_key: str = "unused") -> ElevenLabs:
    client = ElevenLabs(api_key=api_key, base_url=server.url)
    client.text_to_speech._ws_base_url = server.url.replace("http://", "ws://")  # the SDK forces wss:// otherwise
    return client


def http_pcm(server: LiveServer, text: str, rate: int = 24000, seed: int | None = 1, speed: float = 1.0) -> bytes:
    """Our own OpenAI route, the reference every ElevenLabs route must match."""
    body = {"input": text, "voice": "alloy", "response_format": "pcm", "sample_rate": rate, "seed": seed,
            "speed": speed}  # fmt: skip
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def ws_url(server: LiveServer, route: str = "stream-input", voice: str = "alloy", **query: object) -> str:
    query = {"model_id": "eleven_flash_v2_5", "output_format": "pcm_24000", **query}
    base = server.url.replace("http://", "ws://")
    return f"{base}/v1/text-to-speech/{voice}/{route}?{urlencode(query)}"


def connect(url: str, **kwargs: Any) -> websockets.sync.client.ClientConnection:
    return websockets.sync.client.connect(url, open_timeout=30, max_size=16 * 1024 * 1024, **kwargs)


def send(ws: websockets.sync.client.ClientConnection, **message: object) -> None:
    ws.send(json.dumps(message))


def messages_until_close(ws: websockets.sync.client.ClientConnection) -> list[dict[str, Any]]:
    out = []
    try:
        while True:
            out.append(json.loads(ws.recv(timeout=60)))
    except websockets.exceptions.ConnectionClosed:
        return out


def audio_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))


def same_audio(a: bytes, b: bytes) -> bool:
    """Same engine, same seed: the same samples. Exactly as long; equal within the 1e-3 that Piper allows its
    streamed windows (a sentence is windowed or not depending on how much audio the listener has buffered)."""
    x, y = np.frombuffer(a, "<i2").astype(np.int32), np.frombuffer(b, "<i2").astype(np.int32)
    return len(x) == len(y) and (len(x) == 0 or int(np.abs(x - y).max()) <= 33)


def within(measured_s: float, reference_s: float, tolerance: float = 0.1) -> bool:
    """Piper samples its phoneme durations (VITS noise) unless seeded, so unseeded lengths vary by a few %."""
    return abs(measured_s - reference_s) <= tolerance * reference_s


@pytest.fixture(scope="module")
def keyed_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(api_key="xi-k3y"), engine=piper_engine)
    yield live
    live.stop()


# ----- stream-input through the SDK -------------------------------------------------------------


def test_convert_realtime_gives_the_http_pcm_duration(server: LiveServer) -> None:
    pieces = iter(["Hello from the ", "ElevenLabs SDK. It speaks ", "on speakwire."])
    audio = b"".join(
        client_for(server).text_to_speech.convert_realtime(
            voice_id="alloy", text=pieces, model_id="eleven_flash_v2_5", output_format="pcm_24000"
        )
    )
    reference = http_pcm(server, TEXT, seed=None)
    assert len(audio) % 2 == 0 and len(audio) > PCM_BYTES_PER_S
    assert within(len(audio) / PCM_BYTES_PER_S, len(reference) / PCM_BYTES_PER_S)


def test_convert_realtime_default_is_mp3_at_44100(server: LiveServer) -> None:
    audio = b"".join(client_for(server).text_to_speech.convert_realtime(voice_id="en_US-joe-medium",
                                                                        text=iter([TEXT])))  # fmt: skip
    samples, rate = decode(audio, "mp3")
    assert rate == 44100
    assert within(len(samples) / rate, len(http_pcm(server, TEXT, seed=None)) / PCM_BYTES_PER_S, 0.15)


def test_seeded_stream_input_is_exactly_the_http_audio_then_final_and_1000(server: LiveServer) -> None:
    with connect(ws_url(server, seed=1)) as ws:
        send(ws, text=" ", generation_config={"chunk_length_schedule": [50]}, try_trigger_generation=True)
        for piece in ("Hello from the ", "ElevenLabs SDK. It speaks ", "on speakwire. "):
            send(ws, text=piece, try_trigger_generation=True)
        send(ws, text="")
        messages = messages_until_close(ws)
        assert ws.close_code == 1000
    assert messages[-1] == {"isFinal": True}
    assert all("audio" in m for m in messages[:-1]) and len(messages) > 2
    assert same_audio(audio_of(messages), http_pcm(server, TEXT))


def test_flush_speaks_buffered_text_before_the_end_of_input(server: LiveServer) -> None:
    with connect(ws_url(server, seed=1)) as ws:
        send(ws, text=" ")
        send(ws, text="Hello there with no full stop", flush=True)
        first = json.loads(ws.recv(timeout=60))  # audio comes while the input is still open
        assert first.get("audio")
        send(ws, text="And a second part.")
        send(ws, text="")
        rest = messages_until_close(ws)
    audio = audio_of([first, *rest])
    # The flush cut the text in two utterances, each spoken whole, in order.
    assert same_audio(audio, http_pcm(server, "Hello there with no full stop") + http_pcm(server, "And a second part."))
    assert rest[-1] == {"isFinal": True}


def test_voice_settings_speed_is_honoured(server: LiveServer) -> None:
    with connect(ws_url(server, seed=1)) as ws:
        send(ws, text=" ", voice_settings={"stability": 0.5, "similarity_boost": 0.8, "speed": 1.2})
        send(ws, text=TEXT)
        send(ws, text="")
        audio = audio_of(messages_until_close(ws))
    assert same_audio(audio, http_pcm(server, TEXT, speed=1.2))
    assert len(audio) < 0.95 * len(http_pcm(server, TEXT))
    http = b"".join(
        client_for(server).text_to_speech.convert(
            voice_id="alloy", text=TEXT, seed=1, output_format="pcm_24000", voice_settings=VoiceSettings(speed=1.2)
        )
    )
    assert same_audio(http, audio)


def test_stream_input_alignment_is_monotone_and_covers_the_text(server: LiveServer) -> None:
    with connect(ws_url(server, sync_alignment="true")) as ws:
        send(ws, text=" ")
        for piece in ("Hello from the ", "ElevenLabs SDK. It speaks ", "on speakwire. "):
            send(ws, text=piece)
        send(ws, text="")
        messages = messages_until_close(ws)
    chars: list[str] = []
    starts: list[float] = []
    offset_ms = 0.0
    for message in messages[:-1]:
        chunk_ms = len(base64.b64decode(message["audio"])) / PCM_BYTES_PER_S * 1000
        alignment = message["alignment"]
        assert message["normalizedAlignment"] == alignment
        if alignment is None:  # no word starts in it: a sentence's last few samples
            offset_ms += chunk_ms
            continue
        chars += alignment["chars"]
        starts += [offset_ms + start for start in alignment["charStartTimesMs"]]
        assert all(d >= 0 for d in alignment["charDurationsMs"])
        # Each chunk's last character ends where the chunk ends (pipecat adds these up).
        end_ms = alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1]
        assert abs(end_ms - chunk_ms) <= 1
        offset_ms += chunk_ms
    assert "".join(chars).split() == TEXT.split()
    assert starts == sorted(starts)


# ----- HTTP through the SDK -------------------------------------------------------------------


def test_http_convert_with_seed_is_exactly_our_pcm(server: LiveServer) -> None:
    audio = b"".join(client_for(server).text_to_speech.convert(voice_id="alloy", text=TEXT, seed=1,
                                                               output_format="pcm_24000"))  # fmt: skip
    assert same_audio(audio, http_pcm(server, TEXT))


@pytest.mark.parametrize(("output_format", "fmt", "rate", "bit_rate"),
                         [("mp3_44100_128", "mp3", 44100, 128000), ("mp3_22050_32", "mp3", 22050, 32000),
                          ("pcm_16000", "pcm", 16000, None), ("ulaw_8000", "ulaw", 8000, None)])  # fmt: skip
def test_http_output_formats_have_their_rate_and_bitrate(
    server: LiveServer, output_format: str, fmt: str, rate: int, bit_rate: int | None
) -> None:
    client = client_for(server)
    audio = b"".join(client.text_to_speech.convert(voice_id="alloy", text=TEXT, seed=1, output_format=output_format))
    samples, decoded_rate = decode(audio, fmt, rate)
    assert decoded_rate == rate
    assert within(len(samples) / rate, len(http_pcm(server, TEXT)) / PCM_BYTES_PER_S, 0.05)
    if bit_rate is not None:
        with av.open(io.BytesIO(audio)) as container:
            assert container.streams.audio[0].bit_rate == bit_rate


def test_http_stream_sends_audio_as_it_is_produced(server: LiveServer) -> None:
    chunks = list(client_for(server).text_to_speech.stream(voice_id="alloy", text=LONG, seed=1,
                                                           output_format="pcm_24000"))  # fmt: skip
    assert len(chunks) > 1
    assert same_audio(b"".join(chunks), http_pcm(server, LONG))


def test_http_stream_with_timestamps_chunks_join_to_the_audio(server: LiveServer) -> None:
    chunks = list(client_for(server).text_to_speech.stream_with_timestamps(
        voice_id="alloy", text=TEXT, seed=1, output_format="pcm_24000"))  # fmt: skip
    audio = b"".join(base64.b64decode(chunk.audio_base_64) for chunk in chunks)
    assert len(chunks) > 1 and same_audio(audio, http_pcm(server, TEXT))


def test_http_timestamps_are_monotone_and_cover_the_text(server: LiveServer) -> None:
    client = client_for(server)
    chunks = list(client.text_to_speech.stream_with_timestamps(voice_id="alloy", text=TEXT, seed=1,
                                                               output_format="pcm_24000"))  # fmt: skip
    aligned = [chunk.alignment for chunk in chunks if chunk.alignment is not None]
    chars = [c for a in aligned for c in a.characters]
    starts = [s for a in aligned for s in a.character_start_times_seconds]
    ends = [e for a in aligned for e in a.character_end_times_seconds]
    assert "".join(chars) == TEXT
    assert starts == sorted(starts) and all(e >= s for s, e in zip(starts, ends, strict=True))
    assert ends[-1] <= len(http_pcm(server, TEXT)) / PCM_BYTES_PER_S + 0.01
    whole = client.text_to_speech.convert_with_timestamps(voice_id="alloy", text=TEXT, seed=1,
                                                          output_format="pcm_24000")  # fmt: skip
    assert whole.alignment is not None and "".join(whole.alignment.characters) == TEXT
    assert same_audio(base64.b64decode(whole.audio_base_64), http_pcm(server, TEXT))


def test_http_errors_have_elevenlabs_shape(server: LiveServer) -> None:
    client = client_for(server)
    with pytest.raises(ApiError) as missing:
        b"".join(client.text_to_speech.convert(voice_id=UNKNOWN_VOICE, text=TEXT))
    assert missing.value.status_code == 404
    assert missing.value.body["detail"]["status"] == "voice_not_found"
    assert UNKNOWN_VOICE in missing.value.body["detail"]["message"]
    with pytest.raises(UnprocessableEntityError) as bad_format:
        b"".join(client.text_to_speech.stream(voice_id="alloy", text=TEXT, output_format="mp3_11025_8"))
    assert bad_format.value.body["detail"][0]["loc"] == ["query", "output_format"]
    with pytest.raises(ApiError) as empty:
        b"".join(client.text_to_speech.convert(voice_id="alloy", text="   "))
    assert empty.value.status_code == 400 and empty.value.body["detail"]["status"] == "invalid_request"
    # Unknown fields are ignored; ElevenLabs model ids mean the served model; other models must exist.
    response = httpx.post(
        f"{server.url}/v1/text-to-speech/alloy?output_format=pcm_16000",
        timeout=60,
        json={"text": "Hi there.", "model_id": "eleven_multilingual_v2", "future_field": 1},
    )
    assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
    response = httpx.post(f"{server.url}/v1/text-to-speech/alloy", json={"text": "Hi.", "model_id": "nope"})
    assert response.status_code == 404 and response.json()["detail"]["status"] == "model_not_found"


def test_http_needs_the_key_when_configured(keyed_server: LiveServer) -> None:
    with pytest.raises(ApiError) as denied:
        b"".join(client_for(keyed_server, "wrong").text_to_speech.convert(voice_id="alloy", text=TEXT))
    assert denied.value.status_code == 401
    assert denied.value.body == {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}}
    audio = b"".join(client_for(keyed_server, "xi-k3y").text_to_speech.convert(voice_id="alloy", text="Hi there."))
    assert audio


# ----- stream-input errors ---------------------------------------------------------------------


def test_bad_key_is_an_api_error_and_the_key_may_come_in_the_first_message(keyed_server: LiveServer) -> None:
    with pytest.raises(ApiError):
        b"".join(client_for(keyed_server, "wrong").text_to_speech.convert_realtime(voice_id="alloy",
                                                                                   text=iter([TEXT])))  # fmt: skip
    with connect(ws_url(keyed_server)) as ws:
        send(ws, text=" ")
        messages = messages_until_close(ws)
        assert ws.close_code == 1008
    assert messages == [{"message": "Invalid API key", "error": "invalid_api_key", "code": 1008}]
    with connect(ws_url(keyed_server)) as ws:
        send(ws, **{"text": " ", "xi-api-key": "xi-k3y"})
        send(ws, text="Hi there.")
        send(ws, text="")
        messages = messages_until_close(ws)
        assert ws.close_code == 1000
    assert audio_of(messages) and messages[-1] == {"isFinal": True}
    audio = b"".join(client_for(keyed_server, "xi-k3y").text_to_speech.convert_realtime(
        voice_id="alloy", text=iter(["Hi there."]), output_format="pcm_16000"))  # fmt: skip
    assert audio


@pytest.mark.parametrize(("voice", "query", "error"), [(UNKNOWN_VOICE, {}, "voice_not_found"),
                                                       ("alloy", {"output_format": "mp3_11025_8"},
                                                        "invalid_output_format"),
                                                       ("alloy", {"inactivity_timeout": 500}, "invalid_request"),
                                                       ("alloy", {"model_id": "nope"}, "model_not_found")])  # fmt: skip
def test_stream_input_refusals_are_api_errors(server: LiveServer, voice: str, query: dict[str, Any],
                                              error: str) -> None:  # fmt: skip
    sdk_args = {k: v for k, v in query.items() if k in ("model_id", "output_format")}
    if sdk_args or not query:  # the SDK can send only these two
        with pytest.raises(ApiError):
            b"".join(client_for(server).text_to_speech.convert_realtime(voice_id=voice, text=iter([TEXT]),
                                                                        **sdk_args))  # fmt: skip
    with connect(ws_url(server, voice=voice, **query)) as ws:
        messages = messages_until_close(ws)
        assert ws.close_code == 1008
    assert len(messages) == 1 and messages[0]["error"] == error and messages[0]["code"] == 1008


def test_a_bad_message_ends_only_its_own_session(server: LiveServer) -> None:
    with connect(ws_url(server, seed=1)) as good, connect(ws_url(server)) as bad:
        send(good, text=" ")
        send(good, text=TEXT)
        bad.send("{not json")
        broken = messages_until_close(bad)
        assert bad.close_code == 1008 and broken[-1]["error"] == "invalid_input_message"
        send(good, text="")
        assert same_audio(audio_of(messages_until_close(good)), http_pcm(server, TEXT))


# ----- multi-stream-input, the way pipecat drives it ------------------------------------------------


def multi(server: LiveServer, **query: object) -> websockets.sync.client.ClientConnection:
    return connect(ws_url(server, "multi-stream-input", auto_mode="true", seed=1, **query),
                   additional_headers={"xi-api-key": "unused"})  # fmt: skip


def by_context(messages: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    grouped: dict[str | None, list[dict[str, Any]]] = {}
    for message in messages:
        grouped.setdefault(message["contextId"], []).append(message)
    return grouped


def test_close_context_mid_speech_stops_it_and_the_other_context_completes(server: LiveServer) -> None:
    messages: list[dict[str, Any]] = []
    with multi(server) as ws:
        send(ws, text=" ", context_id="a", voice_settings={"speed": 1.0})
        send(ws, text=LONG + " ", context_id="a")
        send(ws, text=" ", context_id="b")
        send(ws, text=TEXT + " ", context_id="b")
        send(ws, context_id="b", flush=True)  # flushed, then closed: b is spoken to the end
        send(ws, context_id="b", close_context=True)
        send(ws, text="")  # pipecat's connection keep-alive names no context
        closed = False
        finals: set[str] = set()
        while finals != {"a", "b"}:
            message = json.loads(ws.recv(timeout=60))
            messages.append(message)
            if message.get("isFinal"):
                finals.add(message["contextId"])
            elif message["contextId"] == "a" and not closed:
                send(ws, context_id="a", close_context=True)  # barge-in
                closed = True
        send(ws, close_socket=True)
        assert messages_until_close(ws) == []
        assert ws.close_code == 1000
    grouped = by_context(messages)
    assert set(grouped) == {"a", "b"}
    for context in ("a", "b"):  # isFinal is each context's last message, after its audio
        assert grouped[context][-1] == {"isFinal": True, "contextId": context}
        assert all(m.get("audio") for m in grouped[context][:-1])
    assert len(audio_of(grouped["a"])) < 0.5 * len(http_pcm(server, LONG))
    assert same_audio(audio_of(grouped["b"]), http_pcm(server, TEXT))


def test_flush_then_close_context_speaks_everything_as_pipecat_expects(server: LiveServer) -> None:
    with multi(server) as ws:
        send(ws, text=" ", context_id="turn-1")
        for sentence in ("Hello from the ElevenLabs SDK. ", "It speaks on speakwire. "):
            send(ws, text=sentence, context_id="turn-1")
        send(ws, context_id="turn-1", flush=True)  # pipecat ends a turn with flush and close_context together
        send(ws, context_id="turn-1", close_context=True)
        messages = []
        while not messages or not messages[-1].get("isFinal"):
            messages.append(json.loads(ws.recv(timeout=60)))
        send(ws, text="", context_id="turn-1")  # a keep-alive for a closed context changes nothing
        # The same id may be used again, for a new context.
        send(ws, text="Again. ", context_id="turn-1", flush=True)
        again = []
        while not again or not again[-1].get("isFinal"):
            again.append(json.loads(ws.recv(timeout=60)))
            if len(again) == 1:
                send(ws, context_id="turn-1", close_context=True)
    assert all(m["contextId"] == "turn-1" for m in messages + again)
    assert same_audio(audio_of(messages), http_pcm(server, TEXT))
    assert same_audio(audio_of(again), http_pcm(server, "Again."))


def test_multi_stream_needs_the_key_and_refuses_a_bad_voice(keyed_server: LiveServer) -> None:
    with connect(ws_url(keyed_server, "multi-stream-input")) as ws:
        send(ws, text=" ", context_id="a")
        messages = messages_until_close(ws)
        assert ws.close_code == 1008 and messages[0]["error"] == "invalid_api_key"
    url = ws_url(keyed_server, "multi-stream-input", voice="nobody")
    with connect(url, additional_headers={"xi-api-key": "xi-k3y"}) as ws:
        messages = messages_until_close(ws)
        assert ws.close_code == 1008 and messages[0]["error"] == "voice_not_found"


def test_an_idle_context_is_closed_after_the_inactivity_timeout(server: LiveServer) -> None:
    with multi(server, inactivity_timeout=1) as ws:
        send(ws, text="Hello there. ", context_id="a", flush=True)
        messages = []
        while not messages or not messages[-1].get("isFinal"):
            messages.append(json.loads(ws.recv(timeout=60)))
        assert messages[-1] == {"isFinal": True, "contextId": "a"}
        rest = messages_until_close(ws)  # then nothing at all for the timeout: the connection ends
        assert ws.close_code == 1008 and rest[-1]["error"] == "input_timeout_exceeded"


def test_stream_input_without_text_ends_after_the_inactivity_timeout(server: LiveServer) -> None:
    with connect(ws_url(server, inactivity_timeout=1)) as ws:
        send(ws, text=" ")
        messages = messages_until_close(ws)
        assert ws.close_code == 1008
    assert messages[-1]["error"] == "input_timeout_exceeded" and "1 seconds" in messages[-1]["message"]


def test_sessions_run_side_by_side(server: LiveServer) -> None:
    results: dict[int, bytes] = {}

    def speak(n: int) -> None:
        with connect(ws_url(server, seed=1)) as ws:
            send(ws, text=" ")
            send(ws, text=f"Session number {n} is speaking.")
            send(ws, text="")
            results[n] = audio_of(messages_until_close(ws))

    threads = [threading.Thread(target=speak, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert {n: len(a) for n, a in results.items()} == {
        n: len(http_pcm(server, f"Session number {n} is speaking.")) for n in range(3)
    }


def test_a_client_that_leaves_mid_speech_leaves_nothing_running(server: LiveServer) -> None:
    for route in ("stream-input", "multi-stream-input"):
        with connect(ws_url(server, route)) as ws:
            send(ws, text=" ", context_id="a")
            send(ws, text=LONG, context_id="a", flush=True)
            if route == "stream-input":
                send(ws, text="")
            assert json.loads(ws.recv(timeout=60)).get("audio")
    deadline = time.monotonic() + 10
    while server.state.pipeline.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.state.pipeline.active == 0


# ----- request ids ------------------------------------------------------------------------------


def wait_idle(server: LiveServer) -> int:
    """The pipeline's active utterances once the server has let go of what it was doing (0 when none leaked)."""
    deadline = time.monotonic() + 10
    while server.state.pipeline.active and time.monotonic() < deadline:
        time.sleep(0.05)
    active: int = server.state.pipeline.active
    return active


def test_http_responses_name_their_request_in_request_id_as_elevenlabs_does(server: LiveServer) -> None:
    raw = client_for(server).text_to_speech.with_raw_response
    options = {"additional_headers": {"X-Request-ID": "el-http-1"}}
    with raw.convert(voice_id="alloy", text=TEXT, output_format="pcm_24000", request_options=options) as response:
        assert b"".join(response.data)
        assert response.headers["request-id"] == response.headers["x-request-id"] == "el-http-1"
    with raw.stream(voice_id="alloy", text=TEXT, output_format="pcm_24000") as streamed:
        assert b"".join(streamed.data)
        assert streamed.headers["request-id"] == streamed.headers["x-request-id"]
    with raw.stream_with_timestamps(voice_id="alloy", text=TEXT, output_format="pcm_24000") as timed:
        assert list(timed.data)
        assert timed.headers["request-id"] == timed.headers["x-request-id"]
    whole = raw.convert_with_timestamps(voice_id="alloy", text=TEXT, output_format="pcm_24000")
    assert whole.headers["request-id"] == whole.headers["x-request-id"]
    with pytest.raises(ApiError) as missing:
        b"".join(client_for(server).text_to_speech.convert(voice_id=UNKNOWN_VOICE, text=TEXT,
                                                           request_options=options))  # fmt: skip
    assert missing.value.headers is not None and missing.value.headers["request-id"] == "el-http-1"
    assert wait_idle(server) == 0


@pytest.mark.parametrize("route", ["stream-input", "multi-stream-input"])
def test_each_websocket_utterance_sends_its_request_id_on_its_audio(server: LiveServer, route: str) -> None:
    multi = route == "multi-stream-input"
    with connect(ws_url(server, route), additional_headers={"X-Request-ID": "el-ws-7"}) as ws:
        assert ws.response is not None and ws.response.headers["x-request-id"] == "el-ws-7"
        send(ws, text=" ", context_id="a")
        send(ws, text="First utterance.", context_id="a", flush=True)
        send(ws, text="Second utterance.", context_id="a", flush=True)  # a flush ends an utterance
        if multi:
            send(ws, close_socket=True)
        else:
            send(ws, text="")
        messages = messages_until_close(ws)
    audio = [m for m in messages if m.get("audio")]
    ids = [m["requestId"] for m in audio]
    assert ids == sorted(ids) and set(ids) == {"el-ws-7-1", "el-ws-7-2"}
    assert all(("contextId" in m) == multi for m in audio)
    assert "requestId" not in messages[-1]  # isFinal is the context's, as ElevenLabs sends it
    assert wait_idle(server) == 0


def test_the_sdk_still_reads_audio_that_names_its_request(server: LiveServer) -> None:
    audio = b"".join(client_for(server).text_to_speech.convert_realtime(
        voice_id="alloy", text=iter(["Hello there. ", "How are you?"]), model_id="eleven_flash_v2_5",
        output_format="pcm_24000"))  # fmt: skip
    assert within(len(audio) / PCM_BYTES_PER_S, len(http_pcm(server, "Hello there. How are you?")) / PCM_BYTES_PER_S)


# ----- admission slots -------------------------------------------------------------------------


def test_admission_slots_are_given_back_on_every_websocket_path(server: LiveServer) -> None:
    # A bad message while an utterance is speaking: the error, 1008, and the utterance cancelled.
    with connect(ws_url(server)) as ws:
        send(ws, text=" ")
        send(ws, text=LONG, flush=True)
        assert json.loads(ws.recv(timeout=60)).get("audio")
        ws.send("not json")
        assert messages_until_close(ws)[-1]["error"] == "invalid_input_message"
    assert wait_idle(server) == 0
    # Unflushed text of a closed context (cancelled before it spoke), then the socket closed.
    with connect(ws_url(server, "multi-stream-input")) as ws:
        send(ws, text=" ", context_id="x")
        send(ws, text="Never flushed, never spoken", context_id="x")
        send(ws, context_id="x", close_context=True)
        send(ws, close_socket=True)
        assert messages_until_close(ws) == [{"isFinal": True, "contextId": "x"}]
    assert wait_idle(server) == 0
    # Text over the context's limit: the utterance it was going into is released with the connection.
    with connect(ws_url(server)) as ws:
        send(ws, text=" ")
        for _ in range(4):
            send(ws, text="word " * 6000)
        assert messages_until_close(ws)[-1]["error"] == "max_character_limit_exceeded"
    assert wait_idle(server) == 0


def test_admission_slots_are_given_back_on_every_http_path(server: LiveServer) -> None:
    body = {"text": LONG, "seed": 1}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for route in ("stream", "stream/with-timestamps"):
            with http.stream("POST", f"/v1/text-to-speech/alloy/{route}?output_format=pcm_24000", json=body) as r:
                assert r.status_code == 200
                next(r.iter_bytes())  # the client leaves mid-stream
        assert wait_idle(server) == 0
        for route in ("", "/with-timestamps", "/stream", "/stream/with-timestamps"):
            assert http.post(f"/v1/text-to-speech/alloy{route}", json=body).status_code == 200
            assert http.post(f"/v1/text-to-speech/alloy{route}?output_format=pcm_1", json=body).status_code == 422
        assert wait_idle(server) == 0


# ----- alignment from word timings (no server) -------------------------------------------------------


def test_alignment_places_every_character_once_in_order_and_chunks_end_where_their_audio_ends() -> None:
    text = "Hello there, world. "
    aligner = CharacterAligner()
    aligner.add_text(text)
    words = [WordTiming("Hello", 0, 5, 0.05, 0.40), WordTiming("there,", 6, 12, 0.45, 0.80),
             WordTiming("world.", 13, 19, 0.95, 1.30)]  # fmt: skip
    first = aligner.place(words[:2], chunk_end_s=0.6)  # "there," runs past the first chunk's end
    second = aligner.place(words[2:], chunk_end_s=1.5)
    assert "".join(c.char for c in first + second) == text
    starts = [c.start_s for c in first + second]
    assert starts == sorted(starts) and all(c.end_s >= c.start_s for c in first + second)
    chunk = ws_alignment(first, 0.0, 0.6)
    assert chunk is not None and chunk["chars"] == list("Hello there, ")
    assert chunk["charStartTimesMs"][0] == 50
    assert chunk["charStartTimesMs"][-1] + chunk["charDurationsMs"][-1] == 600
    later = ws_alignment(second, 0.6, 1.5)
    assert later is not None and later["charStartTimesMs"][0] == 350  # relative to its own chunk
    assert later["charStartTimesMs"][-1] + later["charDurationsMs"][-1] == 900
    assert ws_alignment([], 0.0, 0.5) is None
    assert aligner.finish(1.5) == []


def test_alignment_without_word_timings_is_null() -> None:
    aligner = CharacterAligner()
    aligner.add_text("No timings here.")
    assert aligner.place((), chunk_end_s=1.0) == [] and aligner.finish(1.0) == []
