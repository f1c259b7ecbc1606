"""LiveKit's Baseten Qwen3-TTS plugin with its defaults, and its voice library calls, against a Piper server.

``baseten.TTS(model="qwen3-tts")`` asks for ``task_type: "Base"`` and a voice name by default: on an engine that
cannot clone, a named voice with no reference speaks that voice. ``qwen3_tts.register_voice`` / ``list_voices``
send ``voice.add`` / ``voice.list`` as the first message of a socket of their own; the server answers from its voice
library, by the rules ``POST /v1/audio/voices`` applies, and a bad ``voice.add`` is an ``error`` event after which
the session goes on. Real loopback server (its own data dir), real Piper voice, the plugin unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import pytest
import websockets.exceptions
from livekit.agents import APIConnectOptions, APIStatusError
from livekit.plugins import baseten
from livekit.plugins.baseten import qwen3_tts
from websockets.asyncio.client import ClientConnection, connect

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

RATE = 24000
REFERENCE_TEXT = "This is my voice, recorded for the test, and I agree to its use."


@pytest.fixture(scope="module")
def library_server(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A Piper server with a library of its own, seeded so one text always gives the same audio."""
    data_dir = tmp_path_factory.mktemp("baseten-voices") / "data"
    live = start_server(Settings(data_dir=str(data_dir), default_seed=7), engine=piper_engine)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def builtin_voice(library_server: LiveServer) -> str:
    voice: str = httpx.get(f"{library_server.url}/v1/audio/voices", timeout=30).json()["default_voice"]
    return voice


@pytest.fixture(scope="module")
def reference_wav(library_server: LiveServer, builtin_voice: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real WAV of speech, made by the server itself."""
    response = httpx.post(f"{library_server.url}/v1/audio/speech", timeout=60,
                          json={"input": REFERENCE_TEXT, "voice": builtin_voice, "response_format": "wav"})  # fmt: skip
    assert response.status_code == 200, response.text
    path = tmp_path_factory.mktemp("reference") / "jane.wav"
    path.write_bytes(response.content)
    return path


@pytest.fixture(scope="module")
def reference_b64(reference_wav: Path) -> str:
    return base64.b64encode(reference_wav.read_bytes()).decode()


async def plugin_audio(
    server: LiveServer,
    voice: str,
    pieces: list[str | None] | None = None,
    *,
    text: str = REFERENCE_TEXT,
    **options: Any,
) -> bytes:
    """PCM from ``baseten.TTS(model="qwen3-tts", voice=voice, **options)``: ``synthesize(text)`` when ``pieces``
    is None, else ``stream()`` fed ``pieces`` (``None`` entries are flushes), then ``end_input()``."""
    http = aiohttp.ClientSession()  # outside an agent worker the plugin needs one handed in
    tts = baseten.TTS(model="qwen3-tts", model_endpoint=server.ws_url, api_key="local", voice=voice,
                      http_session=http, **options)  # fmt: skip
    pcm, rates = bytearray(), set()
    try:
        async with asyncio.timeout(120):
            if pieces is None:
                stream: Any = tts.synthesize(text, conn_options=APIConnectOptions(max_retry=0))
            else:
                stream = tts.stream(conn_options=APIConnectOptions(max_retry=0))
                for piece in pieces:
                    if piece is None:
                        stream.flush()
                    else:
                        stream.push_text(piece)
                stream.end_input()
            try:
                async for event in stream:
                    pcm += event.frame.data.tobytes()
                    rates.add(event.frame.sample_rate)
            finally:
                await stream.aclose()
    finally:
        await tts.aclose()
        await http.close()
    assert rates == {RATE}
    return bytes(pcm)


def test_the_plugins_defaults_speak_a_named_voice_as_customvoice_does(
    library_server: LiveServer, builtin_voice: str
) -> None:
    text = "This is my voice. It was recorded for the test."

    async def speak_all() -> tuple[bytes, bytes, bytes]:
        default = await plugin_audio(library_server, builtin_voice, text=text)  # task_type "Base", no reference
        preset = await plugin_audio(library_server, builtin_voice, text=text, task_type="CustomVoice")
        # stream(): pieces, then a flush (LiveKit drops text pushed after a flush: one segment per stream).
        streamed = await plugin_audio(library_server, builtin_voice, ["This is my ", "voice. It was ", "recorded ",
                                                                      "for the test.", None])  # fmt: skip
        return default, preset, streamed

    default, preset, streamed = asyncio.run(speak_all())
    assert len(default) > RATE * 2  # more than a second of speech
    # Seeded: the same voice, the same audio, to the last bit but for rounding (the 22.05 -> 24 kHz resampler runs
    # per chunk, and where chunks end depends on timing: a few samples may differ by 1).
    assert len(default) == len(preset)
    difference = np.abs(np.frombuffer(default, np.int16).astype(np.int32) - np.frombuffer(preset, np.int16))
    assert difference.max() <= 2 and np.count_nonzero(difference) < len(difference) // 1000
    # The turn ended, so the flush's input.done was answered with session.done (the plugin waits for it), and both
    # sentences were spoken (how pieces are cut into segments depends on when they arrive, so not sample-equal).
    assert len(streamed) > RATE * 2


async def test_base_with_a_reference_is_still_refused_by_an_engine_that_cannot_clone(
    library_server: LiveServer, builtin_voice: str, reference_b64: str
) -> None:
    config = {"type": "session.config", "task_type": "Base", "voice": builtin_voice, "response_format": "pcm",
              "stream_audio": True, "ref_audio": f"data:audio/wav;base64,{reference_b64}",
              "ref_text": REFERENCE_TEXT}  # fmt: skip
    async with connect(library_server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps(config))
        error = json.loads(await asyncio.wait_for(ws.recv(), 60))
    assert (error["type"], error["code"]) == ("error", "invalid_config")
    assert "cannot clone voices" in error["message"]


async def control(server: LiveServer, message: dict[str, Any]) -> dict[str, Any]:
    """What the plugin's ``_control`` does: one message on a fresh socket, one reply."""
    async with connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps(message))
        reply: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 60))
        return reply


