"""The speakwire command line, run as a user would: real processes, real files, a real server."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import soundfile as sf

from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from support.live_server import LiveServer, free_port

SPEAKWIRE = [sys.executable, "-m", "speakwire"]


def run(*args: str, timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SPEAKWIRE, *args], capture_output=True, timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]


def test_say_writes_a_wav_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "hello.wav"
    result = run("say", "Hello there. This is speakwire.", "-o", str(out))
    assert result.returncode == 0, result.stderr.decode()
    audio, rate = sf.read(out)
    assert rate == 24000 and len(audio) / rate > 1.0


def test_say_to_stdout_in_another_format() -> None:
    result = run("say", "Piped audio.", "-o", "-", "--format", "flac", "--speed", "1.5")
    assert result.returncode == 0, result.stderr.decode()
    audio, rate = sf.read(io.BytesIO(result.stdout))
    assert len(audio) > 0 and rate == 24000


def test_say_refuses_empty_text_and_unknown_formats(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert run("say", "  ", "-o", str(tmp_path / "x.wav")).returncode == 2
    bad = run("say", "Hi", "-o", str(tmp_path / "x.xyz"))
    assert bad.returncode == 2 and b"unknown format" in bad.stderr


def test_serve_starts_and_becomes_ready() -> None:
    port = free_port()
    process = subprocess.Popen([*SPEAKWIRE, "serve", "--port", str(port), "--log-level", "warning"])
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code
                if status == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert status == 200
        audio = httpx.post(f"http://127.0.0.1:{port}/v1/audio/speech", json={"input": "Hi.", "response_format": "wav"})
        assert audio.content[:4] == b"RIFF"
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why.
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)


def test_serve_refuses_a_public_host_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPEAKWIRE_API_KEY"}
    result = run("serve", "--host", "0.0.0.0", "--port", str(free_port()), env=env, timeout=30)
    assert result.returncode == 2
    assert b"--api-key" in result.stderr and b"--insecure" in result.stderr


def test_stream_command_writes_audio_and_reports_time_to_first_audio(server: LiveServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "streamed.wav"
    result = run("stream", "Streaming from the command line. Word by word.", "--url", server.ws_url,
                 "--words-per-piece", "2", "-o", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert b"time to first audio" in result.stdout
    audio, rate = sf.read(out)
    assert rate == 24000 and len(audio) / rate > 1.0


def test_stream_command_says_when_the_server_is_unreachable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run("stream", "Hi", "--url", f"ws://127.0.0.1:{free_port()}", "-o", str(tmp_path / "x.wav"))
    assert result.returncode == 1
    assert b"cannot reach" in result.stderr


def test_serve_exits_non_zero_with_one_clear_line_when_the_engine_cannot_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no-such-voice.onnx"
    done = run("serve", "--port", str(free_port()), "--voice", str(missing), "--data-dir", str(tmp_path), timeout=60)
    assert done.returncode == 1
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("speakwire: the piper engine failed to load:") and "no-such-voice.onnx" in last


def test_seed_flag_and_variable_set_the_server_default_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPEAKWIRE_SEED", raising=False)
    assert build_settings(build_parser().parse_args(["serve"])).default_seed is None
    assert build_settings(build_parser().parse_args(["serve", "--seed", "0"])).default_seed == 0
    monkeypatch.setenv("SPEAKWIRE_SEED", "42")
    assert build_settings(build_parser().parse_args(["serve"])).default_seed == 42
    assert build_settings(build_parser().parse_args(["serve", "--seed", "7"])).default_seed == 7  # the flag wins
    assert build_settings(build_parser().parse_args(["serve", "--sagemaker"])).default_seed == 42


@pytest.mark.parametrize("value", ["-1", "1.5", "abc", str(2**32)])
def test_a_negative_or_non_integer_seed_is_a_startup_error(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as flag:
        build_parser().parse_args(["serve", f"--seed={value}"])
    assert flag.value.code == 2
    assert "argument --seed: the seed must be an integer from 0 to 4294967295" in capsys.readouterr().err
    monkeypatch.setenv("SPEAKWIRE_SEED", value)
    with pytest.raises(SystemExit, match=f"^speakwire serve: SPEAKWIRE_SEED='{value}': the seed must be an integer"):
        build_settings(build_parser().parse_args(["serve"]))


def test_cuda_graphs_default_to_the_device_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # None: the engine captures the loop step on CUDA (and runs the same static step eagerly on CPU).
    monkeypatch.delenv("SPEAKWIRE_CUDA_GRAPHS", raising=False)
    for mode in ([], ["--sagemaker"]):
        assert build_settings(build_parser().parse_args(["serve", *mode])).cuda_graphs is None
        assert build_settings(build_parser().parse_args(["serve", *mode, "--no-cuda-graphs"])).cuda_graphs is False
        assert build_settings(build_parser().parse_args(["serve", *mode, "--cuda-graphs"])).cuda_graphs is True
    monkeypatch.setenv("SPEAKWIRE_CUDA_GRAPHS", "0")
    assert build_settings(build_parser().parse_args(["serve"])).cuda_graphs is False
