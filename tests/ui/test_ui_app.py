"""The Gradio page's handlers and the ``speakwire ui`` command, without a browser."""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
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
from speakwire.ui.app import SpeechPage, build_ui, import_gradio, wav_chunk
from speakwire.ui.backend import Catalogue, SpeechBackend
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


def test_each_streamed_chunk_is_a_complete_wav_with_true_sizes() -> None:
    pcm = b"\x01\x00\x02\x00" * 480
    with wave.open(io.BytesIO(wav_chunk(pcm, 24_000)), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 24_000)
        assert wav.readframes(wav.getnframes()) == pcm


async def test_the_page_fills_voice_and_language_from_the_server(server: LiveServer, gradio: ModuleType) -> None:
    page = SpeechPage(SpeechBackend.for_server(server.url), gradio)
    voice, language, cloning, status = await page.load()
    assert (voice.choices, voice.value) == ([("en_US-joe-medium", "en_US-joe-medium")], "en_US-joe-medium")
    assert language.value == "English"
    assert cloning.visible is False
    assert status == "Ready: piper, 1 voice."


async def test_the_page_streams_wav_chunks_and_ends_with_a_done_status(server: LiveServer, gradio: ModuleType) -> None:
    items = await outputs(SpeechPage(SpeechBackend.for_server(server.url), gradio), "One. Two. Three.")
    assert items[0][1].startswith("Connecting to speakwire at ")
    assert sum(isinstance(audio, bytes) and audio[:4] == b"RIFF" for audio, _ in items) > 1
    assert items[-1][1].startswith("Done: ")


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
    clip.write_bytes(wav_chunk(b"\x01\x00" * 2400, 24_000))
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


def test_speakwire_ui_without_ffmpeg_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_ui.shutil, "which", lambda _: None)
    assert cli_ui.run(parse()) == 2
    assert "needs the ffmpeg program" in capsys.readouterr().err


def test_speakwire_ui_for_an_endpoint_says_when_the_stream_client_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from speakwire.deploy.sagemaker import bidi

    def unavailable() -> None:
        raise bidi.BidiClientUnavailableError("cannot run on Python 3.11")

    monkeypatch.setattr(bidi, "load_bidi_sdk", unavailable)
    assert cli_ui.run(parse("--sagemaker-endpoint", "tts", "--region", "us-west-2")) == 2
    assert "needs Python >= 3.12" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="speakwire ui needs the ffmpeg program")
def test_speakwire_ui_serves_the_page_and_prints_where(gradio: ModuleType) -> None:
    port = free_port()
    command = [sys.executable, "-m", "speakwire", "ui", "--url", f"http://127.0.0.1:{free_port()}", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        first_line = process.stdout.readline()
        assert first_line.startswith(f"speakwire ui: open http://127.0.0.1:{port}/ to speak through speakwire at ")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
    finally:
        process.kill()
        process.wait(timeout=10)
