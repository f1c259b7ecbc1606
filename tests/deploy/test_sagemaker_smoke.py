"""run_smoke(): what counts as a working stream, over a scripted in-memory transport."""

from __future__ import annotations

import asyncio
import json
import wave
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from speakwire.client.transport import TransportClosed
from speakwire.client.websocket import WebSocketTransport
from speakwire.deploy.sagemaker.smoke import run_smoke
from speakwire.engines.piper import PiperEngine
from speakwire.server.sagemaker.config import resolve_sagemaker_settings
from support.live_server import LiveServer, start_server

PCM = b"\x01\x00" * 4800  # 0.2 s of 24 kHz s16le


class ScriptedTransport:
    """Replies with a fixed script once ``input.done`` has been sent; then closes, or hangs if asked."""

    def __init__(self, replies: Sequence[str | bytes | dict[str, object]], *, hang: bool = False) -> None:
        self._replies = [json.dumps(r) if isinstance(r, dict) else r for r in replies]
        self._hang = hang
        self.sent: list[dict[str, object]] = []
        self.closed = 0
        self._input_done = asyncio.Event()

    async def send_text(self, message: str) -> None:
        event = json.loads(message)
        self.sent.append(event)
        if event["type"] == "input.done":
            self._input_done.set()

    async def send_bytes(self, data: bytes) -> None:
        raise AssertionError("the smoke test sends no audio")

    async def receive(self) -> str | bytes:
        await self._input_done.wait()
        if self._replies:
            return self._replies.pop(0)
        if self._hang:
            await asyncio.Event().wait()
        raise TransportClosed(1000, "normal closure")

    async def aclose(self) -> None:
        self.closed += 1


START = {
    "type": "audio.start",
    "utterance_index": 0,
    "sentence_index": 0,
    "format": "pcm",
    "sample_rate": 24000,
    "channels": 1,
}
DONE = {
    "type": "audio.done",
    "utterance_index": 0,
    "sentence_index": 0,
    "total_bytes": len(PCM),
    "error": False,
}
SESSION_DONE = {"type": "session.done", "utterance_index": 0, "total_sentences": 1}


async def test_a_complete_utterance_passes_and_is_written_as_24khz_wav(tmp_path: Path) -> None:
    transport = ScriptedTransport([START, PCM[:5000], PCM[5000:], DONE, SESSION_DONE])
    output = tmp_path / "validation-output.wav"

    result = await run_smoke(transport, text="Hello.", voice="Vivian", language="English", output_path=output)

    assert result.ok, result.reason
    assert result.pcm_bytes == len(PCM)
    assert transport.sent == [
        {
            "type": "session.config",
            "voice": "Vivian",
            "response_format": "pcm",
            "stream_audio": True,
            "language": "English",
        },
        {"type": "input.text", "text": "Hello."},
        {"type": "input.done"},
    ]
    with wave.open(str(output)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        assert wav.readframes(wav.getnframes()) == PCM
    assert transport.closed == 1


async def test_a_server_that_closes_after_audio_done_without_session_done_still_passes(
    tmp_path: Path,
) -> None:
    result = await run_smoke(ScriptedTransport([START, PCM, DONE]), output_path=tmp_path / "o.wav")

    assert result.ok, result.reason


async def test_missing_audio_done_fails(tmp_path: Path) -> None:
    result = await run_smoke(ScriptedTransport([START, PCM, SESSION_DONE]), output_path=tmp_path / "o.wav")

    assert not result.ok
    assert result.reason == "no audio.done event"


async def test_too_little_audio_fails() -> None:
    result = await run_smoke(ScriptedTransport([START, b"\0" * 2000, DONE, SESSION_DONE]), output_path=None)

    assert not result.ok
    assert "only 2000 PCM bytes" in result.reason


async def test_an_error_event_or_a_failed_sentence_fails_with_the_servers_message() -> None:
    failed_done: dict[str, object] = {**DONE, "error": True}
    replies: list[str | bytes | dict[str, object]] = [
        START,
        PCM,
        {"type": "error", "message": "speaker 'Vivian' not found"},
        failed_done,
        SESSION_DONE,
    ]

    result = await run_smoke(ScriptedTransport(replies), output_path=None)

    assert not result.ok
    assert "speaker 'Vivian' not found" in result.reason
    assert "audio.done reported an error" in result.reason


async def test_a_silent_server_fails_at_the_overall_deadline_and_the_stream_is_closed() -> None:
    transport = ScriptedTransport([START, PCM], hang=True)

    result = await run_smoke(transport, output_path=None, timeout_s=0.2)

    assert not result.ok
    assert result.reason == "no session.done within 0.2 s"
    assert transport.closed == 1


async def test_a_stream_closed_before_any_audio_names_the_close_reason() -> None:
    result = await run_smoke(ScriptedTransport([]), output_path=None)

    assert not result.ok
    assert "no audio.start event" in result.reason and "normal closure" in result.reason


async def test_the_sample_rate_announced_by_audio_start_is_used_for_the_wav(tmp_path: Path) -> None:
    output = tmp_path / "o.wav"

    await run_smoke(ScriptedTransport([{**START, "sample_rate": 16000}, PCM, DONE]), output_path=output)

    with wave.open(str(output)) as wav:
        assert wav.getframerate() == 16000


@pytest.fixture(scope="module")
def sagemaker_piper(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = resolve_sagemaker_settings({}, model_dir=tmp_path_factory.mktemp("nothing-mounted")).settings
    live = start_server(settings, engine=piper_engine)
    yield live
    live.stop()


async def test_without_a_voice_the_config_names_none_and_a_piper_server_speaks_with_its_own(
    sagemaker_piper: LiveServer,
) -> None:
    # deploy --engine piper drops the default Vivian (a Qwen3 speaker): the embedded Piper voice has no such name.
    url = sagemaker_piper.url.replace("http://", "ws://") + "/invocations-bidirectional-stream"
    transport = await WebSocketTransport.connect(url)

    result = await run_smoke(transport, voice=None, output_path=None, timeout_s=60)

    assert result.ok, result.reason
    assert result.sample_rate == 24000 and result.pcm_bytes > 24000
