"""One API key, carried in each vendor's own header, refused in each vendor's own error shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

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
