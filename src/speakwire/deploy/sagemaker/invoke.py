"""One speech request through ``InvokeEndpoint`` (or its response-stream variant).

This is the JumpStart voice-cloning call (Qwen3-TTS Base with a reference clip): a JSON
body for ``/v1/audio/speech`` routed by ``CustomAttributes`` — without ``route=`` the
vLLM-Omni container hands the body to its completions handler and rejects it. Without a
reference clip the same route speaks with a built-in CustomVoice speaker instead.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from speakwire.deploy.sagemaker.aws_errors import error_message
from speakwire.deploy.sagemaker.reference_audio import reference_wav
from speakwire.deploy.sagemaker.speech_response import SpeechResponseError, speech_response_wav

SPEECH_ROUTE = "route=/v1/audio/speech"
MODEL_PATH = "/opt/ml/model"  # where SageMaker mounts JumpStart model artifacts
MAX_REQUEST_BYTES = 6 * 1024 * 1024  # InvokeEndpoint's payload limit, base64 ref_audio included

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class InvokeResult:
    """What came back: where the WAV went and how long it took."""

    output: Path
    wav_bytes: int
    elapsed_s: float
    first_byte_s: float | None = None  # response stream only
    payload_parts: int = 0  # response stream only


def speech_request_body(
    text: str,
    *,
    reference_wav_bytes: bytes | None = None,
    ref_text: str | None = None,
    voice: str | None = None,
    language: str | None = None,
) -> bytes:
    """The ``/v1/audio/speech`` JSON body.

    With ``reference_wav_bytes`` it is the seed-004 voice-cloning body (``task_type``
    Base, ``ref_audio`` as a WAV data URI, ``ref_text``); without, a CustomVoice request
    for ``voice``.

    Raises:
        ValueError: Empty text, or a body over the 6 MiB InvokeEndpoint limit.
    """
    if not text.strip():
        raise ValueError("text must not be empty")
    body: dict[str, object] = {"model": MODEL_PATH, "input": text}
    if reference_wav_bytes is not None:
        body["task_type"] = "Base"
        body["ref_audio"] = "data:audio/wav;base64," + base64.b64encode(reference_wav_bytes).decode("ascii")
        if ref_text:
            body["ref_text"] = ref_text
    else:
        body["task_type"] = "CustomVoice"
        if voice:
            body["voice"] = voice
    if language:
        body["language"] = language
    body["response_format"] = "wav"
    encoded = json.dumps(body).encode("utf-8")
    if len(encoded) > MAX_REQUEST_BYTES:
        raise ValueError(
            f"request body is {len(encoded)} bytes, over SageMaker's {MAX_REQUEST_BYTES}-byte limit; "
            "use a shorter reference clip"
        )
    return encoded


def invoke(
    runtime_client: Any,
    endpoint_name: str,
    *,
    text: str,
    output: Path,
    ref_audio_path: Path | None = None,
    ref_text: str | None = None,
    voice: str | None = None,
    language: str | None = "English",
    stream: bool = False,
    log: Log = print,
    clock: Callable[[], float] = time.monotonic,
) -> InvokeResult:
    """Synthesize ``text`` on the endpoint and write the WAV to ``output``.

    Args:
        runtime_client: A boto3 ``sagemaker-runtime`` client.
        endpoint_name: The endpoint to call.
        text: What to say.
        output: Where to write the WAV file.
        ref_audio_path: Reference clip for voice cloning, any format, 1–30 s.
        ref_text: Transcript of the reference clip (improves cloning).
        voice: CustomVoice speaker, used when there is no reference clip.
        language: Language name, or None for the server's default.
        stream: Use ``InvokeEndpointWithResponseStream`` and report time to first byte.
        log: Where progress goes.
        clock: Monotonic clock for the timings.

    Raises:
        SpeechResponseError: The endpoint answered with an error or something that is not audio.
        botocore.exceptions.ClientError: The call itself failed (e.g. ``ModelError``).
    """
    reference = reference_wav(ref_audio_path.read_bytes()) if ref_audio_path is not None else None
    body = speech_request_body(text, reference_wav_bytes=reference, ref_text=ref_text, voice=voice, language=language)
    request = {
        "EndpointName": endpoint_name,
        "ContentType": "application/json",
        "Accept": "audio/wav",
        "CustomAttributes": SPEECH_ROUTE,
        "Body": body,
    }
    start = clock()
    if stream:
        response = runtime_client.invoke_endpoint_with_response_stream(**request)
        raw, parts, first_byte_s = _join_payload_parts(response["Body"], start, clock)
    else:
        response = runtime_client.invoke_endpoint(**request)
        raw, parts, first_byte_s = response["Body"].read(), 0, None
    wav = speech_response_wav(raw)
    output.write_bytes(wav)
    result = InvokeResult(output, len(wav), clock() - start, first_byte_s, parts)
    timing = f" first byte after {first_byte_s:.2f} s," if first_byte_s is not None else ""
    log(f"wrote {output} ({len(wav)} bytes);{timing} total {result.elapsed_s:.2f} s")
    return result


def _join_payload_parts(
    events: Iterable[Mapping[str, Any]], start: float, clock: Callable[[], float]
) -> tuple[bytes, int, float | None]:
    """Join ``PayloadPart`` bytes; the boundaries carry no meaning, so nothing is parsed per part."""
    joined = bytearray()
    parts = 0
    first_byte_s: float | None = None
    try:
        for event in events:
            if "PayloadPart" in event:
                chunk = event["PayloadPart"].get("Bytes", b"")
                if chunk and first_byte_s is None:
                    first_byte_s = clock() - start
                joined.extend(chunk)
                parts += 1
            for failure in ("ModelStreamError", "InternalStreamFailure"):
                if failure in event:
                    raise SpeechResponseError(f"{failure}: {event[failure].get('Message', '')}")
    except ClientError as exc:  # botocore raises modeled stream errors as EventStreamError
        raise SpeechResponseError(f"{exc.response.get('Error', {}).get('Code')}: {error_message(exc)}") from exc
    return bytes(joined), parts, first_byte_s
