"""Every format, streamed and not, encoded by the real encoders and decoded back by FFmpeg (PyAV)."""

from __future__ import annotations

import hashlib
import io
import struct
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import av
import numpy as np
import numpy.typing as npt
import pytest
import soundfile

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.base import Encoder
from speakwire.encoders.registry import (
    AUDIO_FORMATS,
    CONTENT_TYPES,
    create_encoder,
    default_sample_rate,
)
from speakwire.encoders.wav import UNKNOWN_SIZE
from speakwire.errors import BadRequestError

LOSSLESS = ("wav", "pcm", "flac")
LOSSY = ("mp3", "opus", "aac")
G711 = ("ulaw", "alaw")
CONTAINED = ("wav", "flac", "mp3", "opus", "aac")  # hold bytes back for finish() when not streaming
UNEVEN_CHUNKS = (137, 4096, 1, 999, 2000, 3, 480)
DURATION_S = 1.3

# Which FFmpeg demuxer reads each format; raw formats need their rate told.
_DEMUXERS = {
    "wav": "wav",
    "flac": "flac",
    "mp3": "mp3",
    "opus": "ogg",
    "aac": "aac",
    "pcm": "s16le",
    "ulaw": "mulaw",
    "alaw": "alaw",
}

# Samples a decoder may add before and after the input when the file cannot say how much to trim:
# the codec's priming plus the padding of its last frame. Opus (Ogg pre-skip and end granule), FLAC, and
# non-streamed MP3 (LAME tag) carry exact lengths.
_MP3_FRAMES_OF_SLACK = 3  # LAME: 576 + 529 samples of priming, then up to two frames of padding
_AAC_FRAMES_OF_SLACK = 2  # 1024 samples of priming, then up to one frame of padding


def sine_and_chirp(sample_rate: int, seconds: float = DURATION_S) -> Float32Array:
    """A 440 Hz tone plus a chirp sweeping to well below Nyquist: tonal and broadband at once."""
    t = np.arange(round(sample_rate * seconds)) / sample_rate
    top = min(4000.0, 0.4 * sample_rate)
    chirp = np.sin(2 * np.pi * (100 * t + (top - 100) / (2 * seconds) * t * t))
    return (0.4 * np.sin(2 * np.pi * 440 * t) + 0.3 * chirp).astype(np.float32)


def uneven_chunks(samples: Float32Array) -> Iterator[Float32Array]:
    start, i = 0, 0
    while start < len(samples):
        size = UNEVEN_CHUNKS[i % len(UNEVEN_CHUNKS)]
        yield samples[start : start + size]
        start, i = start + size, i + 1


@dataclass(frozen=True)
class Encoded:
    data: bytes
    before_finish: bytes
    samples: Float32Array
    sample_rate: int


@dataclass(frozen=True)
class Decoded:
    samples: npt.NDArray[np.float64]  # scaled to [-1, 1)
    int16: npt.NDArray[np.int16] | None  # the raw samples, when the decoder outputs s16
    sample_rate: int


def encode_all(encoder: Encoder, samples: Float32Array) -> Encoded:
    parts = [encoder.header()]
    parts.extend(encoder.encode(chunk) for chunk in uneven_chunks(samples))
    before_finish = b"".join(parts)
    return Encoded(before_finish + encoder.finish(), before_finish, samples, encoder.sample_rate)


@cache
def encoded(fmt: str, streaming: bool) -> Encoded:
    rate = default_sample_rate(fmt, None, native=22050)
    return encode_all(create_encoder(fmt, rate, streaming=streaming), sine_and_chirp(rate))


def decode(data: bytes, fmt: str, sample_rate: int) -> Decoded:
    raw_options = {"sample_rate": str(sample_rate), "ch_layout": "mono"}
    options = raw_options if fmt in ("pcm", "ulaw", "alaw") else {}
    with av.open(io.BytesIO(data), mode="r", format=_DEMUXERS[fmt], options=options) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        rate = stream.rate
    if not frames:
        return Decoded(np.zeros(0), None, rate)
    samples = np.concatenate(frames, axis=1)[0]
    if samples.dtype == np.int16:
        return Decoded(samples / 32768.0, samples, rate)
    return Decoded(samples.astype(np.float64), None, rate)


def playable_seconds(prefix: bytes, fmt: str, sample_rate: int) -> float:
    """How much audio a player gets from the bytes received so far (0 if it cannot open them yet)."""
    try:
        return len(decode(prefix, fmt, sample_rate).samples) / sample_rate
    except av.error.FFmpegError:
        return 0.0


