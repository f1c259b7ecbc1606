"""A saved voice speaks on another instance of a shared library (S3), with the prompt the first one computed.

Two servers, each with its own freshly loaded tiny Qwen3 Base engine and its own data dir,
share one library on moto's standalone S3 server (loopback): what two instances of an
endpoint share. ``tests/voices/test_shared_library.py`` runs the library's cases with two
server processes; here the engines' ``prompt_encodes`` counters are read, so both live in
this process (they share nothing but S3).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf
from qwen3_testing import noise_clip

from speakwire.settings import Settings
from support.live_server import LiveServer, start_server
from support.s3_server import LoopbackS3

pytestmark = pytest.mark.qwen

BUCKET = "speakwire-voices-qwen"
SHORT = {"max_new_tokens": 10, "seed": 3}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackS3]:
    server = LoopbackS3().start()
    server.create_bucket(BUCKET)
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    yield server
    server.stop()


def serve(model: Path, data_dir: Path) -> LiveServer:
    from speakwire.engines.qwen3 import load_qwen3_engine

    settings = Settings(engine="qwen3", model=str(model), data_dir=str(data_dir), voices_url=f"s3://{BUCKET}/lib")
    return start_server(settings, engine=load_qwen3_engine(str(model)))


def speak(server: LiveServer, voice: str) -> httpx.Response:
    body = {"input": "Hello there.", "voice": voice, "response_format": "pcm", **SHORT}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120)


def test_a_voice_saved_on_one_instance_speaks_on_another_with_the_prompt_computed_once(
    s3: LoopbackS3, tiny_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = tiny_checkpoints["base"]
    a, b = serve(model, tmp_path / "a"), serve(model, tmp_path / "b")
    try:
        engine_a: Any = a.state.engine
        engine_b: Any = b.state.engine
        encodes_a, encodes_b = engine_a.prompt_encodes, engine_b.prompt_encodes
        buffer = io.BytesIO()
        sf.write(buffer, noise_clip(2.0, seed=7).samples, 24_000, format="WAV", subtype="PCM_16")
        form = {"name": "shared", "consent": "Recorded by the tester, who agreed.", "ref_text": "Some words."}
        files = {"audio_sample": ("ref.wav", buffer.getvalue(), "audio/wav")}
        saved = httpx.post(f"{a.url}/v1/audio/voices", data=form, files=files, timeout=120)
        assert saved.status_code == 200, saved.text
        assert engine_a.prompt_encodes == encodes_a + 1  # A computed the prompt at upload, and stored it in S3

        on_b = speak(b, "shared")
        on_a = speak(a, "shared")
        assert on_b.status_code == on_a.status_code == 200, on_b.text
        assert len(on_b.content) > 0 and on_b.content == on_a.content  # the same voice, seeded: the same audio
        assert engine_b.prompt_encodes == encodes_b  # B loaded A's prompt from the library, computed nothing
        voice = httpx.get(f"{b.url}/v1/audio/voices/shared", timeout=30).json()["voice"]
        assert voice["compatibility"]["prompt_cached_here"] is True
    finally:
        a.stop()
        b.stop()
