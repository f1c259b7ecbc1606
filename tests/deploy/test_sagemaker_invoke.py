"""invoke(): the seed-004 request, and WAV bytes rebuilt from payload parts cut anywhere.

The plain call runs against a Stubber. Stubber cannot return an event stream, so the
response-stream call runs the real botocore path instead: the request is serialized and
signed for real, a ``before-send`` hook captures it and answers with genuine
``application/vnd.amazon.eventstream`` bytes, which botocore parses into events.
"""

from __future__ import annotations

import base64
import binascii
import io
import itertools
import json
import struct
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import soundfile
from botocore.awsrequest import AWSResponse
from botocore.response import StreamingBody
from sagemaker_stubs import NAME, REGION, Stubbed

from speakwire.deploy.sagemaker.invoke import invoke, speech_request_body
from speakwire.deploy.sagemaker.reference_audio import ReferenceAudioError, reference_wav
from speakwire.deploy.sagemaker.speech_response import (
    SpeechResponseError,
    finalize_wav,
    speech_response_wav,
)

SAMPLE_RATE = 24000


def wav_bytes(seconds: float, *, streamed_header: bool = False) -> bytes:
    samples = (0.3 * np.sin(np.arange(int(SAMPLE_RATE * seconds)) * 2 * np.pi * 220 / SAMPLE_RATE)).astype("<f4")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes((samples * 32767).astype("<i2").tobytes())
    data = bytearray(buffer.getvalue())
    if streamed_header:  # what a streaming server sends: length unknown
        struct.pack_into("<I", data, 4, 0xFFFFFFFF)
        struct.pack_into("<I", data, 40, 0xFFFFFFFF)
    return bytes(data)


@pytest.fixture
def reference_clip(tmp_path: Path) -> Path:
    """2 s of stereo 48 kHz FLAC: neither the format, the rate nor the channels the model takes."""
    path = tmp_path / "me.flac"
    t = np.arange(2 * 48000) / 48000
    stereo = np.stack([0.3 * np.sin(2 * np.pi * 180 * t), 0.3 * np.sin(2 * np.pi * 240 * t)], axis=1)
    soundfile.write(path, stereo, 48000, format="FLAC")
    return path


def test_reference_audio_in_any_format_becomes_24khz_mono_wav(reference_clip: Path) -> None:
    with wave.open(io.BytesIO(reference_wav(reference_clip.read_bytes()))) as decoded:
        assert (decoded.getframerate(), decoded.getnchannels(), decoded.getsampwidth()) == (24000, 1, 2)
        assert decoded.getnframes() / 24000 == pytest.approx(2.0, abs=0.01)


def test_reference_audio_outside_one_to_thirty_seconds_is_rejected() -> None:
    with pytest.raises(ReferenceAudioError, match="between 1 and 30 s"):
        reference_wav(wav_bytes(0.5))


def test_undecodable_reference_audio_is_rejected() -> None:
    with pytest.raises(ReferenceAudioError):
        reference_wav(b"this is not audio at all" * 100)


def test_the_cloning_body_matches_the_jumpstart_request() -> None:
    body = json.loads(speech_request_body("Hi.", reference_wav_bytes=b"RIFFxx", ref_text="Me.", language="English"))

    assert body == {
        "model": "/opt/ml/model",
        "input": "Hi.",
        "task_type": "Base",
        "ref_audio": "data:audio/wav;base64," + base64.b64encode(b"RIFFxx").decode(),
        "ref_text": "Me.",
        "language": "English",
        "response_format": "wav",
    }


def test_without_a_reference_clip_the_body_asks_for_a_built_in_voice() -> None:
    body = json.loads(speech_request_body("Hi.", voice="Vivian", language=None))

    assert body == {
        "model": "/opt/ml/model",
        "input": "Hi.",
        "task_type": "CustomVoice",
        "voice": "Vivian",
        "response_format": "wav",
    }


def test_a_body_over_the_invoke_limit_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="6291456-byte limit"):
        speech_request_body("Hi.", reference_wav_bytes=b"\0" * 5_000_000)


def test_plain_invoke_sends_the_routed_cloning_request_and_writes_the_wav(
    runtime: Stubbed, reference_clip: Path, tmp_path: Path
) -> None:
    audio = wav_bytes(1.0)

    def expected_body(body: bytes) -> bool:
        sent = json.loads(body)
        ref = base64.b64decode(sent["ref_audio"].removeprefix("data:audio/wav;base64,"))
        with wave.open(io.BytesIO(ref)) as clip:
            return bool(sent["task_type"] == "Base" and clip.getframerate() == 24000 and clip.getnchannels() == 1)

    class BodyCheck:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, bytes) and expected_body(other)

    runtime.stub.add_response(
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(audio), len(audio)), "ContentType": "audio/wav"},
        {
            "EndpointName": NAME,
            "ContentType": "application/json",
            "Accept": "audio/wav",
            "CustomAttributes": "route=/v1/audio/speech",
            "Body": BodyCheck(),
        },
    )
    output = tmp_path / "out.wav"

    result = invoke(
        runtime.client,
        NAME,
        text="Hello there.",
        output=output,
        ref_audio_path=reference_clip,
        ref_text="Reference words.",
        language="English",
        log=lambda _: None,
    )

    assert output.read_bytes() == audio
    assert result.wav_bytes == len(audio)
    assert result.first_byte_s is None


