"""Reference audio for a cloning request: any file in, 24 kHz mono 16-bit WAV bytes out.

The endpoint could decode the user's file itself, but sending it as-is wastes the 6 MiB
request budget (30 s of stereo 48 kHz WAV is 5.5 MiB before base64) and fails late, on
the endpoint, for formats or durations it refuses. Decoding locally with the server's own
decoder (``speakwire.audio.decode``: PyAV + soxr) sends the smallest lossless form the
model uses — about 1.9 MiB of base64 for 30 s — and rejects a bad clip before any call.
"""

from __future__ import annotations

import io
import wave

from speakwire.audio.decode import REFERENCE_SAMPLE_RATE, decode_reference_audio
from speakwire.errors import BadRequestError

MIN_REFERENCE_S = 1.0
MAX_REFERENCE_S = 30.0


class ReferenceAudioError(ValueError):
    """The reference audio cannot be decoded, or is too short or too long."""


def reference_wav(data: bytes, *, min_s: float = MIN_REFERENCE_S, max_s: float = MAX_REFERENCE_S) -> bytes:
    """Decode ``data`` (WAV, FLAC, MP3, OGG/Opus, M4A/AAC, WebM...) to a 24 kHz mono 16-bit WAV file.

    Args:
        data: The file's bytes.
        min_s: Shortest accepted duration; cloning needs at least ~1 s of speech.
        max_s: Longest accepted duration.

    Raises:
        ReferenceAudioError: Undecodable data, or a duration out of range.
    """
    try:
        chunk = decode_reference_audio(data, min_s=min_s, max_s=max_s)
    except BadRequestError as exc:
        raise ReferenceAudioError(exc.message) from exc
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(REFERENCE_SAMPLE_RATE)
        wav.writeframes(chunk.to_int16_bytes())
    return buffer.getvalue()
