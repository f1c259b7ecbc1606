"""Encoders chosen by format name, and the sample rate each format gets when the client names none.

This is the only place that knows the list of formats, so protocol layers validate ``response_format`` by
calling ``create_encoder`` and every test runs against every entry of ``AUDIO_FORMATS``.

Content types follow the OpenAI/vLLM-Omni responses (protocols.md): ``audio/wav``, ``audio/pcm``,
``audio/flac``, ``audio/mpeg``, ``audio/aac``, and ``audio/ogg`` for Opus, which is Ogg-encapsulated.
Telephony formats have no container: µ-law is ``audio/basic`` (RFC 2046), A-law ``audio/x-alaw-basic``.

Default rates: 24 kHz wherever the format allows it, the rate OpenAI returns and LiveKit/Pipecat hard-code
for ``pcm``; 8 kHz for µ-law/A-law, the telephone rate; 48 kHz for Opus, its native rate. A requested rate
a codec cannot encode (MP3 and AAC take the MPEG rates, Opus 8/12/16/24/48 kHz) is mapped to the nearest one
it can, the higher on a tie, rather than refused: a client asking Opus for 44.1 kHz wants full band.
"""

from __future__ import annotations

from collections.abc import Callable

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.av_stream import AAC, FLAC, MP3, OPUS, AvFormat, AvStreamEncoder
from speakwire.encoders.base import Encoder
from speakwire.encoders.g711 import AlawEncoder, MulawEncoder
from speakwire.encoders.pcm import Float32PcmEncoder, PcmEncoder
from speakwire.encoders.wav import WavEncoder
from speakwire.errors import BadRequestError

AUDIO_FORMATS: tuple[str, ...] = ("wav", "pcm", "flac", "mp3", "opus", "aac", "ulaw", "alaw")
FLOAT_FORMATS: tuple[str, ...] = ("pcm_f32le", "wav_f32le")
"""32-bit float PCM, raw and in WAV, for vendor dialects that ask for it (Cartesia's ``pcm_f32le``); not
(yet) offered as an OpenAI ``response_format``, so ``create_encoder`` takes them but ``AUDIO_FORMATS`` does not
list them."""

MIN_SAMPLE_RATE = 8_000
MAX_SAMPLE_RATE = 192_000

_AV_FORMATS: dict[str, AvFormat] = {spec.name: spec for spec in (FLAC, MP3, OPUS, AAC)}

CONTENT_TYPES: dict[str, str] = {
    "wav": WavEncoder.content_type,
    "pcm": PcmEncoder.content_type,
    "ulaw": MulawEncoder.content_type,
    "alaw": AlawEncoder.content_type,
    **{name: spec.content_type for name, spec in _AV_FORMATS.items()},
}

_DEFAULT_RATES: dict[str, int] = {
    "wav": 24_000,
    "pcm": 24_000,
    "flac": 24_000,
    "mp3": 24_000,
    "opus": 48_000,
    "aac": 24_000,
    "ulaw": 8_000,
    "alaw": 8_000,
    "pcm_f32le": 24_000,
    "wav_f32le": 24_000,
}


def _av_factory(spec: AvFormat) -> Callable[[int, bool], Encoder]:
    return lambda rate, streaming: AvStreamEncoder(spec, rate, streaming=streaming)


_FACTORIES: dict[str, Callable[[int, bool], Encoder]] = {
    "wav": lambda rate, streaming: WavEncoder(rate, streaming=streaming),
    "pcm": lambda rate, streaming: PcmEncoder(rate),
    "ulaw": lambda rate, streaming: MulawEncoder(rate),
    "alaw": lambda rate, streaming: AlawEncoder(rate),
    "pcm_f32le": lambda rate, streaming: Float32PcmEncoder(rate),
    "wav_f32le": lambda rate, streaming: WavEncoder(rate, streaming=streaming, sample_format="f32le"),
    **{name: _av_factory(spec) for name, spec in _AV_FORMATS.items()},
}


def create_encoder(fmt: str, sample_rate: int, *, streaming: bool) -> Encoder:
    """A new encoder for one stream.

    Args:
        fmt: One of ``AUDIO_FORMATS``.
        sample_rate: The rate of the samples that will be encoded; one the format supports, as returned by
            ``default_sample_rate``.
        streaming: True when the bytes go to the client as they are made (chunked HTTP, SSE, WebSocket);
            False when the whole file is sent at once, so headers can carry exact lengths.

    Raises:
        BadRequestError: ``fmt`` is not a known format, or it cannot be encoded at ``sample_rate``.
    """
    factory = _FACTORIES.get(fmt)
    if factory is None:
        raise _unknown_format(fmt)
    _check_rate_range(sample_rate)
    if sample_rate != _supported_rate(fmt, sample_rate):
        raise BadRequestError(
            f"{fmt} cannot be encoded at {sample_rate} Hz; supported rates: {_AV_FORMATS[fmt].sample_rates}",
            param="sample_rate",
        )
    return factory(sample_rate, streaming)


def encode_file(fmt: str, sample_rate: int, samples: Float32Array | list[Float32Array]) -> bytes:
    """One complete file (real sizes in the header) from all the samples at once, or from their parts in order.

    Parts are encoded one after another, the same bytes as joined, so a caller that collected a stream's
    chunks on the event loop hands them over as they are and no copy of the whole is made there. Lossy
    formats cost ~10 ms of CPU per second of audio: call it off the event loop.
    """
    encoder = create_encoder(fmt, sample_rate, streaming=False)
    parts = samples if isinstance(samples, list) else [samples]
    return encoder.header() + b"".join(encoder.encode(part) for part in parts) + encoder.finish()


def default_sample_rate(fmt: str, requested: int | None, native: int) -> int:
    """The rate to encode ``fmt`` at: the requested one if the format allows it, else the policy above.

    Args:
        fmt: One of ``AUDIO_FORMATS``.
        requested: The rate the client asked for, or None.
        native: The engine's own rate. The policy does not use it today: every format defaults to a fixed
            rate so a client gets the same rate whichever engine speaks.

    Raises:
        BadRequestError: ``fmt`` is unknown, or ``requested`` is outside 8–192 kHz.
    """
    if fmt not in _DEFAULT_RATES:
        raise _unknown_format(fmt)
    if requested is None:
        return _DEFAULT_RATES[fmt]
    _check_rate_range(requested)
    return _supported_rate(fmt, requested)


def _unknown_format(fmt: str) -> BadRequestError:
    return BadRequestError(
        f"Unsupported response_format {fmt!r}; supported formats: {', '.join(AUDIO_FORMATS)}",
        param="response_format",
    )


def _check_rate_range(rate: int) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise BadRequestError(
            f"sample_rate must be between {MIN_SAMPLE_RATE} and {MAX_SAMPLE_RATE} Hz, got {rate}",
            param="sample_rate",
        )


def _supported_rate(fmt: str, rate: int) -> int:
    """``rate`` if the format's codec takes it, else its nearest supported rate (the higher on a tie)."""
    spec = _AV_FORMATS.get(fmt)
    rates = spec.sample_rates if spec is not None else None
    if rates is None:
        return rate
    return min(rates, key=lambda supported: (abs(supported - rate), -supported))