def expected_int16(samples: Float32Array) -> npt.NDArray[np.int16]:
    return (np.clip(samples, -1, 1) * 32767.0).round().astype(np.int16)


def aligned_correlation(reference: Float32Array, decoded: npt.NDArray[np.float64], max_lag: int) -> float:
    """Pearson correlation after shifting ``decoded`` by the lag (0..max_lag) that matches best."""
    best = -1.0
    for lag in range(max_lag + 1):
        window = decoded[lag : lag + len(reference)]
        if len(window) < len(reference) * 0.9:
            break
        n = len(window)
        best = max(best, float(np.corrcoef(reference[:n], window)[0, 1]))
    return best


def allowed_extra_samples(fmt: str, streaming: bool, sample_rate: int) -> int:
    """How many samples longer than its input a decoded file may be (see the slack constants above)."""
    if fmt == "aac":
        return _AAC_FRAMES_OF_SLACK * 1024
    if fmt == "mp3" and streaming:
        return _MP3_FRAMES_OF_SLACK * (1152 if sample_rate >= 32000 else 576)
    if fmt == "mp3":
        return round(0.005 * sample_rate)  # the LAME tag trims to within a few samples
    return 0


BOTH_MODES = pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])


@BOTH_MODES
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_decoded_audio_has_the_encoders_sample_rate(fmt: str, streaming: bool) -> None:
    result = encoded(fmt, streaming)
    decoded = decode(result.data, fmt, result.sample_rate)
    # Opus always decodes at 48 kHz (RFC 7845 §5.1); its encoding rate is the default, 48 kHz, too.
    assert decoded.sample_rate == result.sample_rate


@BOTH_MODES
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_decoded_duration_matches_the_input_within_codec_priming(fmt: str, streaming: bool) -> None:
    result = encoded(fmt, streaming)
    decoded = decode(result.data, fmt, result.sample_rate)
    extra = len(decoded.samples) - len(result.samples)
    assert 0 <= extra <= allowed_extra_samples(fmt, streaming, result.sample_rate)


@BOTH_MODES
@pytest.mark.parametrize("fmt", LOSSLESS)
def test_lossless_formats_return_every_int16_sample_exactly(fmt: str, streaming: bool) -> None:
    result = encoded(fmt, streaming)
    decoded = decode(result.data, fmt, result.sample_rate)
    assert decoded.int16 is not None
    np.testing.assert_array_equal(decoded.int16, expected_int16(result.samples))


@BOTH_MODES
@pytest.mark.parametrize("fmt", LOSSY)
def test_lossy_formats_keep_the_waveform(fmt: str, streaming: bool) -> None:
    result = encoded(fmt, streaming)
    decoded = decode(result.data, fmt, result.sample_rate)
    max_lag = allowed_extra_samples(fmt, streaming, result.sample_rate) + 64
    assert aligned_correlation(result.samples, decoded.samples, max_lag) > 0.95


@BOTH_MODES
@pytest.mark.parametrize("fmt", G711)
def test_g711_formats_stay_within_companding_noise(fmt: str, streaming: bool) -> None:
    result = encoded(fmt, streaming)
    decoded = decode(result.data, fmt, result.sample_rate)
    reference = expected_int16(result.samples) / 32768.0
    noise = decoded.samples - reference
    snr_db = 10 * np.log10(np.sum(reference**2) / np.sum(noise**2))
    assert snr_db > 33  # G.711 gives ~35-39 dB on speech-level signals


@BOTH_MODES
@pytest.mark.parametrize("fmt", LOSSLESS)
def test_out_of_range_samples_are_clipped_not_wrapped(fmt: str, streaming: bool) -> None:
    loud = np.array([1.5, -1.5, 1.0, -1.0, 0.0] * 200, dtype=np.float32)
    encoder = create_encoder(fmt, 24000, streaming=streaming)
    data = encode_all(encoder, loud).data
    decoded = decode(data, fmt, 24000)
    assert decoded.int16 is not None
    assert list(decoded.int16[:5]) == [32767, -32767, 32767, -32767, 0]


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_streaming_encoders_hand_out_audio_before_finish(fmt: str) -> None:
    rate = default_sample_rate(fmt, None, native=24000)
    encoder = create_encoder(fmt, rate, streaming=True)
    signal = sine_and_chirp(rate, seconds=2.0)
    step = rate // 10
    sent = encoder.header()
    for start in range(0, len(signal), step):
        sent += encoder.encode(signal[start : start + step])
        fed_s = (start + step) / rate
        if fed_s >= 0.5:
            playable_s = playable_seconds(sent, fmt, rate)
            # What stays inside the encoder between calls: under a frame of input plus the codec's
            # lookahead, and for Ogg at most two 60 ms pages.
            assert playable_s >= fed_s - 0.25, f"only {playable_s:.3f} s playable after {fed_s:.3f} s"


