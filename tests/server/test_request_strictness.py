"""Requests are held to the OpenAPI document both ways, and the document describes the engine being served.

Found by schemathesis' request-strictness checks (issue 31): ``true``/``false`` taken as integers, JSON Schema's
``20.0`` refused as an integer, ``language: {}`` passed over, a blank form field refused where JSON's ``null`` is
not, and a document that offered Piper languages and cloning fields it refuses. Each case here is what a client
sees over a real server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

TEXT = "Hello there."
CARTESIA = {"Cartesia-Version": "2026-08-14"}
S16 = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(), engine=piper_engine)
    yield live
    live.stop()


def speech(server: LiveServer, **fields: Any) -> httpx.Response:
    body = {"input": TEXT, "response_format": "pcm", "seed": 7, **fields}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)


def test_true_or_false_is_not_an_integer_and_20_point_0_is_20(server: LiveServer) -> None:
    refused = speech(server, seed=False)
    assert refused.status_code == 400 and "seed" in refused.text
    assert speech(server, seed=20.0).content == speech(server, seed=20).content != b""
    eleven = f"{server.url}/v1/text-to-speech/alloy?output_format=pcm_16000"
    assert httpx.post(eleven, json={"text": TEXT, "seed": True}, timeout=60).status_code in (400, 422)
    assert httpx.post(eleven, json={"text": TEXT, "seed": 3.0}, timeout=60).status_code == 200


def test_cartesia_takes_an_integral_float_delay_and_refuses_a_language_that_is_not_a_string(server: LiveServer) -> None:
    body = {"model_id": "sonic-3", "transcript": TEXT, "voice": {"mode": "id", "id": "alloy"}, "output_format": S16}
    url = f"{server.url}/tts/bytes"
    assert httpx.post(url, json={**body, "max_buffer_delay_ms": 20.0}, headers=CARTESIA, timeout=60).status_code == 200
    refused = httpx.post(url, json={**body, "language": {}}, headers=CARTESIA, timeout=60)
    assert refused.status_code == 400 and "language" in refused.text
    assert httpx.post(url, json={**body, "language": "en-US"}, headers=CARTESIA, timeout=60).status_code == 200


def test_a_blank_form_field_is_not_sent_and_a_switch_takes_only_on_and_off_words(server: LiveServer) -> None:
    form = {"input": TEXT, "response_format": "pcm", "seed": "7"}
    url = f"{server.url}/v1/audio/speech"
    plain = httpx.post(url, data=form, files={"none": ("", b"")}, timeout=60)
    blank = httpx.post(url, data={**form, "speed": "", "stream_format": "", "word_timestamps": " "},
                       files={"none": ("", b"")}, timeout=60)  # fmt: skip
    assert plain.status_code == blank.status_code == 200 and plain.content == blank.content
    refused = httpx.post(url, data={**form, "stream": "maybe"}, files={"none": ("", b"")}, timeout=60)
    assert refused.status_code == 400 and "stream" in refused.text


def test_every_dialect_takes_a_language_tag_the_engine_speaks_and_refuses_one_it_does_not(server: LiveServer) -> None:
    eleven = f"{server.url}/v1/text-to-speech/alloy?output_format=pcm_16000"
    assert httpx.post(eleven, json={"text": TEXT, "language_code": "en-US"}, timeout=60).status_code == 200
    assert httpx.post(eleven, json={"text": TEXT, "language_code": "fr"}, timeout=60).status_code in (400, 422)
    assert speech(server, language="en_GB").status_code == 200
    assert speech(server, language="de").status_code == 400


def test_the_document_states_what_the_served_engine_takes(server: LiveServer) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    paths = document["paths"]
    magpie = paths["/v1/magpie/invocations"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    pattern = magpie["properties"]["language_code"]["anyOf"][0]["pattern"]
    assert all(re.match(pattern, tag) for tag in ("en", "en-US", "EN_gb", " English ", "auto", ""))
    assert not any(re.match(pattern, tag) for tag in ("fr", "de-DE", "eng", "English-US"))
    fields = paths["/v1/audio/speech"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert fields["ref_audio"]["type"] == "null" and fields["x_vector_only_mode"]["enum"] == [False, None]
    form = paths["/v1/audio/speech"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert form["ref_audio"]["type"] == "null" and form["speed"]["type"] == "number"
    rates = next(p for p in paths["/v1/speak"]["post"]["parameters"] if p["name"] == "sample_rate")["schema"]["enum"]
    assert 0 not in rates and {8000, 22050, 48000} <= set(rates)
    assert paths["/v1/audio/voices"]["post"]["requestBody"]["required"] is False  # an empty POST lists
