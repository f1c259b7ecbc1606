"""The UI's backend against a real speakwire server (Piper): voices, streamed chunks, and errors in words."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from speakwire.client.transport import TransportClosed
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from speakwire.ui.backend import Catalogue, SpeakRequest, SpeechBackend, StreamProgress, UiError, reference_data_uri
from support.live_server import LiveServer, free_port, start_server

TEXT = "Hello there. This is a second sentence, spoken while the first one plays. And a third."


async def collect(backend: SpeechBackend, request: SpeakRequest) -> list[tuple[bytes, StreamProgress]]:
    return [item async for item in backend.speak(request)]


@pytest.fixture(scope="module")
def keyed_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(api_key="sesame"), engine=piper_engine)
    yield live
    live.stop()


@pytest.fixture
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


class ScriptedTransport:
    """Plays back a fixed list of server messages, then closes the way the script says."""

    def __init__(self, messages: list[dict[str, object] | bytes], close: TransportClosed) -> None:
        self._messages = list(messages)
        self._close = close

    async def send_text(self, message: str) -> None:
        pass

    async def send_bytes(self, data: bytes) -> None:
        pass

    async def receive(self) -> str | bytes:
        if not self._messages:
            raise self._close
        message = self._messages.pop(0)
        return message if isinstance(message, bytes) else json.dumps(message)

    async def aclose(self) -> None:
        pass


def scripted(messages: list[dict[str, object] | bytes], close: TransportClosed | None = None) -> SpeechBackend:
    async def connect() -> ScriptedTransport:
        return ScriptedTransport(messages, close or TransportClosed(1000, ""))

    async def no_catalogue() -> Catalogue:
        raise AssertionError("not asked")

    return SpeechBackend(target="test server", connect=connect, load_catalogue=no_catalogue)


async def test_catalogue_lists_the_servers_voices_languages_and_cloning_support(server: LiveServer) -> None:
    catalogue = await SpeechBackend.for_server(server.url).catalogue()
    assert catalogue.voices == ("en_US-joe-medium",)
    assert catalogue.default_voice == "en_US-joe-medium"
    assert catalogue.languages == ("English",)
    assert catalogue.supports_cloning is False
    assert catalogue.describe() == "Ready: piper, 1 voice."


async def test_a_websocket_url_finds_the_same_server_for_the_catalogue(server: LiveServer) -> None:
    catalogue = await SpeechBackend.for_server(server.ws_url).catalogue()
    assert catalogue.engine == "piper"


async def test_speak_yields_pcm_chunks_as_they_arrive_with_a_growing_tally(server: LiveServer) -> None:
    items = await collect(SpeechBackend.for_server(server.url), SpeakRequest(TEXT))
    chunks = [pcm for pcm, _ in items if pcm]
    tallies = [progress for _, progress in items]
    assert len(chunks) > 1
    assert all(len(pcm) % 2 == 0 for pcm in chunks)
    assert [t.chunks for t in tallies[:-1]] == list(range(1, len(chunks) + 1))
    assert tallies[0].time_to_first_audio_s is not None and tallies[0].time_to_first_audio_s > 0
    assert not any(t.finished for t in tallies[:-1])


async def test_speak_ends_with_an_empty_chunk_and_the_final_tally(server: LiveServer) -> None:
    items = await collect(SpeechBackend.for_server(server.url), SpeakRequest(TEXT))
    last_pcm, final = items[-1]
    assert last_pcm == b""
    assert final.finished
    assert final.total_bytes == sum(len(pcm) for pcm, _ in items)
    assert final.sample_rate == 24_000
    assert final.audio_seconds > 2


async def test_a_slower_speed_reaches_the_server_as_longer_audio(server: LiveServer) -> None:
    backend = SpeechBackend.for_server(server.url)
    slow = (await collect(backend, SpeakRequest(TEXT, speed=0.5)))[-1][1]
    fast = (await collect(backend, SpeakRequest(TEXT, speed=2.0)))[-1][1]
    assert slow.audio_seconds > 2 * fast.audio_seconds


async def test_an_unknown_voice_is_reported_in_the_servers_words(server: LiveServer) -> None:
    with pytest.raises(UiError, match=r"Voice 'nobody' does not exist\. Available voices: en_US-joe-medium"):
        await collect(SpeechBackend.for_server(server.url), SpeakRequest(TEXT, voice="nobody"))


async def test_a_reference_clip_for_an_engine_that_cannot_clone_says_which_engine_can(server: LiveServer) -> None:
    clip = "data:audio/wav;base64," + base64.b64encode(b"RIFF").decode()
    with pytest.raises(UiError, match=r"cannot clone voices.*Qwen3-TTS"):
        await collect(SpeechBackend.for_server(server.url), SpeakRequest(TEXT, ref_audio=clip, ref_text="hi"))


async def test_empty_text_asks_for_text_without_calling_the_server(dead_url: str) -> None:
    with pytest.raises(UiError, match="type some text first"):
        await collect(SpeechBackend.for_server(dead_url), SpeakRequest("   "))


async def test_an_unreachable_server_is_named_with_the_reason_when_listing_voices(dead_url: str) -> None:
    with pytest.raises(UiError) as caught:
        await SpeechBackend.for_server(dead_url).catalogue()
    assert str(caught.value) == (
        f"Cannot reach the speakwire server at {dead_url}: connection refused. Is it running? (speakwire serve)"
    )


async def test_an_unreachable_server_is_named_with_the_reason_when_speaking(dead_url: str) -> None:
    with pytest.raises(UiError, match=f"Cannot reach the speakwire server at {dead_url}: connection refused"):
        await collect(SpeechBackend.for_server(dead_url), SpeakRequest(TEXT))


async def test_a_server_that_needs_a_key_tells_the_user_to_pass_api_key(keyed_server: LiveServer) -> None:
    backend = SpeechBackend.for_server(keyed_server.url)
    with pytest.raises(UiError, match="needs a valid API key: start the UI with --api-key KEY"):
        await backend.catalogue()
    with pytest.raises(UiError, match=r"Missing or invalid API key.*Start the UI with --api-key KEY"):
        await collect(backend, SpeakRequest(TEXT))


async def test_the_api_key_opens_both_the_catalogue_and_the_stream(keyed_server: LiveServer) -> None:
    backend = SpeechBackend.for_server(keyed_server.url, api_key="sesame")
    assert (await backend.catalogue()).voices
    assert (await collect(backend, SpeakRequest(TEXT)))[-1][1].finished


async def test_a_busy_server_says_to_try_again() -> None:
    backend = scripted([], close=TransportClosed(1013, "server at capacity"))
    with pytest.raises(UiError) as caught:
        await collect(backend, SpeakRequest(TEXT))
    assert str(caught.value) == (
        "test server ended the stream: server at capacity (the server is busy with other streams; "
        "try again in a moment)."
    )


async def test_a_failed_sentence_is_a_warning_and_the_rest_still_plays() -> None:
    backend = scripted([
        {"type": "audio.start", "sample_rate": 16000},
        b"\x01\x00" * 100,
        {"type": "error", "message": "Sentence 1 failed: engine hiccup"},
        {"type": "session.done"},
    ])  # fmt: skip
    items = await collect(backend, SpeakRequest(TEXT))
    final = items[-1][1]
    assert final.finished and final.chunks == 1 and final.sample_rate == 16000
    assert final.warnings == ("Sentence 1 failed: engine hiccup",)
    assert final.describe().endswith("\nServer: Sentence 1 failed: engine hiccup")


async def test_a_frame_with_an_odd_byte_carries_it_into_the_next_chunk() -> None:
    backend = scripted([b"\x01\x02\x03", b"\x04\x05\x06", {"type": "session.done"}])
    chunks = [pcm for pcm, _ in await collect(backend, SpeakRequest(TEXT)) if pcm]
    assert chunks == [b"\x01\x02", b"\x03\x04\x05\x06"]


async def test_a_stream_that_closes_without_a_reason_still_says_what_happened() -> None:
    with pytest.raises(UiError, match=r"^test server ended the stream: it closed before the speech was done\.$"):
        await collect(scripted([b"\x00\x00"]), SpeakRequest(TEXT))


def test_the_status_line_counts_chunks_bytes_audio_and_time_to_first_audio() -> None:
    progress = StreamProgress(chunks=9, total_bytes=167_742, sample_rate=24_000, time_to_first_audio_s=0.2614)
    assert progress.describe() == "Streaming: 9 chunks, 167,742 bytes (3.49 s of audio); first audio after 261 ms."


def test_a_reference_clip_travels_as_a_data_uri_with_its_transcript(tmp_path: Path) -> None:
    clip = tmp_path / "me.wav"
    with wave.open(str(clip), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(24_000)
        wav.writeframes(b"\x00\x01" * 2400)
    uri = reference_data_uri(clip)
    config = SpeakRequest("Hi.", ref_audio=uri, ref_text="What I said.").session_config()
    header, _, payload = config["ref_audio"].partition(",")
    assert header in ("data:audio/wav;base64", "data:audio/x-wav;base64")
    assert base64.b64decode(payload) == clip.read_bytes()
    assert config["ref_text"] == "What I said."


def test_session_config_streams_raw_pcm_and_leaves_unset_fields_to_the_server() -> None:
    assert SpeakRequest("Hi.", voice="", language=None).session_config() == {
        "response_format": "pcm",
        "stream_audio": True,
    }


def test_the_backend_works_without_gradio_installed() -> None:
    code = "import sys, speakwire.ui.backend; sys.exit('gradio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


class FakeSageMakerRuntime:
    """boto3's sagemaker-runtime client, answering InvokeEndpoint with a fixed body or error."""

    def __init__(self, answer: bytes | Exception) -> None:
        self.answer = answer
        self.calls: list[dict[str, object]] = []

    def invoke_endpoint(self, **request: object) -> dict[str, object]:
        self.calls.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return {"Body": io.BytesIO(self.answer)}


