"""Request ids end to end (server.request_ids), over real loopback servers and the real Piper voice.

Every HTTP response names its request in ``x-request-id`` (the client's ``X-Request-ID`` when sane, else a new
one), whichever route family answers it and however (a file, a raw or SSE stream, an error from a handler, a
middleware or Starlette itself); dialects with an id of their own send the same one; log lines name it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
import websockets.exceptions
import websockets.sync.client
from livekit.plugins import openai as livekit_openai

from speakwire.cli.serve import uvicorn_config
from speakwire.engines.piper import PiperEngine
from speakwire.server.app import create_app
from speakwire.server.request_ids import (
    NO_REQUEST,
    RequestIdFilter,
    accepted_request_id,
    bound,
    current_request_id,
    is_sane,
)
from speakwire.settings import Settings
from support.live_server import LiveServer, free_port, start_server

SPEECH = {"input": "Hello there.", "voice": "alloy", "seed": 1}
CARTESIA = {
    "model_id": "sonic-3", "transcript": "Hello there.", "voice": {"mode": "id", "id": "alloy"},
    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
}  # fmt: skip
CARTESIA_VERSION = {"Cartesia-Version": "2026-08-14"}
SAGEMAKER_ROUTE = "X-Amzn-SageMaker-Custom-Attributes"


def is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def call(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request, its body read whole (a stream is read to its end, so its id is checked after the last part)."""
    return httpx.request(method, f"{server.url}{path}", timeout=60, **kwargs)


ROUTES: dict[str, tuple[str, str, dict[str, Any], int]] = {
    # OpenAI /v1/audio/speech in each delivery: a whole file, a raw stream, SSE.
    "speech-file": ("POST", "/v1/audio/speech", {"json": {**SPEECH, "response_format": "wav"}}, 200),
    "speech-raw": (
        "POST",
        "/v1/audio/speech",
        {"json": {**SPEECH, "response_format": "pcm", "stream_format": "audio"}},
        200,
    ),
    "speech-sse": (
        "POST",
        "/v1/audio/speech",
        {"json": {**SPEECH, "response_format": "pcm", "stream_format": "sse"}},
        200,
    ),
    # Errors: a handler's 400 (validation), a SpeakwireError's 404 (unknown voice), Starlette's own 404 and 405.
    "speech-400": ("POST", "/v1/audio/speech", {"json": {**SPEECH, "speed": 10}}, 400),
    "speech-404": ("POST", "/v1/audio/speech", {"json": {**SPEECH, "voice": "nobody"}}, 404),
    "no-route-404": ("GET", "/no/such/route", {}, 404),
    "method-405": ("GET", "/v1/audio/speech", {}, 405),
    "models": ("GET", "/v1/models", {}, 200),
    "health": ("GET", "/health", {}, 200),
    "voices": ("GET", "/v1/audio/voices", {}, 200),
    "sagemaker-ping": ("GET", "/ping", {}, 200),
    "sagemaker-invocations": ("POST", "/invocations", {"json": {**SPEECH, "response_format": "wav"}}, 200),
    # InvocationsRouter answers this 404 itself, before any route.
    "sagemaker-unknown-route": (
        "POST",
        "/invocations",
        {"json": SPEECH, "headers": {SAGEMAKER_ROUTE: "route=/nope"}},
        404,
    ),
    "elevenlabs": ("POST", "/v1/text-to-speech/alloy?output_format=pcm_24000", {"json": {"text": "Hello there."}}, 200),
    "elevenlabs-stream": (
        "POST",
        "/v1/text-to-speech/alloy/stream?output_format=pcm_24000",
        {"json": {"text": "Hello there."}},
        200,
    ),
    "cartesia-bytes": ("POST", "/tts/bytes", {"json": CARTESIA, "headers": CARTESIA_VERSION}, 200),
    "cartesia-400": ("POST", "/tts/bytes", {"content": b"{nope", "headers": CARTESIA_VERSION}, 400),
    "deepgram-speak": (
        "POST",
        "/v1/speak?model=aura-2-thalia-en&encoding=linear16",
        {"json": {"text": "Hello there."}},
        200,
    ),
    "deepgram-400": ("POST", "/v1/speak?model=aura-2-thalia-en", {"json": {"text": ""}}, 400),
}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_route_family_answers_with_a_new_request_id(server: LiveServer, name: str) -> None:
    method, path, kwargs, status = ROUTES[name]
    response = call(server, method, path, **kwargs)
    assert response.status_code == status, response.text
    assert is_uuid(response.headers["x-request-id"])
    assert len(response.headers.get_list("x-request-id")) == 1


