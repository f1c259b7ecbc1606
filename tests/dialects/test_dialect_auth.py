"""One API key, carried in each vendor's own header, refused in each vendor's own error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

KEY = "sekret-key"
ROUTES = [
    # (path, body, header carrying the key, field of the vendor's 401 body)
    ("/v1/text-to-speech/alloy", {"text": "Hi."}, {"xi-api-key": KEY}, "detail"),
    ("/tts/bytes", {"model_id": "sonic-2", "transcript": "Hi.", "voice": {"mode": "id", "id": "alloy"},
                    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}},
     {"x-api-key": KEY}, "error_code"),
    ("/v1/speak?encoding=linear16&sample_rate=16000", {"text": "Hi."}, {"authorization": f"Token {KEY}"}, "err_code"),
    ("/v1/audio/speech", {"input": "Hi.", "response_format": "pcm"}, {"authorization": f"Bearer {KEY}"}, "error"),
    # Baseten's scheme (LiveKit's Baseten plugins send it), accepted wherever a key is.
    ("/v1/audio/speech", {"input": "Hi.", "response_format": "pcm"}, {"authorization": f"Api-Key {KEY}"}, "error"),
]  # fmt: skip


@pytest.fixture(scope="module")
def keyed(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(api_key=KEY), engine=piper_engine)
    yield live
    live.stop()


@pytest.mark.parametrize(("path", "body", "header", "field"), ROUTES)
def test_each_dialect_takes_the_key_in_its_own_header(
    keyed: LiveServer, path: str, body: dict, header: dict, field: str
) -> None:
    ok = httpx.post(f"{keyed.url}{path}", json=body, headers=header, timeout=60)
    assert ok.status_code == 200, ok.text
    assert len(ok.content) > 1000


@pytest.mark.parametrize(("path", "body", "header", "field"), ROUTES)
def test_a_wrong_key_is_refused_in_the_vendors_error_shape(
    keyed: LiveServer, path: str, body: dict, header: dict, field: str
) -> None:
    wrong = {name: value.replace(KEY, "wrong") for name, value in header.items()}
    refused = httpx.post(f"{keyed.url}{path}", json=body, headers=wrong, timeout=60)
    assert refused.status_code == 401
    assert field in refused.json()
    assert KEY not in refused.text


async def stream_events(url: str, header: str, *, speak: bool) -> tuple[list[dict], int | None]:
    """Open the speech stream with ``Authorization: header`` and configure it (and speak "Hi." if ``speak``); the
    JSON events through the first ``session.done`` or the close, and the close code."""
    events: list[dict] = []
    async with connect(url, additional_headers={"Authorization": header}) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        if speak:  # a refused client sends nothing more: its socket may close meanwhile
            await ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
            await ws.send(json.dumps({"type": "input.done"}))
        try:
            async with asyncio.timeout(60):
                while not events or events[-1]["type"] != "session.done":
                    message = await ws.recv()
                    if isinstance(message, str):
                        events.append(json.loads(message))
        except ConnectionClosed:
            pass
        return events, ws.close_code


async def test_the_speech_stream_takes_basetens_api_key_scheme_and_refuses_a_wrong_key_as_before(
    keyed: LiveServer,
) -> None:
    spoken, _ = await stream_events(keyed.ws_url, f"Api-Key {KEY}", speak=True)
    assert [e["type"] for e in spoken] == ["audio.start", "audio.done", "session.done"]
    for header in (f"Api-Key wrong-{KEY}", f"Bearer wrong-{KEY}"):  # the same refusal whatever the scheme
        refused, code = await stream_events(keyed.ws_url, header, speak=False)
        assert [(e["type"], e["code"]) for e in refused] == [("error", "unauthorized")]
        assert code == 1008
