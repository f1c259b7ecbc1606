"""The Gradio page's handlers and the ``speakwire ui`` command, without a browser."""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import subprocess
import sys
import wave
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from speakwire.cli import ui as cli_ui
from speakwire.cli.main import build_parser
from speakwire.errors import MissingExtraError
from speakwire.ui.app import SpeechPage, build_ui, import_gradio
from speakwire.ui.backend import Catalogue, SpeechBackend
from speakwire.ui.stream import adts_duration
from support.audio import decode
from support.live_server import LiveServer, free_port


@pytest.fixture
def gradio() -> ModuleType:
    pytest.importorskip("gradio", reason="the [ui] extra (gradio) is not installed")
    return import_gradio()


async def outputs(page: SpeechPage, text: str, **fields: Any) -> list[tuple[Any, str]]:
    args = {"voice": None, "language": None, "speed": 1.0, "ref_audio": None, "ref_text": None, **fields}
    return [item async for item in page.speak(text, **args)]


def test_without_gradio_the_ui_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gradio", None)  # makes `import gradio` fail as if not installed
    with pytest.raises(MissingExtraError, match=r'pip install "speakwire\[ui\]"'):
        build_ui(SpeechBackend.for_server())


def wav_file(pcm: bytes, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return buffer.getvalue()


async def test_the_page_fills_voice_and_language_from_the_server(server: LiveServer, gradio: ModuleType) -> None:
    page = SpeechPage(SpeechBackend.for_server(server.url), gradio)
    voice, language, cloning, status = await page.load()
    assert (voice.choices, voice.value) == ([("en_US-joe-medium", "en_US-joe-medium")], "en_US-joe-medium")
    assert language.value == "English"
    assert cloning.visible is False
    assert status == "Ready: piper, 1 voice."


async def test_the_page_streams_aac_segments_that_join_into_the_speech_and_ends_done(
    server: LiveServer, gradio: ModuleType
) -> None:
    items = await outputs(SpeechPage(SpeechBackend.for_server(server.url), gradio), "One. Two. Three.")
    assert items[0][1].startswith("Connecting to speakwire at ")
    segments = [audio for audio, _ in items if isinstance(audio, bytes)]
    assert len(segments) > 1
    done = re.fullmatch(r"Done: \d+ chunks, [\d,]+ bytes \(([\d.]+) s of audio\); first audio after \d+ ms\.",
                        items[-1][1])  # fmt: skip
    assert done is not None, items[-1][1]
    # The last segment comes with the Done status: nothing is left in the encoder.
    assert isinstance(items[-1][0], bytes)
    samples, rate = decode(b"".join(segments), "aac")
    speech_s = float(done[1])
    assert sum(adts_duration(s) for s in segments) == pytest.approx(len(samples) / rate)
    assert speech_s <= len(samples) / rate <= speech_s + 2 * 1024 / rate + 0.01  # + priming, last frame, rounding


async def test_an_unreachable_server_becomes_an_error_sentence_on_the_page(gradio: ModuleType) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    page = SpeechPage(SpeechBackend.for_server(url), gradio)
    with pytest.warns(UserWarning, match="Cannot reach"):  # gr.Warning outside a request is a Python warning
        items = await outputs(page, "Hello.")
    assert items[-1][1] == (
        f"Error: Cannot reach the speakwire server at {url}: connection refused. Is it running? (speakwire serve)"
    )
    _, _, _, status = await page.load()
    assert status.startswith("Error: Cannot reach")


class RecordingTransport:
    """Remembers what the page sent; answers with one chunk and the end of the session."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._replies: list[str | bytes] = [b"\x00\x00" * 240, json.dumps({"type": "session.done"})]

    async def send_text(self, message: str) -> None:
        self.sent.append(json.loads(message))

    async def send_bytes(self, data: bytes) -> None:
        pass

    async def receive(self) -> str | bytes:
        return self._replies.pop(0)

    async def aclose(self) -> None:
        pass


def cloning_backend(transport: RecordingTransport) -> SpeechBackend:
    async def connect() -> RecordingTransport:
        return transport

    async def catalogue() -> Catalogue:
        return Catalogue(voices=("Vivian",), default_voice="Vivian", languages=("Chinese", "Auto"),
                         supports_cloning=True, engine="qwen3")  # fmt: skip

    return SpeechBackend(target="a cloning server", connect=connect, load_catalogue=catalogue)


async def test_an_engine_that_clones_gets_the_reference_inputs_and_auto_language(gradio: ModuleType) -> None:
    _, language, cloning, status = await SpeechPage(cloning_backend(RecordingTransport()), gradio).load()
    assert cloning.visible is True
    assert language.value == "Auto"
    assert status == "Ready: qwen3, 1 voice, voice cloning available."


async def test_a_recorded_reference_clip_and_its_transcript_go_into_session_config(
    gradio: ModuleType, tmp_path: Path
) -> None:
    clip = tmp_path / "recording.wav"
    clip.write_bytes(wav_file(b"\x01\x00" * 2400, 24_000))
    transport = RecordingTransport()
    page = SpeechPage(cloning_backend(transport), gradio)
    await outputs(page, "Say it my way.", voice="Vivian", ref_audio=str(clip), ref_text="Hello, this is me.")
    config = transport.sent[0]
    assert config["type"] == "session.config"
    assert base64.b64decode(config["ref_audio"].partition(",")[2]) == clip.read_bytes()
    assert config["ref_text"] == "Hello, this is me."
    assert [m["type"] for m in transport.sent[1:]] == ["input.text", "input.done"]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["ui", *argv])


def test_speakwire_ui_serves_on_loopback_port_6006_without_a_public_link_by_default() -> None:
    args = parse()
    assert (args.url, args.host, args.port, args.share, args.sagemaker_endpoint) == (
        "http://127.0.0.1:8000", "127.0.0.1", 6006, False, None,
    )  # fmt: skip


def test_speakwire_ui_accepts_the_aws_samples_flag_names() -> None:
    args = parse("--endpoint-name", "tts-bidi", "--server-port", "7000", "--region", "eu-west-1")
    assert (args.sagemaker_endpoint, args.port, args.region) == ("tts-bidi", 7000, "eu-west-1")


def test_speakwire_ui_speaks_to_the_url_it_is_given() -> None:
    backend = cli_ui.backend_for(parse("--url", "http://10.0.0.5:9000/", "--api-key", "k"))
    assert backend.target == "speakwire at http://10.0.0.5:9000"


def test_speakwire_ui_for_an_endpoint_says_when_the_stream_client_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from speakwire.deploy.sagemaker import bidi

    def unavailable() -> None:
        raise bidi.BidiClientUnavailableError("cannot run on Python 3.11")

    monkeypatch.setattr(bidi, "load_bidi_sdk", unavailable)
    assert cli_ui.run(parse("--sagemaker-endpoint", "tts", "--region", "us-west-2")) == 2
    assert "needs Python >= 3.12" in capsys.readouterr().err


def test_speakwire_ui_serves_the_page_and_prints_where_without_an_ffmpeg_program(gradio: ModuleType) -> None:
    port = free_port()
    command = [sys.executable, "-m", "speakwire", "ui", "--url", f"http://127.0.0.1:{free_port()}", "--port", str(port)]
    # The ffmpeg on PATH here is the conftest's stand-in that fails; speakwire ui must not look for one.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline()
        assert first_line.startswith(f"speakwire ui: open http://127.0.0.1:{port}/ to speak through speakwire at ")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
    finally:
        process.kill()
        process.wait(timeout=10)
