"""Other people's clients, unchanged, against a real loopback server (../shared/reference/clients/).

vLLM-Omni's example client for ``/v1/audio/speech/stream`` runs as its README says, with its
defaults (speaker "Vivian", task CustomVoice, language Auto) that a Qwen3 server expects: on the
laptop's Piper server the preset speaker aliases to the default voice, and nothing it sends is an error.
"""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest

from support.live_server import LiveServer

CLIENTS = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "clients"
VLLM_CLIENT = CLIENTS / "vllm-omni" / "streaming_speech_client.py"
TEXT = "Hello there. This is a streaming test. It has three sentences."

pytestmark = pytest.mark.skipif(not VLLM_CLIENT.exists(), reason="../shared/reference/clients is not checked out")


def run_client(server: LiveServer, out: Path, *extra: str) -> str:
    result = subprocess.run(
        [sys.executable, str(VLLM_CLIENT), "--url", server.ws_url, "--text", TEXT, "--output-dir", str(out), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout, result.stdout
    return result.stdout


def test_vllm_omni_example_client_with_its_defaults_saves_one_wav_per_sentence(
    server: LiveServer, tmp_path: Path
) -> None:
    output = run_client(server, tmp_path)
    sentences = int(output.split("Session complete: ")[1].split(" ")[0])
    files = sorted(tmp_path.glob("sentence_*.wav"))
    assert sentences >= 2  # short sentences may share a segment
    assert [f.name for f in files] == [f"sentence_{i:03d}.wav" for i in range(sentences)]
    for path in files:
        with wave.open(str(path)) as wav:
            assert wav.getnframes() / wav.getframerate() > 0.5


def test_vllm_omni_example_client_streams_pcm_word_by_word(server: LiveServer, tmp_path: Path) -> None:
    output = run_client(server, tmp_path, "--response-format", "pcm", "--stream-audio", "--simulate-stt",
                        "--stt-delay", "0.02")  # fmt: skip
    assert "Received audio chunk" in output
    assert "Session complete" in output
    pcm = b"".join(path.read_bytes() for path in sorted(tmp_path.glob("sentence_*.pcm")))
    assert len(pcm) / 2 / 24000 > 2.0  # three sentences of 24 kHz speech
