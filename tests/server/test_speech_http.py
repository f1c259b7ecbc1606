"""POST /v1/audio/speech over a real loopback server with the real Piper voice."""

from __future__ import annotations

import base64
import json
import struct

import httpx
import numpy as np
import pytest

from support.audio import decode, pcm_to_float
from support.live_server import LiveServer

TEXT = "Hello there. The quick brown fox jumps over the lazy dog."
FORMATS = ("wav", "pcm", "flac", "mp3", "opus", "aac", "ulaw", "alaw")


def speech(server: LiveServer, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", json={"input": TEXT, **body}, timeout=60)


def sse_events(response: httpx.Response) -> list[dict]:
    events = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: "):
            events.append(json.loads(block[len("data: ") :]))
    return events


@pytest.fixture(scope="module")
def reference_duration(server: LiveServer) -> float:
    response = speech(server, response_format="wav", seed=1)
    samples, rate = decode(response.content, "wav")
    return len(samples) / rate


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("delivery", ["file", "audio", "sse"])
def test_every_format_and_delivery_decodes_to_the_expected_duration(
    server: LiveServer, reference_duration: float, fmt: str, delivery: str
) -> None:
    body: dict[str, object] = {"response_format": fmt, "seed": 1}
    if delivery != "file":
        body["stream_format"] = delivery
    response = speech(server, **body)
    assert response.status_code == 200, response.text
    rate = int(response.headers["x-audio-sample-rate"])
    assert response.headers["x-audio-channels"] == "1"
    if delivery == "sse":
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
        assert events[-1]["type"] == "speech.audio.done"
        assert events[-1]["usage"]["input_tokens"] == len(TEXT)
        data = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    else:
        data = response.content
    samples, decoded_rate = decode(data, fmt, rate)
    assert decoded_rate == rate
    # Lossy codecs add priming/padding of at most a few frames.
    assert abs(len(samples) / rate - reference_duration) < 0.08, (len(samples) / rate, reference_duration)


def test_raw_sse_and_whole_file_carry_the_same_pcm(server: LiveServer) -> None:
    whole = speech(server, response_format="pcm", seed=7).content
    raw = speech(server, response_format="pcm", seed=7, stream_format="audio").content
    events = sse_events(speech(server, response_format="pcm", seed=7, stream_format="sse"))
    sse = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(whole) > 24000 * 2  # more than a second of audio
    assert whole == raw == sse


def test_streamed_wav_has_one_header_with_unknown_sizes(server: LiveServer) -> None:
    body = {"input": TEXT, "response_format": "wav", "stream_format": "audio"}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body) as response:
        chunks = list(response.iter_raw())
    data = b"".join(chunks)
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", data[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", data[40:44])[0] == 0xFFFFFFFF
    assert data.count(b"RIFF") == 1


def test_whole_wav_has_real_sizes_and_content_type(server: LiveServer) -> None:
    response = speech(server, response_format="wav")
    assert response.headers["content-type"] == "audio/wav"
    data = response.content
    assert struct.unpack("<I", data[4:8])[0] == len(data) - 8
    assert struct.unpack("<I", data[40:44])[0] == len(data) - 44


def test_pcm_is_24khz_by_default_and_resampled_on_request(server: LiveServer) -> None:
    default = speech(server, response_format="pcm", seed=3)
    assert default.headers["x-audio-sample-rate"] == "24000"
    at_16k = speech(server, response_format="pcm", seed=3, sample_rate=16000)
    assert at_16k.headers["x-audio-sample-rate"] == "16000"
    ratio = len(at_16k.content) / len(default.content)
    assert abs(ratio - 16000 / 24000) < 0.01
    # Resampling keeps the signal: the 16 kHz version correlates with the 24 kHz one resampled.
    a = pcm_to_float(default.content)[::3]
    b = pcm_to_float(at_16k.content)[::2]
    n = min(len(a), len(b))
    assert np.corrcoef(a[:n], b[:n])[0, 1] > 0.9


def test_speed_changes_duration(server: LiveServer) -> None:
    normal = len(speech(server, response_format="pcm", seed=1).content)
    fast = len(speech(server, response_format="pcm", seed=1, speed=2.0).content)
    assert fast < normal * 0.7


