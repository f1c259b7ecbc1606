"""Reference audio for voice cloning: whatever a client sends → 24 kHz mono float32.

Clients send reference clips in whatever their recorder produced (a browser's
MediaRecorder gives WebM/Opus, phones M4A/AAC, editors WAV or FLAC), usually
inline as a ``data:`` URI or plain base64. Decoding happens here, once, in
memory (PyAV, no temporary files, no ffmpeg binary), so engines only ever see
an ``AudioChunk`` at the rate the model wants. Every way this can go wrong is a
``BadRequestError`` that tells the client what to send instead.

Remote URLs are refused unless the server opts in (``--allow-remote-ref-audio``):
fetching arbitrary URLs on behalf of a client is a server-side request forgery
risk, and ``file://`` would let a client read the server's disk, so it is never
accepted.
"""

from __future__ import annotations

import base64
import binascii
import io
import re

import av
import numpy as np
import soxr

from speakwire.audio.chunk import AudioChunk, Float32Array
from speakwire.errors import BadRequestError, PayloadTooLargeError

REFERENCE_SAMPLE_RATE = 24_000
"""Qwen3-TTS's speech tokenizer and speaker encoder both run at 24 kHz."""

MAX_REFERENCE_BYTES = 25 * 1024 * 1024
"""30 s of 48 kHz stereo 16-bit WAV is 11 MiB; anything far above that is not a reference clip."""

_SUPPORTED = "WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM"
_DATA_URI = re.compile(r"^data:(?P<header>[^,]*),(?P<payload>.*)$", re.DOTALL | re.IGNORECASE)
_SCHEME = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://")


def decode_reference_audio(data: bytes, *, min_s: float = 1.0, max_s: float = 30.0) -> AudioChunk:
    """Decode an encoded audio file held in memory to 24 kHz mono float32.

    Args:
        data: The file's bytes (any container/codec FFmpeg reads: WAV, FLAC, MP3, OGG/Opus, M4A/AAC, WebM).
        min_s: Shortest accepted duration in seconds.
        max_s: Longest accepted duration in seconds; decoding stops as soon as it is exceeded.

    Returns:
        The clip downmixed to mono (channel mean) and resampled to 24 kHz with soxr.

    Raises:
        BadRequestError: ``data`` is empty, not audio, or its duration is outside ``[min_s, max_s]``.
    """
    if not data:
        raise BadRequestError("ref_audio is empty; send a 1–30 s clip as " + _SUPPORTED, param="ref_audio")
    samples, rate = _decode_mono(data, max_s=max_s)
    duration = len(samples) / rate if rate else 0.0
    if duration < min_s or duration > max_s:
        raise BadRequestError(
            f"ref_audio is {duration:.2f} s long; it must be between {min_s:g} and {max_s:g} s. "
            "Send a clip of one clean sentence or two (3–10 s works best).",
            param="ref_audio",
        )
    if rate != REFERENCE_SAMPLE_RATE:
        samples = soxr.resample(samples, rate, REFERENCE_SAMPLE_RATE, quality="HQ").astype(np.float32)
    samples = np.clip(np.nan_to_num(samples), -1.0, 1.0).astype(np.float32, copy=False)
    return AudioChunk(samples=np.ascontiguousarray(samples), sample_rate=REFERENCE_SAMPLE_RATE)


def _decode_mono(data: bytes, *, max_s: float) -> tuple[Float32Array, int]:
    """All audio of the first audio stream as mono float32 at its own rate; stops once past ``max_s``."""
    not_audio = BadRequestError(
        f"ref_audio could not be decoded as audio; send {_SUPPORTED} (as a data URI or base64)",
        param="ref_audio",
    )
    pieces: list[Float32Array] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise not_audio
            stream = container.streams.audio[0]
            # Normalise every sample format (s16, s32, flt, dbl, planar or packed) to planar float.
            resampler = av.AudioResampler(format="fltp")
            rate = 0
            for packet in container.demux(stream):
                for frame in packet.decode():
                    rate = frame.sample_rate
                    for out in resampler.resample(frame):
                        planes = out.to_ndarray().astype(np.float32, copy=False)
                        pieces.append(planes.mean(axis=0))
                        total += planes.shape[-1]
                if rate and total > (max_s + 1.0) * rate:
                    break  # longer than allowed: no need to decode the rest (or a decompression bomb)
            for out in resampler.resample(None):
                planes = out.to_ndarray().astype(np.float32, copy=False)
                pieces.append(planes.mean(axis=0))
    except av.FFmpegError as exc:
        raise not_audio from exc
    if not pieces or rate <= 0:
        raise not_audio
    return np.concatenate(pieces).astype(np.float32, copy=False), rate


