"""Every route refuses a body over the server's limit with a 413, whether declared, chunked or multipart."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def small_limit_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(max_body_bytes=LIMIT), engine=piper_engine)
    yield live
    live.stop()


def _too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    body = response.json()
    error = body["error"] if isinstance(body["error"], dict) else body  # the voices API's flat error shape
    assert error["type"] == "PayloadTooLargeError" and "over 1 MiB" in error["message"]


def test_a_declared_body_over_the_limit_is_refused(small_limit_server: LiveServer) -> None:
    body = json.dumps({"input": "Hello.", "padding": "x" * (LIMIT + 10)})
    _too_large(httpx.post(f"{small_limit_server.url}/v1/audio/speech", content=body,
                          headers={"Content-Type": "application/json"}, timeout=30))  # fmt: skip


def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives(small_limit_server: LiveServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"input": "Hello.", "padding": "'
        for _ in range(20):
            yield b"x" * 100_000
        yield b'"}'

    _too_large(httpx.post(f"{small_limit_server.url}/v1/audio/speech", content=chunks(),
                          headers={"Content-Type": "application/json"}, timeout=30))  # fmt: skip


def test_a_multipart_upload_over_the_limit_is_refused(small_limit_server: LiveServer) -> None:
    files = {"audio_sample": ("big.wav", b"\0" * (LIMIT + 10), "audio/wav")}
    _too_large(httpx.post(f"{small_limit_server.url}/v1/audio/voices", data={"name": "big"}, files=files, timeout=30))


def test_bodies_under_the_limit_are_served(small_limit_server: LiveServer) -> None:
    response = httpx.post(f"{small_limit_server.url}/v1/audio/speech",
                          json={"input": "Hello there.", "response_format": "pcm"}, timeout=30)  # fmt: skip
    assert response.status_code == 200 and len(response.content) > 0