@pytest.mark.parametrize("name", ["speech-raw", "speech-404", "no-route-404", "sagemaker-invocations",
                                  "sagemaker-unknown-route", "deepgram-speak", "cartesia-bytes"])  # fmt: skip
def test_a_clients_request_id_is_echoed(server: LiveServer, name: str) -> None:
    method, path, kwargs, status = ROUTES[name]
    mine = f"trace-{uuid.uuid4().hex[:12]}:span/1"
    kwargs = {**kwargs, "headers": {**kwargs.get("headers", {}), "X-Request-ID": mine}}
    response = call(server, method, path, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers.get_list("x-request-id") == [mine]


@pytest.mark.parametrize("sent", [b"has space", b"x" * 129, b"caf\xc3\xa9", b"tab\there", b""],
                         ids=["space", "too-long", "non-ascii", "control", "empty"])  # fmt: skip
def test_an_insane_request_id_is_replaced_with_a_new_one(server: LiveServer, sent: bytes) -> None:
    response = call(server, "GET", "/health", headers=[(b"X-Request-ID", sent)])
    assert response.status_code == 200
    assert is_uuid(response.headers["x-request-id"])


def test_the_longest_sane_request_id_is_echoed(server: LiveServer) -> None:
    longest = "~!" * 64
    assert call(server, "GET", "/health", headers={"X-Request-ID": longest}).headers["x-request-id"] == longest


def test_two_requests_get_different_ids(server: LiveServer) -> None:
    ids = {call(server, "GET", "/health").headers["x-request-id"] for _ in range(2)}
    assert len(ids) == 2


def test_accepted_request_id_keeps_printable_ascii_only() -> None:
    assert accepted_request_id("req_abc-123.4:5/6") == "req_abc-123.4:5/6"
    for insane in (None, "", " lead", "a\x7fb", "é", "a" * 129, "line\nbreak"):
        replaced = accepted_request_id(insane)
        assert replaced != insane and is_uuid(replaced) and is_sane(replaced)


# ----- dialects with an id of their own -----------------------------------------------------


def test_deepgram_dg_request_id_is_the_x_request_id(server: LiveServer) -> None:
    _, path, kwargs, _ = ROUTES["deepgram-speak"]
    response = call(server, "POST", path, headers={"X-Request-ID": "dg-abc"}, **kwargs)
    assert response.status_code == 200
    assert response.headers["dg-request-id"] == response.headers["x-request-id"] == "dg-abc"
    response = call(server, "POST", path, **kwargs)
    assert response.headers["dg-request-id"] == response.headers["x-request-id"]


def test_deepgram_errors_carry_the_x_request_id(server: LiveServer) -> None:
    _, path, kwargs, _ = ROUTES["deepgram-400"]
    response = call(server, "POST", path, **kwargs)
    assert response.status_code == 400
    request_id = response.headers["x-request-id"]
    assert response.headers["dg-request-id"] == request_id and response.json()["request_id"] == request_id


def test_cartesia_errors_carry_the_x_request_id(server: LiveServer) -> None:
    _, path, kwargs, _ = ROUTES["cartesia-400"]
    response = call(server, "POST", path, **kwargs)
    assert response.json()["request_id"] == response.headers["x-request-id"]


# ----- WebSockets ---------------------------------------------------------------------------


def test_a_websocket_upgrade_answers_with_the_clients_request_id(server: LiveServer) -> None:
    with websockets.sync.client.connect(server.ws_url, additional_headers={"X-Request-ID": "ws-abc"}) as ws:
        assert ws.response is not None and ws.response.headers.get_all("x-request-id") == ["ws-abc"]
    with websockets.sync.client.connect(server.ws_url) as ws:
        assert ws.response is not None and is_uuid(ws.response.headers["x-request-id"])


def test_a_refused_websocket_upgrade_carries_the_request_id(server: LiveServer) -> None:
    url = f"ws://127.0.0.1:{server.settings.port}/v1/speak?model=nope"
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        websockets.sync.client.connect(url, additional_headers={"X-Request-ID": "ws-refused"})
    assert refused.value.response.headers["x-request-id"] == "ws-refused"


def test_speech_stream_utterances_errors_and_cancels_name_their_request(server: LiveServer) -> None:
    """Each utterance is <connection id>-<n> on its session.done; an error names the open utterance (or the
    connection); input.cancelled names the utterance it cut short."""
    with websockets.sync.client.connect(server.ws_url, additional_headers={"X-Request-ID": "conn-7"}) as ws:
        ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
        ws.send(json.dumps({"type": "input.bogus"}))
        events = [json.loads(m) for m in _until(ws, "error")]
        assert events[-1]["code"] == "unknown_type" and events[-1]["request_id"] == "conn-7"
        ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        ws.send(json.dumps({"type": "input.done"}))
        done = [json.loads(m) for m in _until(ws, "session.done")][-1]
        assert done["request_id"] == "conn-7-0"
        ws.send(json.dumps({"type": "input.text", "text": "A long reply that will be cut short. " * 4}))
        ws.send(json.dumps({"type": "input.bogus"}))
        error = [json.loads(m) for m in _until(ws, "error")][-1]
        assert error["request_id"] == "conn-7-1"  # the utterance still open
        ws.send(json.dumps({"type": "input.cancel"}))
        cancelled = [json.loads(m) for m in _until(ws, "input.cancelled")][-1]
        assert cancelled["request_id"] == "conn-7-1" and cancelled["utterance_index"] == 1


def _until(ws: Any, kind: str) -> list[str]:
    """Text messages up to and including the first of type ``kind`` (audio frames skipped)."""
    seen: list[str] = []
    while True:
        message = ws.recv(timeout=30)
        if isinstance(message, str):
            seen.append(message)
            if json.loads(message).get("type") == kind:
                return seen


def test_deepgram_websocket_dg_request_id_is_the_connections_id(server: LiveServer) -> None:
    url = f"ws://127.0.0.1:{server.settings.port}/v1/speak?model=aura-2-thalia-en"
    with websockets.sync.client.connect(url, additional_headers={"X-Request-ID": "dg-ws"}) as ws:
        assert ws.response is not None and ws.response.headers["dg-request-id"] == "dg-ws"


# ----- errors no route answers ----------------------------------------------------------------


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve an app built by create_app (plus a route a test adds) the way start_server does."""
    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def records(logger_name: str, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records a logger and its children log meanwhile, through a handler with the request-id filter."""
    seen: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = seen.append  # type: ignore[method-assign]
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger(logger_name)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def test_an_unhandled_errors_500_carries_the_id_and_its_log_line_names_it(piper_engine: PiperEngine) -> None:
    app = create_app(Settings(max_streams=4), engine=piper_engine)

    async def boom() -> None:
        raise RuntimeError("boom")

    app.add_api_route("/boom", boom)
    with serving(app) as url, records("uvicorn.error", logging.ERROR) as seen:
        response = httpx.get(f"{url}/boom", headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500 and response.text == "Internal Server Error"
    assert response.headers["x-request-id"] == "boom-1"
    assert [r.request_id for r in seen if r.exc_info and "boom" in str(r.exc_info[1])] == ["boom-1"]  # type: ignore[attr-defined]


def test_a_missing_api_keys_401_carries_the_id(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(api_key="k3y"), engine=piper_engine)
    try:
        response = httpx.post(f"{live.url}/v1/audio/speech", json=SPEECH, headers={"X-Request-ID": "no-key"})
    finally:
        live.stop()
    assert response.status_code == 401 and response.headers["x-request-id"] == "no-key"


# ----- log lines ----------------------------------------------------------------------------


def test_a_log_line_emitted_while_handling_a_request_names_its_id(server: LiveServer) -> None:
    field = f"unknown_{uuid.uuid4().hex[:8]}"  # logged once per process per name: a fresh one logs here
    with records("speakwire") as seen, records("uvicorn.access") as access:
        response = call(
            server, "POST", "/v1/audio/speech", json={**SPEECH, field: 1}, headers={"X-Request-ID": "log-1"}
        )
    assert response.status_code == 200
    assert [r.request_id for r in seen if field in r.getMessage()] == ["log-1"]  # type: ignore[attr-defined]
    lines = [r for r in access if "/v1/audio/speech" in r.getMessage()]
    assert [r.request_id for r in lines] == ["log-1"]  # type: ignore[attr-defined]


def test_a_log_line_outside_any_request_says_so() -> None:
    record = logging.LogRecord("speakwire", logging.INFO, __file__, 1, "start-up", None, None)
    RequestIdFilter().filter(record)
    assert record.request_id == NO_REQUEST  # type: ignore[attr-defined]
    with bound("utterance-7"):
        RequestIdFilter().filter(inner := logging.LogRecord("speakwire", logging.INFO, __file__, 1, "x", None, None))
    assert inner.request_id == "utterance-7" and current_request_id() is None  # type: ignore[attr-defined]


def test_bound_ids_reach_tasks_created_inside_and_end_with_the_block() -> None:
    async def main() -> tuple[str | None, str | None]:
        async def read() -> str | None:
            await asyncio.sleep(0)
            return current_request_id()

        with bound("utterance-1"):
            task = asyncio.create_task(read())
        outside = asyncio.create_task(read())
        return await task, await outside

    assert asyncio.run(main()) == ("utterance-1", None)


@pytest.mark.timeout(180)
def test_speakwire_serve_log_lines_name_their_request(tmp_path: Path) -> None:
    """The production logging (``speakwire serve``): our lines and uvicorn's access line carry ``[req=<id>]``."""
    port = free_port()
    log = tmp_path / "server.log"
    field = "unknown_logged_field"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "speakwire", "serve", "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: process.poll() is None and ready(url), log)
        response = httpx.post(f"{url}/v1/audio/speech", json={**SPEECH, field: 1}, headers={"X-Request-ID": "serve-1"},
                              timeout=60)  # fmt: skip
        assert response.status_code == 200
        wait_for(lambda: "POST /v1/audio/speech" in log.read_text(), log)
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    assert re.search(r"INFO speakwire\.\S+: \[req=serve-1\] ignoring request fields .*" + field, text), text
    assert re.search(r'INFO: +\[req=serve-1\] 127\.0\.0\.1:\d+ - "POST /v1/audio/speech HTTP/1\.1" 200', text), text
    assert re.search(r"INFO: +\[req=-\] Application startup complete", text), text


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(condition: Callable[[], bool], log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


# ----- clients that read the id --------------------------------------------------------------


def test_the_openai_sdk_reads_the_request_id_of_audio_and_errors(server: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input="Hello there.")
    assert raw.request_id is not None and is_uuid(raw.request_id)
    with pytest.raises(openai.NotFoundError) as missing:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hi", extra_headers={"X-Request-ID": "e-1"})
    assert missing.value.request_id == "e-1"


def test_livekit_openai_tts_gets_a_request_id_and_no_warning(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def speak() -> set[str]:
        tts = livekit_openai.TTS(base_url=f"{server.url}/v1", api_key="local", model="gpt-4o-mini-tts", voice="ash")
        try:
            async with tts.synthesize("Hello there.") as stream:
                return {event.request_id async for event in stream}
        finally:
            await tts.aclose()

    with caplog.at_level(logging.WARNING, logger="livekit"):
        ids = asyncio.run(speak())
    assert not [r for r in caplog.records if "no request_id" in r.getMessage()]
    assert len(ids) == 1 and is_uuid(ids.pop())
