"""A saved voice's reference audio: any upload → the one canonical file the library keeps.

Uploads arrive as whatever a recorder produced (WAV, FLAC, MP3, OGG/Opus,
M4A/AAC, WebM). They are decoded once (``speakwire.audio.decode``: 24 kHz mono,
1–30 s) and kept as 24-bit FLAC: lossless for the decoded signal at a third of a
float WAV's size, readable by every tool. The samples handed on for prompt
encoding are the ones the FLAC file decodes to, not the pre-quantisation floats,
so a prompt computed at upload equals one computed later from the stored file.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from speakwire.audio.chunk import AudioChunk
from speakwire.audio.decode import REFERENCE_SAMPLE_RATE, decode_reference_audio
from speakwire.errors import BadRequestError, PayloadTooLargeError, SpeakwireError

MAX_AUDIO_BYTES = 10 * 1024 * 1024
"""Largest accepted upload: 30 s of 48 kHz stereo 16-bit WAV is 5.5 MiB."""
MIN_AUDIO_S, MAX_AUDIO_S = 1.0, 30.0
AUDIO_FILE = "audio.flac"

_MAGIC = (
    (b"RIFF", "audio/wav"),
    (b"fLaC", "audio/flac"),
    (b"OggS", "audio/ogg"),
    (b"ID3", "audio/mpeg"),
    (b"\xff\xfb", "audio/mpeg"),
    (b"\xff\xf3", "audio/mpeg"),
    (b"\xff\xf2", "audio/mpeg"),
    (b"\x1a\x45\xdf\xa3", "audio/webm"),
)


@dataclass(frozen=True, slots=True)
class ReferenceAudio:
    """The normalised reference of a voice about to be saved."""

    flac: bytes
    """The file the library stores."""
    audio: AudioChunk
    """Exactly what ``flac`` decodes to (24 kHz mono float32)."""
    sha256: str
    """SHA-256 of ``flac``."""
    source_size: int
    """Bytes of the upload."""
    mime_type: str
    """Media type of the upload: as labelled by the client, else sniffed from its first bytes."""


def normalise_reference(data: bytes, *, mime_type: str | None = None, param: str = "audio_sample") -> ReferenceAudio:
    """Decode an uploaded clip and re-encode it as the library's 24 kHz mono FLAC.

    Blocking (decoding, resampling): call it from a worker thread.

    Raises:
        PayloadTooLargeError: Over ``MAX_AUDIO_BYTES``.
        BadRequestError: Empty, not audio, or shorter than 1 s / longer than 30 s; the message names ``param``.
    """
    if len(data) > MAX_AUDIO_BYTES:
        raise PayloadTooLargeError(
            f"{param} is {len(data) / 2**20:.1f} MiB; the limit is {MAX_AUDIO_BYTES // 2**20} MiB. "
            "Send a shorter (1–30 s) or compressed clip.",
            param=param,
        )
    try:
        decoded = decode_reference_audio(data, min_s=MIN_AUDIO_S, max_s=MAX_AUDIO_S)
    except SpeakwireError as exc:
        # The decoder speaks of ``ref_audio`` (the speech request's field); say which field this is.
        raise type(exc)(exc.message.replace("ref_audio", param), param=param) from exc
    flac = encode_flac(decoded)
    audio = read_flac(flac)
    return ReferenceAudio(
        flac=flac,
        audio=audio,
        sha256=hashlib.sha256(flac).hexdigest(),
        source_size=len(data),
        mime_type=_media_type(mime_type) or sniff_mime_type(data),
    )


def encode_flac(audio: AudioChunk) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio.samples, audio.sample_rate, format="FLAC", subtype="PCM_24")
    return buffer.getvalue()


def read_flac(data: bytes) -> AudioChunk:
    """A stored reference file → 24 kHz mono float32.

    Raises:
        BadRequestError: Not a 24 kHz mono FLAC (a damaged or foreign file).
    """
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise BadRequestError(f"stored voice audio could not be read: {exc}", param="audio_sample") from exc
    if rate != REFERENCE_SAMPLE_RATE or np.ndim(samples) != 1:
        raise BadRequestError(
            f"stored voice audio must be {REFERENCE_SAMPLE_RATE} Hz mono, got {rate} Hz with shape {samples.shape}",
            param="audio_sample",
        )
    return AudioChunk(np.ascontiguousarray(samples, dtype=np.float32), int(rate))


def sniff_mime_type(data: bytes) -> str:
    """A media type from the file's magic bytes, for uploads that came without a label."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[4:8] == b"ftyp":
        return "audio/mp4"
    return "application/octet-stream"


def _media_type(label: str | None) -> str | None:
    """A client's label without parameters; None when it says nothing (missing or octet-stream)."""
    if not label:
        return None
    media_type = label.split(";", 1)[0].strip().lower()
    if not media_type or media_type == "application/octet-stream" or "/" not in media_type:
        return None
    return media_type[:100]