def fake_runtime(monkeypatch: pytest.MonkeyPatch, answer: bytes | Exception) -> FakeSageMakerRuntime:
    boto3 = pytest.importorskip("boto3")
    runtime = FakeSageMakerRuntime(answer)
    monkeypatch.setattr(boto3, "client", lambda service, region_name: runtime)
    return runtime


async def test_an_endpoint_lists_its_voices_through_the_invocations_route(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"voices": ["Vivian", "Ryan"], "default_voice": "Vivian", "languages": ["Auto", "English"],
            "supports_cloning": False, "engine": "qwen3"}  # fmt: skip
    runtime = fake_runtime(monkeypatch, json.dumps(body).encode())
    catalogue = await SpeechBackend.for_sagemaker("tts", region="us-west-2").catalogue()
    assert catalogue.voices == ("Vivian", "Ryan")
    assert runtime.calls[0]["CustomAttributes"] == "route=/v1/audio/voices"
    assert runtime.calls[0]["EndpointName"] == "tts"


async def test_an_endpoint_that_cannot_list_voices_offers_the_qwen3_speakers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_runtime(monkeypatch, RuntimeError("the vLLM-Omni container has no such route"))
    catalogue = await SpeechBackend.for_sagemaker("tts", region="us-west-2").catalogue()
    assert catalogue.default_voice == "Vivian"
    assert "English" in catalogue.languages and catalogue.languages[0] == "Auto"
    assert "type a speaker name" in catalogue.describe()


async def test_an_endpoint_whose_stream_client_cannot_run_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from speakwire.deploy.sagemaker import bidi

    def unavailable() -> None:
        raise bidi.BidiClientUnavailableError("cannot run on Python 3.11")

    monkeypatch.setattr(bidi, "load_bidi_sdk", unavailable)
    with pytest.raises(UiError, match=r'needs Python >= 3\.12 and pip install "speakwire\[sagemaker-bidi\]"'):
        await collect(SpeechBackend.for_sagemaker("tts", region="us-west-2"), SpeakRequest(TEXT))


def test_saved_voices_from_the_library_appear_by_name() -> None:
    from speakwire.ui.backend import Catalogue

    body = {"voices": ["Vivian"], "uploaded_voices": [{"name": "grandma", "consent": "she agreed"}, "legacy"]}
    assert Catalogue.from_json(body).voices == ("Vivian", "grandma", "legacy")
