"""A JSON body nested deeper than the parser recurses is bad JSON on every HTTP route, never a 500.

CPython's JSON decoder raises ``RecursionError`` past the interpreter's recursion limit, not
``json.JSONDecodeError``; the WebSocket dialects' fuzzers found it (``server/json_message.py``). The routes that
read their own body (every dialect's but FastAPI's models) answer it here as each answers any bad JSON.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from speakwire.engines.piper import PiperEngine
from support.live_server import LiveServer, start_server

DEEP = b"[" * 100_000
"""Far past CPython's recursion limit (1,000), well under the body limit."""

ROUTES = [
    ("/v1/audio/speech", 400),  # OpenAI
    ("/v1/text-to-speech/alloy", 422),  # ElevenLabs answers bad JSON as a validation error
    ("/tts/bytes", 400),  # Cartesia
    ("/v1/speak", 400),  # Deepgram
    ("/v1/magpie/invocations", 400),  # NVIDIA Magpie
    ("/v1/audio/voices", 400),  # the voice library
    ("/invocations", 400),  # SageMaker's one route, which peeks at the body to choose a dialect
]


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(engine=piper_engine)
    yield live
    live.stop()


@pytest.mark.parametrize(("path", "status"), ROUTES)
def test_deeply_nested_json_is_answered_as_bad_json(server: LiveServer, path: str, status: int) -> None:
    response = httpx.post(f"{server.url}{path}", content=DEEP, headers={"Content-Type": "application/json"},
                          timeout=30)  # fmt: skip
    assert response.status_code == status, response.text
    # The server goes on: a following request is answered as usual.
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