@pytest.mark.parametrize("fmt", CONTAINED)
def test_non_streaming_encoders_return_the_whole_file_from_finish(fmt: str) -> None:
    result = encoded(fmt, False)
    assert result.before_finish == b""
    assert result.data


def test_streamed_wav_starts_with_one_header_of_unknown_size() -> None:
    result = encoded("wav", True)
    header, body = result.data[:44], result.data[44:]
    riff, riff_size, wave_id, fmt_id, _, pcm, channels, rate = struct.unpack("<4sI4s4sIHHI", header[:28])
    data_id, data_size = struct.unpack("<4sI", header[36:44])
    assert (riff, wave_id, fmt_id, data_id) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert riff_size == data_size == UNKNOWN_SIZE == 0xFFFFFFFF
    assert (pcm, channels, rate) == (1, 1, 24000)
    # Everything after the one header is sample data: no second header, no trailer.
    assert body == expected_int16(result.samples).astype("<i2").tobytes()
    assert result.data.count(b"RIFF") == 1


def test_whole_wav_header_carries_its_real_sizes() -> None:
    result = encoded("wav", False)
    riff_size = int.from_bytes(result.data[4:8], "little")
    data_size = int.from_bytes(result.data[40:44], "little")
    assert data_size == 2 * len(result.samples)
    assert riff_size == len(result.data) - 8
    with wave.open(io.BytesIO(result.data)) as reader:  # the stdlib reader trusts the header
        assert reader.getnframes() == len(result.samples)
    samples, rate = soundfile.read(io.BytesIO(result.data), dtype="int16")
    assert rate == 24000
    np.testing.assert_array_equal(samples, expected_int16(result.samples))


# The exact files the WAV and raw float encoders made before ``wav_f32le`` became ``WavEncoder`` with
# ``sample_format="f32le"`` (commit b2bafd9's ``Float32WavEncoder``): a refactor must not change a byte.
# (format, streaming) -> (header hex, sha256 of the whole file) for PINNED_SAMPLES at 22050 Hz in 333s.
PINNED_FILES = {
    ("wav", True): (
        "52494646ffffffff57415645666d742010000000010001002256000044ac00000200100064617461ffffffff",
        "e142e15419521a412506f35270fa2da667e80f02c402798ae4af3c03f01fc4a3",
    ),
    ("wav", False): (
        "52494646f607000057415645666d742010000000010001002256000044ac00000200100064617461d2070000",
        "be874887c9b2e22abdecfece9dd9d970796ecfde211246a7c10e6034b5d4e040",
    ),
    ("wav_f32le", True): (
        "52494646ffffffff57415645666d7420120000000300010022560000885801000400200000006661637404000000ffffffff"
        "64617461ffffffff",
        "8d081db1a96b63e796ade4a4e01eb163eca3f2c1ef07808373d27a2c139eaeb5",
    ),
    ("wav_f32le", False): (
        "52494646d60f000057415645666d7420120000000300010022560000885801000400200000006661637404000000e9030000"
        "64617461a40f0000",
        "b5ec20a9cbd94f3c187a797907c63a3062512a5421575bf37d7c81d75bb33b24",
    ),
    ("pcm_f32le", True): ("", "437d8380f3936df39d5b1f92ba025ed4918a3a454bd9bf9c4b4e501d9bfe3bb1"),
    ("pcm_f32le", False): ("", "437d8380f3936df39d5b1f92ba025ed4918a3a454bd9bf9c4b4e501d9bfe3bb1"),
}
# A ramp from -1.25 to 1.25 (so clipping is pinned too) built with exact arithmetic, the same on every CPU.
PINNED_SAMPLES = ((np.arange(1001) % 201 - 100) / 80).astype(np.float32)