def parse_audio_reference(
    value: str,
    *,
    allow_remote: bool = False,
    timeout_s: float = 10.0,
    max_bytes: int = MAX_REFERENCE_BYTES,
) -> bytes:
    """The bytes of a ``ref_audio`` string field: a ``data:audio/...;base64,`` URI or plain base64.

    Args:
        value: The field as the client sent it.
        allow_remote: Fetch ``http(s)://`` URLs (the server's ``--allow-remote-ref-audio``). Blocking:
            call it from a worker thread, never on the event loop.
        timeout_s: Connect/read timeout for a remote fetch.
        max_bytes: Largest accepted payload.

    Raises:
        BadRequestError: Malformed value, a refused scheme (``file://``, or ``http(s)://`` without
            ``allow_remote``), or a failed fetch.
        PayloadTooLargeError: The audio is larger than ``max_bytes``.
    """
    text = value.strip()
    if not text:
        raise BadRequestError("ref_audio is empty; send a data URI (data:audio/wav;base64,...)", param="ref_audio")
    if text[:5].lower() == "data:":
        data = _parse_data_uri(text)
    elif (scheme := _SCHEME.match(text)) is not None:
        name = scheme.group("scheme").lower()
        if name in ("http", "https"):
            if not allow_remote:
                raise BadRequestError(
                    "ref_audio URLs are disabled on this server: send the audio inline as a data URI "
                    "(data:audio/wav;base64,...) or plain base64, or start the server with "
                    "--allow-remote-ref-audio to let it fetch http(s) URLs",
                    param="ref_audio",
                )
            data = _fetch(text, timeout_s=timeout_s, max_bytes=max_bytes)
        else:
            raise BadRequestError(
                f"ref_audio with a {name}:// reference is not accepted (the server does not read its own "
                "files for clients); send the audio inline as a data URI (data:audio/wav;base64,...)",
                param="ref_audio",
            )
    else:
        data = _b64decode(text)
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            f"ref_audio is {len(data) / 2**20:.1f} MiB; the limit is {max_bytes / 2**20:.0f} MiB. "
            "Send a shorter (≤ 30 s) or compressed clip.",
            param="ref_audio",
        )
    return data


def _parse_data_uri(text: str) -> bytes:
    match = _DATA_URI.match(text)
    params = match.group("header").split(";") if match else []
    media_type = params[0].strip().lower() if params else ""
    if match is None or "base64" not in (p.strip().lower() for p in params[1:]):
        raise BadRequestError(
            "ref_audio data URI must be base64-encoded, e.g. data:audio/wav;base64,UklGR...",
            param="ref_audio",
        )
    if (
        media_type
        and not media_type.startswith("audio/")
        and media_type
        not in (
            "video/webm",  # some browsers label audio-only WebM recordings as video/webm
            "application/octet-stream",
        )
    ):
        raise BadRequestError(
            f"ref_audio data URI has media type {media_type!r}; use an audio/* type such as audio/wav",
            param="ref_audio",
        )
    return _b64decode(match.group("payload"))


def _b64decode(text: str) -> bytes:
    compact = "".join(text.split())
    compact += "=" * (-len(compact) % 4)  # tolerate stripped padding
    try:
        if "-" in compact or "_" in compact:
            return base64.urlsafe_b64decode(compact)
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequestError(
            "ref_audio is neither a data URI (data:audio/wav;base64,...) nor valid base64",
            param="ref_audio",
        ) from exc


def _fetch(url: str, *, timeout_s: float, max_bytes: int) -> bytes:
    import httpx  # only servers that opted in to remote references pay for the import

    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=True, max_redirects=3) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise BadRequestError(
                    f"ref_audio URL returned HTTP {response.status_code}; check that it is public",
                    param="ref_audio",
                )
            body = bytearray()
            for part in response.iter_bytes():
                body += part
                if len(body) > max_bytes:
                    raise PayloadTooLargeError(
                        f"ref_audio at the URL is larger than {max_bytes / 2**20:.0f} MiB", param="ref_audio"
                    )
            return bytes(body)
    except httpx.HTTPError as exc:
        raise BadRequestError(f"ref_audio URL could not be fetched: {exc}", param="ref_audio") from exc