def test_openai_model_and_voice_names_are_aliases(server: LiveServer) -> None:
    for model, voice in [("tts-1", "alloy"), ("tts-1-hd", "NOVA"), ("gpt-4o-mini-tts", {"id": "shimmer"})]:
        response = speech(server, model=model, voice=voice, response_format="pcm")
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"model": "no-such-model"}, 404, "tts-1"),
        ({"voice": "nobody"}, 404, "en_US-joe-medium"),
        ({"response_format": "wma"}, 400, "mp3"),
        ({"speed": 9}, 400, "speed"),
        ({"sample_rate": 4000}, 400, "8000"),
        ({"input": "   "}, 400, "empty"),
        ({"input": "x" * 10_001}, 400, "10000"),
        ({"instructions": "whisper"}, 400, "instructions"),
        ({"task_type": "Base", "ref_text": "hi"}, 400, "clone"),
        ({"language": "Japanese"}, 400, "English"),
        ({"stream_format": "video"}, 400, "stream_format"),
    ],
)
def test_bad_requests_get_a_clear_error(server: LiveServer, body: dict, status: int, needle: str) -> None:
    response = speech(server, **body)
    assert response.status_code == status
    error = response.json()["error"]
    assert needle in error["message"]
    assert error["code"] == status


def test_malformed_json_is_a_400_that_says_so(server: LiveServer) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", content=b"{not json",
                          headers={"content-type": "application/json"})  # fmt: skip
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]


def test_catalogue_routes(server: LiveServer) -> None:
    models = httpx.get(f"{server.url}/v1/models").json()
    ids = [m["id"] for m in models["data"]]
    assert "piper/en_US-joe-medium" in ids and "tts-1" in ids
    voices = httpx.get(f"{server.url}/v1/audio/voices").json()
    assert voices["voices"] == ["en_US-joe-medium"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{server.url}/ready").status_code == 200
    assert httpx.get(f"{server.url}/docs").status_code == 200


def test_health_answers_while_a_long_synthesis_runs(server: LiveServer) -> None:
    import threading
    import time

    long_text = " ".join(["This sentence keeps the engine busy for a while."] * 40)
    finished: list[float] = []

    def long_request() -> None:
        response = speech(server, input=long_text, response_format="pcm")
        assert response.status_code == 200
        finished.append(time.monotonic())

    thread = threading.Thread(target=long_request)
    thread.start()
    time.sleep(0.2)
    answered = []
    for _ in range(5):
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        answered.append(time.monotonic())
    thread.join()
    # Ordering, not a timing: every probe was answered before the synthesis finished.
    assert finished and max(answered) < finished[0]


def test_client_disconnect_cancels_the_synthesis(server: LiveServer) -> None:
    import time

    def cancellations() -> float:
        for line in httpx.get(f"{server.url}/metrics").text.splitlines():
            if line.startswith('speakwire_cancellations_total{engine="piper",protocol="http"}'):
                return float(line.split()[-1])
        return 0.0

    state = server.state
    before = cancellations()
    long_text = " ".join(["Nobody will hear the end of this long sentence."] * 40)
    body = {"input": long_text, "response_format": "pcm", "stream_format": "audio"}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body) as response:
        next(response.iter_raw())  # audio is flowing; now hang up
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (state.pipeline.active or state.pipeline.scheduler.busy):
        time.sleep(0.05)
    assert state.pipeline.active == 0
    assert state.pipeline.scheduler.busy == 0 and state.pipeline.scheduler.queued == 0
    assert cancellations() == before + 1  # stopped by the hang-up, not by finishing


def test_piper_names_initial_codec_chunk_frames_ignored(server: LiveServer) -> None:
    # A first-chunk size in codec frames means nothing to Piper: it is accepted and named, not silently dropped.
    response = speech(server, response_format="pcm", initial_codec_chunk_frames=2)
    assert response.status_code == 200 and response.content
    assert response.headers["x-ignored-fields"] == "initial_codec_chunk_frames"
    assert "x-ignored-fields" not in speech(server, response_format="pcm").headers