@pytest.mark.parametrize(("fmt", "streaming"), list(PINNED_FILES), ids=lambda value: str(value))
def test_wav_and_float_pcm_files_are_byte_for_byte_the_pinned_ones(fmt: str, streaming: bool) -> None:
    encoder = create_encoder(fmt, 22050, streaming=streaming)
    parts = [encoder.header()]
    parts.extend(encoder.encode(PINNED_SAMPLES[start : start + 333]) for start in range(0, 1001, 333))
    data = b"".join(parts) + encoder.finish()
    header_hex, digest = PINNED_FILES[(fmt, streaming)]
    assert data[: len(header_hex) // 2].hex() == header_hex
    assert hashlib.sha256(data).hexdigest() == digest


def ogg_pages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(header_type, page bytes) for each Ogg page, checking that the pages tile ``data`` exactly."""
    offset = 0
    while offset < len(data):
        assert data[offset : offset + 4] == b"OggS", f"no page at byte {offset}"
        header_type, segments = data[offset + 5], data[offset + 26]
        body_size = sum(data[offset + 27 : offset + 27 + segments])
        end = offset + 27 + segments + body_size
        assert end <= len(data), "truncated page"
        yield header_type, data[offset:end]
        offset = end


@BOTH_MODES
def test_ogg_opus_ends_with_an_end_of_stream_page(streaming: bool) -> None:
    header_types = [header_type for header_type, _ in ogg_pages(encoded("opus", streaming).data)]
    assert header_types[0] & 0x02  # beginning of stream
    assert header_types[-1] & 0x04  # end of stream: the muxer was closed before the last bytes were taken
    assert not any(header_type & 0x04 for header_type in header_types[:-1])


def test_opus_head_records_the_rate_the_audio_was_encoded_at() -> None:
    encoder = create_encoder("opus", 16000, streaming=True)
    data = encode_all(encoder, sine_and_chirp(16000)).data
    _, first_page = next(ogg_pages(data))
    head = first_page[first_page.index(b"OpusHead") :]
    channels, pre_skip, input_rate = struct.unpack("<BHI", head[9:16])
    assert (channels, input_rate) == (1, 16000)
    assert pre_skip > 0  # decoders trim the encoder's lookahead with it
    # Decoded at 48 kHz, trimmed to exactly the input's length.
    assert len(decode(data, "opus", 16000).samples) == 3 * len(sine_and_chirp(16000))


def flac_total_samples(data: bytes) -> int:
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # the first metadata block is STREAMINFO
    streaminfo = data[8 : 8 + 34]
    return int.from_bytes(streaminfo[10:18], "big") & ((1 << 36) - 1)


def test_streamed_flac_says_its_length_is_unknown_and_whole_flac_states_it() -> None:
    streamed, whole = encoded("flac", True).data, encoded("flac", False).data
    # Streaming never seeks back into bytes the client already has, so STREAMINFO keeps 0 ("unknown")...
    assert flac_total_samples(streamed) == 0
    assert flac_total_samples(whole) == len(encoded("flac", False).samples)
    # ...and nothing the muxer meant to patch in place is appended instead: only STREAMINFO differs.
    assert len(streamed) == len(whole)
    differing = [i for i, (a, b) in enumerate(zip(streamed, whole, strict=True)) if a != b]
    assert differing and all(8 <= i < 8 + 34 for i in differing)


def test_streamed_mp3_is_bare_mpeg_frames_and_whole_mp3_adds_a_lame_tag_frame() -> None:
    streamed, whole = encoded("mp3", True).data, encoded("mp3", False).data
    assert streamed[:2] == b"\xff\xf3"  # MPEG-2 layer III frame sync at 24 kHz, no ID3 tag before it
    assert b"Xing" not in streamed and b"Info" not in streamed
    assert whole.endswith(streamed)
    assert b"Info" in whole[: len(whole) - len(streamed)]  # LAME's tag frame, for gapless trimming


def test_aac_is_a_stream_of_adts_frames() -> None:
    data = encoded("aac", True).data
    offset, frames = 0, 0
    while offset < len(data):
        assert data[offset] == 0xFF and data[offset + 1] & 0xF6 == 0xF0, f"no ADTS sync at byte {offset}"
        offset += ((data[offset + 3] & 0x03) << 11) | (data[offset + 4] << 3) | (data[offset + 5] >> 5)
        frames += 1
    assert offset == len(data)
    assert frames >= len(encoded("aac", True).samples) // 1024


@pytest.mark.parametrize("fmt", ["mp3", "aac", "opus"])
def test_every_rate_the_codec_supports_encodes_and_decodes(fmt: str) -> None:
    for requested in (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000):
        rate = default_sample_rate(fmt, requested, native=24000)
        signal = sine_and_chirp(rate, seconds=0.4)
        decoded = decode(encode_all(create_encoder(fmt, rate, streaming=True), signal).data, fmt, rate)
        decoded_rate = 48000 if fmt == "opus" else rate
        assert decoded.sample_rate == decoded_rate
        duration_s = len(decoded.samples) / decoded_rate
        assert 0.4 <= duration_s <= 0.4 + 0.3, f"{fmt} at {rate} Hz decoded to {duration_s:.3f} s"


@BOTH_MODES
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_an_encoder_finished_without_audio_still_makes_a_playable_file(fmt: str, streaming: bool) -> None:
    rate = default_sample_rate(fmt, None, native=24000)
    encoder = create_encoder(fmt, rate, streaming=streaming)
    data = encoder.header() + encoder.finish()
    if fmt in ("pcm", "ulaw", "alaw"):
        assert data == b""
        return
    decoded = decode(data, fmt, rate)
    assert len(decoded.samples) <= 1 + allowed_extra_samples(fmt, streaming, rate)
    assert np.abs(decoded.samples).max(initial=0.0) < 1e-3


@pytest.mark.parametrize("fmt", CONTAINED)
def test_an_encoder_refuses_audio_after_finish(fmt: str) -> None:
    encoder = create_encoder(fmt, default_sample_rate(fmt, None, native=24000), streaming=True)
    encoder.finish()
    with pytest.raises(RuntimeError):
        encoder.encode(np.zeros(100, dtype=np.float32))


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_each_encoder_states_its_format_content_type_and_rate(fmt: str) -> None:
    encoder = create_encoder(fmt, 16000, streaming=True)
    assert (encoder.format, encoder.content_type, encoder.sample_rate) == (fmt, CONTENT_TYPES[fmt], 16000)


def test_content_types_are_the_ones_openai_clients_expect() -> None:
    assert CONTENT_TYPES == {
        "wav": "audio/wav",
        "pcm": "audio/pcm",
        "flac": "audio/flac",
        "mp3": "audio/mpeg",
        "opus": "audio/ogg",
        "aac": "audio/aac",
        "ulaw": "audio/basic",
        "alaw": "audio/x-alaw-basic",
    }


def test_unknown_format_is_a_bad_request_that_lists_every_format() -> None:
    with pytest.raises(BadRequestError) as caught:
        create_encoder("ogg_vorbis", 24000, streaming=True)
    assert caught.value.status_code == 400
    assert caught.value.param == "response_format"
    assert all(fmt in caught.value.message for fmt in AUDIO_FORMATS)
    with pytest.raises(BadRequestError):
        default_sample_rate("ogg_vorbis", None, native=24000)


@pytest.mark.parametrize(
    ("fmt", "requested", "expected"),
    [
        ("pcm", None, 24000),
        ("wav", None, 24000),
        ("flac", None, 24000),
        ("aac", None, 24000),
        ("mp3", None, 24000),
        ("ulaw", None, 8000),
        ("alaw", None, 8000),
        ("opus", None, 48000),
        ("pcm", 16000, 16000),
        ("ulaw", 16000, 16000),
        ("wav", 22050, 22050),
        ("flac", 96000, 96000),
        ("mp3", 44100, 44100),
        ("mp3", 23500, 24000),  # nearest MPEG rate
        ("aac", 44100, 44100),
        ("opus", 44100, 48000),  # nearest Opus rate
        ("opus", 22050, 24000),
        ("opus", 20000, 24000),  # a tie goes to the higher rate
    ],
)
def test_default_sample_rate_follows_the_policy(fmt: str, requested: int | None, expected: int) -> None:
    assert default_sample_rate(fmt, requested, native=22050) == expected


@pytest.mark.parametrize("requested", [0, 4000, 384000])
def test_a_sample_rate_outside_8_to_192_khz_is_a_bad_request(requested: int) -> None:
    with pytest.raises(BadRequestError, match="sample_rate"):
        default_sample_rate("wav", requested, native=24000)


def test_create_encoder_refuses_a_rate_the_codec_cannot_encode() -> None:
    with pytest.raises(BadRequestError, match="44100"):
        create_encoder("opus", 44100, streaming=True)
