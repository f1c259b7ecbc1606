"""Reference audio decoding: any common format in, 24 kHz mono float32 out, clear errors otherwise.

Needs only the base dependencies (PyAV, soxr, numpy): no torch.
"""

from __future__ import annotations

import base64
import http.server
import io
import threading
from collections.abc import Iterator

import av
import numpy as np
import pytest

from speakwire.audio.decode import decode_reference_audio, parse_audio_reference
from speakwire.errors import BadRequestError, PayloadTooLargeError


def tone(seconds: float, rate: int, *, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.5 * np.sin(2 * np.pi * freq * t)
    return np.stack([wave] * channels).astype(np.float32)


def encode(planes: np.ndarray, rate: int, container: str, codec: str) -> bytes:
    """Encode (channels, samples) float32 with PyAV, as a client's recorder would."""
    layout = "mono" if planes.shape[0] == 1 else "stereo"
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        assert isinstance(stream, av.AudioStream)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(planes), format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize(
    ("container", "codec", "rate"),
    [
        ("wav", "pcm_s16le", 16_000),
        ("flac", "flac", 44_100),
        ("mp3", "libmp3lame", 44_100),
        ("ogg", "libopus", 48_000),
        ("ipod", "aac", 44_100),  # .m4a
        ("webm", "libopus", 48_000),
    ],
)
def test_every_common_format_decodes_to_24k_mono_with_the_same_pitch(container: str, codec: str, rate: int) -> None:
    data = encode(tone(2.0, rate, channels=2), rate, container, codec)

    chunk = decode_reference_audio(data)

    assert chunk.sample_rate == 24_000
    assert chunk.samples.dtype == np.float32 and chunk.samples.ndim == 1
    assert chunk.duration_s == pytest.approx(2.0, abs=0.06)  # AAC adds ~1024 samples of priming
    assert dominant_hz(chunk.samples, 24_000) == pytest.approx(440.0, abs=2.0)


def test_stereo_is_downmixed_to_the_channel_mean() -> None:
    planes = tone(1.5, 24_000, channels=2)
    planes[1] = 0.0  # right channel silent: the mean halves the amplitude
    chunk = decode_reference_audio(encode(planes, 24_000, "wav", "pcm_s16le"))
    assert float(np.abs(chunk.samples).max()) == pytest.approx(0.25, abs=1e-3)


def test_data_that_is_not_audio_is_a_bad_request_naming_the_formats() -> None:
    with pytest.raises(BadRequestError, match=r"could not be decoded as audio; send WAV, FLAC, MP3") as info:
        decode_reference_audio(b"this is certainly not an audio file" * 20)
    assert info.value.param == "ref_audio"


def test_empty_data_is_a_bad_request() -> None:
    with pytest.raises(BadRequestError, match="ref_audio is empty"):
        decode_reference_audio(b"")


def test_a_clip_shorter_than_one_second_is_refused_with_the_allowed_range() -> None:
    data = encode(tone(0.5, 24_000), 24_000, "wav", "pcm_s16le")
    with pytest.raises(BadRequestError, match=r"0\.50 s long; it must be between 1 and 30 s"):
        decode_reference_audio(data)


def test_a_clip_longer_than_thirty_seconds_is_refused() -> None:
    data = encode(tone(31.5, 8_000), 8_000, "flac", "flac")
    with pytest.raises(BadRequestError, match=r"it must be between 1 and 30 s"):
        decode_reference_audio(data)


def test_duration_limits_are_arguments() -> None:
    data = encode(tone(2.0, 24_000), 24_000, "wav", "pcm_s16le")
    with pytest.raises(BadRequestError, match=r"between 3 and 30 s"):
        decode_reference_audio(data, min_s=3.0)


WAV = encode(tone(1.2, 24_000), 24_000, "wav", "pcm_s16le")


def test_a_data_uri_gives_back_the_original_bytes() -> None:
    uri = "data:audio/wav;base64," + base64.b64encode(WAV).decode()
    assert parse_audio_reference(uri) == WAV


def test_a_browser_data_uri_with_codec_parameters_is_accepted() -> None:
    uri = "data:audio/webm;codecs=opus;base64," + base64.b64encode(WAV).decode()
    assert parse_audio_reference(uri) == WAV


def test_plain_base64_with_line_breaks_and_no_padding_is_accepted() -> None:
    text = base64.encodebytes(WAV).decode().rstrip("=\n")
    assert parse_audio_reference(text) == WAV


def test_a_data_uri_that_is_not_base64_is_refused_with_an_example() -> None:
    with pytest.raises(BadRequestError, match=r"must be base64-encoded, e\.g\. data:audio/wav;base64,"):
        parse_audio_reference("data:audio/wav,RIFF....")


def test_a_data_uri_with_a_non_audio_media_type_is_refused() -> None:
    with pytest.raises(BadRequestError, match=r"media type 'image/png'; use an audio/\* type"):
        parse_audio_reference("data:image/png;base64," + base64.b64encode(b"x").decode())


def test_an_http_url_is_refused_by_default_naming_the_server_flag() -> None:
    with pytest.raises(BadRequestError, match=r"--allow-remote-ref-audio") as info:
        parse_audio_reference("https://example.com/voice.wav")
    assert "data URI" in info.value.message


def test_a_file_url_is_refused_even_when_remote_fetching_is_allowed() -> None:
    with pytest.raises(BadRequestError, match=r"file:// reference is not accepted"):
        parse_audio_reference("file:///etc/passwd", allow_remote=True)


def test_text_that_is_neither_uri_nor_base64_is_refused() -> None:
    with pytest.raises(BadRequestError, match=r"neither a data URI .* nor valid base64"):
        parse_audio_reference("hello, this is not base64!")


def test_an_oversized_payload_is_payload_too_large() -> None:
    with pytest.raises(PayloadTooLargeError, match=r"limit is 0 MiB"):
        parse_audio_reference(base64.b64encode(WAV).decode(), max_bytes=1000)


@pytest.fixture
def local_server() -> Iterator[str]:
    """A loopback HTTP server serving WAV at /voice.wav and 404 elsewhere."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/voice.wav":
                self.send_response(200)
                self.send_header("Content-Length", str(len(WAV)))
                self.end_headers()
                self.wfile.write(WAV)
            else:
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_http_url_is_fetched_when_the_server_allows_it(local_server: str) -> None:
    assert parse_audio_reference(f"{local_server}/voice.wav", allow_remote=True) == WAV


def test_a_failing_url_is_a_bad_request_with_the_status(local_server: str) -> None:
    with pytest.raises(BadRequestError, match=r"returned HTTP 404"):
        parse_audio_reference(f"{local_server}/missing.wav", allow_remote=True)
