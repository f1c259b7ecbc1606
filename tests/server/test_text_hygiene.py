"""Text an engine must not see, over every protocol: it is cleaned away, and nothing else breaks."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect

from support.live_server import LiveServer

BAD = {
    "NUL": "Hello\x00 there, friend.",
    "lone surrogate": "Hello \ud800there, friend.",
    "controls": "Hello\x07\x1b there,\x0b friend.",
    "zero-width and bidi": "Hel\u200blo \u202ethere\u202c, fri\ufeffend.",
    "carriage returns": "Hello there,\r\nfriend.\r",
}


def _json(body: dict[str, object]) -> bytes:
    # ensure_ascii keeps a lone surrogate as the JSON escape "\ud800", as a client would send it
    return json.dumps(body, ensure_ascii=True).encode()


@pytest.mark.parametrize("text", list(BAD.values()), ids=list(BAD))
def test_http_speaks_text_with_characters_no_engine_may_see(server: LiveServer, text: str) -> None:
    body = _json({"input": text, "response_format": "pcm"})
    response = httpx.post(f"{server.url}/v1/audio/speech", content=body,
                          headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
    assert response.status_code == 200, response.text
    assert len(response.content) > 24_000  # well over half a second of 24 kHz s16le audio


@pytest.mark.parametrize("text", ["\x00\x01\x02", "\u200b\u202e\ufeff", "\ud800\udfff", "\x00 ... \x07"])
def test_http_input_with_nothing_left_to_say_is_a_400_that_says_so(server: LiveServer, text: str) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", content=_json({"input": text}),
                          headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input" and "nothing to speak" in error["message"]


async def _utterance(ws: object, pieces: list[str]) -> tuple[int, list[dict[str, object]]]:
    for piece in pieces:
        await ws.send(json.dumps({"type": "input.text", "text": piece}, ensure_ascii=True))  # type: ignore[attr-defined]
    await ws.send(json.dumps({"type": "input.done"}))  # type: ignore[attr-defined]
    audio, events = 0, []
    while not events or events[-1]["type"] != "session.done":
        message = await ws.recv()  # type: ignore[attr-defined]
        if isinstance(message, bytes):
            audio += len(message)
        else:
            events.append(json.loads(message))
    return audio, events


async def test_websocket_pieces_with_such_characters_are_spoken_and_the_session_goes_on(server: LiveServer) -> None:
    async with connect(f"ws://127.0.0.1:{server.settings.port}/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
        audio, events = await _utterance(ws, [piece + " " for piece in BAD.values()])
        assert audio > 0 and not [e for e in events if e["type"] == "error"]
        again, events = await _utterance(ws, ["And again."])  # the same socket still serves
        assert again > 0 and not [e for e in events if e["type"] == "error"]


def test_sagemaker_invocations_speak_such_text(server: LiveServer) -> None:
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/speech"}
    body = _json({"input": BAD["NUL"], "response_format": "wav"})
    response = httpx.post(f"{server.url}/invocations", content=body, headers=headers, timeout=60)
    assert response.status_code == 200 and response.content[:4] == b"RIFF"