def test_an_error_body_becomes_an_error_with_the_servers_message(runtime: Stubbed, tmp_path: Path) -> None:
    error = json.dumps({"error": {"message": "Input text cannot be empty", "code": 400}}).encode()
    runtime.stub.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(error), len(error))}, None)

    with pytest.raises(SpeechResponseError, match="Input text cannot be empty"):
        invoke(runtime.client, NAME, text="x", output=tmp_path / "o.wav", log=lambda _: None)


# --- response stream over real botocore parsing -------------------------------------------------


def _header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude, CRC, headers, payload, CRC."""
    header_bytes = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack(">I", binascii.crc32(message))


def payload_part(data: bytes) -> bytes:
    return event_message(
        {":event-type": "PayloadPart", ":message-type": "event", ":content-type": "application/octet-stream"},
        data,
    )


class ChunkedRaw:
    """A urllib3-like raw response whose ``stream()`` yields the bytes in awkward network chunks."""

    def __init__(self, data: bytes, chunk: int = 7) -> None:
        self._data, self._chunk = data, chunk

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        for i in range(0, len(self._data), self._chunk):
            yield self._data[i : i + self._chunk]


class StreamingEndpoint:
    """Answers InvokeEndpointWithResponseStream on a real client with prepared event-stream bytes."""

    def __init__(self, events: bytes) -> None:
        self.events = events
        self.requests: list[Any] = []
        self.client = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        ).client("sagemaker-runtime")
        self.client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpointWithResponseStream", self._answer)

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        self.requests.append(request)
        headers = {
            "Content-Type": "application/vnd.amazon.eventstream",
            "X-Amzn-Invoked-Production-Variant": "AllTraffic",
        }
        return AWSResponse(request.url, 200, headers, ChunkedRaw(self.events))


def test_streamed_payload_parts_split_at_odd_bytes_rebuild_one_valid_wav(tmp_path: Path) -> None:
    streamed = wav_bytes(1.0, streamed_header=True)
    cuts = [0, 3, 41, 45, 1001, 1002, 30_001, len(streamed)]  # inside the header, mid-sample, mid-chunk
    endpoint = StreamingEndpoint(b"".join(payload_part(streamed[a:b]) for a, b in itertools.pairwise(cuts)))
    output = tmp_path / "stream.wav"
    ticks = iter([0.0, 0.25, 0.5, 1.0])

    result = invoke(
        endpoint.client,
        NAME,
        text="Streaming.",
        output=output,
        voice="Vivian",
        stream=True,
        log=lambda _: None,
        clock=lambda: next(ticks),
    )

    with wave.open(str(output)) as decoded:  # the stdlib reader trusts the header sizes
        assert decoded.getnframes() == SAMPLE_RATE
        assert decoded.getframerate() == SAMPLE_RATE
    assert output.read_bytes()[44:] == streamed[44:]
    assert result.payload_parts == len(cuts) - 1
    assert result.first_byte_s == 0.25
    sent = endpoint.requests[0]
    assert sent.url.endswith(f"/endpoints/{NAME}/invocations-response-stream")
    assert sent.headers["X-Amzn-SageMaker-Custom-Attributes"] == b"route=/v1/audio/speech"
    assert sent.headers["X-Amzn-SageMaker-Accept"] == b"audio/wav"
    assert json.loads(sent.body)["voice"] == "Vivian"


def test_a_model_stream_error_mid_stream_is_reported(tmp_path: Path) -> None:
    error = event_message(
        {
            ":message-type": "exception",
            ":exception-type": "ModelStreamError",
            ":content-type": "application/json",
        },
        json.dumps({"Message": "container closed the stream", "ErrorCode": "ModelStreamError"}).encode(),
    )
    endpoint = StreamingEndpoint(payload_part(wav_bytes(0.2)[:100]) + error)

    with pytest.raises(SpeechResponseError, match="container closed the stream"):
        invoke(endpoint.client, NAME, text="x", output=tmp_path / "o.wav", stream=True, log=lambda _: None)


# --- the reply parser on its own ----------------------------------------------------------------


def test_sse_replies_are_turned_back_into_a_wav() -> None:
    audio = wav_bytes(0.5, streamed_header=True)
    halves = (audio[:1000], audio[1000:])
    sse = (
        b"".join(
            b"data: "
            + json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(h).decode()}).encode()
            + b"\n\n"
            for h in halves
        )
        + b'data: {"type": "speech.audio.done"}\n\n'
    )

    with wave.open(io.BytesIO(speech_response_wav(sse))) as decoded:
        assert decoded.getnframes() == SAMPLE_RATE // 2


def test_an_sse_error_event_raises_with_its_message() -> None:
    sse = b'data: {"type": "speech.audio.error", "error": {"message": "voice not found"}}\n\n'

    with pytest.raises(SpeechResponseError, match="voice not found"):
        speech_response_wav(sse)


def test_finalize_wav_drops_a_trailing_half_sample() -> None:
    audio = wav_bytes(0.1, streamed_header=True) + b"\x01"

    fixed = finalize_wav(audio)

    assert len(fixed) == len(audio) - 1
    assert struct.unpack_from("<I", fixed, 40)[0] == len(fixed) - 44