def test_register_voice_saves_it_and_list_voices_lists_it_as_the_http_catalogue_does(
    library_server: LiveServer, builtin_voice: str, reference_wav: Path
) -> None:
    endpoint = library_server.ws_url

    async def register_and_list() -> tuple[dict[str, Any], dict[str, Any]]:
        voice = await qwen3_tts.register_voice(model_endpoint=endpoint, name="jane", ref_audio_path=str(reference_wav),
                                               ref_text=REFERENCE_TEXT, api_key="local")  # fmt: skip
        return voice, await qwen3_tts.list_voices(model_endpoint=endpoint, api_key="local")

    voice, listed = asyncio.run(register_and_list())
    assert voice["name"] == "jane" and voice["consent"] == "user_consent"  # the plugin's default consent
    assert voice["ref_text"] == REFERENCE_TEXT and voice["mime_type"] == "audio/wav"
    assert listed["type"] == "voice.listed" and builtin_voice in listed["voices"]
    assert [v["name"] for v in listed["uploaded_voices"]].count("jane") == 1
    http = httpx.get(f"{library_server.url}/v1/audio/voices", timeout=30).json()
    assert {k: v for k, v in listed.items() if k != "type"} == http  # one catalogue, whichever way it is asked
    assert next(v for v in http["uploaded_voices"] if v["name"] == "jane") == voice

    # Speaking with the clone on Piper: the request names a saved voice, so its reference is sent to an engine that
    # cannot clone, and the plugin gets the protocol's error saying so.
    with pytest.raises(APIStatusError, match="cannot clone voices"):
        asyncio.run(plugin_audio(library_server, "jane"))


async def next_json(ws: ClientConnection) -> dict[str, Any]:
    while True:
        message = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(message, str):
            event: dict[str, Any] = json.loads(message)
            return event


async def test_bad_voice_adds_get_error_events_and_the_session_goes_on(
    library_server: LiveServer, reference_b64: str
) -> None:
    clip = reference_b64
    good = {"type": "voice.add", "name": "bob", "consent": "Bob recorded this and agreed.", "audio_data": clip,
            "audio_format": "wav"}  # fmt: skip
    bad = [
        ({**good, "consent": ""}, "consent", "invalid_voice"),
        ({**good, "audio_data": "not base64 at all!"}, "audio_data", "invalid_voice"),
        ({**good, "audio_data": base64.b64encode(b"hello, not audio " * 200).decode()}, "audio_data", "invalid_voice"),
        ({**good, "name": "../bob"}, "name", "invalid_voice"),
        ({**good, "transcript": "x"}, "transcript", "invalid_voice"),
    ]
    async with connect(library_server.ws_url, max_size=None) as ws:
        for message, param, code in bad:  # before any session.config, as the plugin sends them
            await ws.send(json.dumps(message))
            error = await next_json(ws)
            assert (error["type"], error["param"], error["code"], error["success"]) == ("error", param, code, False)
            assert error["message"].startswith("voice.add failed: ")
        await ws.send(json.dumps(good))
        added = await next_json(ws)
        assert (added["type"], added["success"], added["voice"]["name"]) == ("voice.added", True, "bob")
        await ws.send(json.dumps({**good, "name": "BOB"}))  # names ignore case
        taken = await next_json(ws)
        assert (taken["type"], taken["code"], taken["param"]) == ("error", "voice_exists", "name")
        await ws.send(json.dumps({"type": "voice.list"}))
        listed = await next_json(ws)
        assert [v["name"] for v in listed["uploaded_voices"]].count("bob") == 1

        # The same socket still speaks.
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        await ws.send(json.dumps({"type": "input.text", "text": "Still here."}))
        await ws.send(json.dumps({"type": "input.done"}))
        events = [(await next_json(ws))["type"] for _ in range(3)]
        assert events == ["audio.start", "audio.done", "session.done"]


async def test_a_clip_sized_message_is_not_read_before_the_api_key(piper_engine: PiperEngine, tmp_path: Path) -> None:
    """A voice.add over the config limit (4 MiB) from a client that has not given the key is refused unparsed (1008);
    with the key (Baseten's ``Authorization: Api-Key``) the same size is read (off the event loop) and answered."""
    keyed = start_server(Settings(data_dir=str(tmp_path / "data"), api_key="k3y"), engine=piper_engine)
    junk = base64.b64encode(b"\x01\x02 not audio " * 400_000).decode()  # ~7 MB of base64, under voice.add's 14 MiB
    big = json.dumps({"type": "voice.add", "name": "big", "consent": "I agree.", "audio_data": junk})
    try:
        async with connect(keyed.ws_url, max_size=None) as ws:
            await ws.send(big)
            refusal = await next_json(ws)
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                await ws.recv()
        assert (refusal["type"], refusal["code"]) == ("error", "unauthorized") and ws.close_code == 1008
        assert "exceeds" in refusal["message"]  # refused for its size, before its JSON was read
        async with connect(keyed.ws_url, max_size=None, additional_headers={"Authorization": "Api-Key k3y"}) as ws:
            await ws.send(big)
            error = await next_json(ws)
            assert (error["type"], error["code"], error["param"]) == ("error", "invalid_voice", "audio_data")
            await ws.send(json.dumps({"type": "voice.list"}))  # the session goes on
            assert (await next_json(ws))["type"] == "voice.listed"
    finally:
        keyed.stop()
