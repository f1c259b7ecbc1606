"""The page's speech as ADTS AAC: one encoder per text, seamless joins, true durations, no ffmpeg."""

from __future__ import annotations

import io
from pathlib import Path
from types import ModuleType

import av
import numpy as np
import pytest

from speakwire.ui.app import import_gradio
from speakwire.ui.stream import AAC_FRAME_SAMPLES, AdtsStream, adts_duration


def tone(seconds: float, rate: int) -> bytes:
    """A 220 Hz tone with a slow swell, as 16-bit PCM: enough structure that a gap or a click changes the code."""
    t = np.arange(int(seconds * rate)) / rate
    samples = 0.4 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.7 * t))
    return (samples * 32767).round().astype("<i2").tobytes()


def encode_in_chunks(pcm: bytes, rate: int, chunk_bytes: int) -> list[bytes]:
    stream = AdtsStream(rate)
    segments = [stream.encode(pcm[i : i + chunk_bytes]) for i in range(0, len(pcm), chunk_bytes)]
    return [*segments, stream.finish()]


def decoded_samples(adts: bytes) -> tuple[int, int]:
    with av.open(io.BytesIO(adts)) as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)), stream.rate


def test_chunked_speech_encodes_to_the_same_bytes_as_the_whole_text_at_once() -> None:
    pcm = tone(2.0, 24_000)
    whole = b"".join(encode_in_chunks(pcm, 24_000, len(pcm)))
    # Chunks of 0.1 s and of an odd 1,234 samples: no join shows in the stream.
    assert b"".join(encode_in_chunks(pcm, 24_000, 4_800)) == whole
    assert b"".join(encode_in_chunks(pcm, 24_000, 2_468)) == whole


def test_each_segment_is_whole_frames_and_its_duration_is_theirs() -> None:
    pcm = tone(2.0, 24_000)
    segments = encode_in_chunks(pcm, 24_000, 12_000)  # 0.25 s chunks
    for segment in segments:
        samples, rate = decoded_samples(segment) if segment else (0, 24_000)
        assert adts_duration(segment) == pytest.approx(samples / rate)
    total = sum(adts_duration(segment) for segment in segments)
    assert total == pytest.approx(decoded_samples(b"".join(segments))[0] / 24_000)
    # The speech plus the encoder's priming and last partial frame: at most two frames more.
    assert 2.0 <= total <= 2.0 + 2 * AAC_FRAME_SAMPLES / 24_000


def test_a_rate_adts_cannot_name_is_resampled_to_the_nearest_one() -> None:
    stream = AdtsStream(11_000)
    assert stream.output_rate == 11_025
    adts = stream.encode(tone(1.0, 11_000)) + stream.finish()
    samples, rate = decoded_samples(adts)
    assert rate == 11_025
    assert 1.0 <= samples / rate <= 1.0 + 2 * AAC_FRAME_SAMPLES / 11_025


def test_bytes_that_are_not_adts_frames_are_refused() -> None:
    with pytest.raises(ValueError, match="not an ADTS frame at byte 0"):
        adts_duration(b"RIFF\x00\x00\x00\x00WAVE")
    whole = b"".join(encode_in_chunks(tone(0.5, 24_000), 24_000, 24_000))
    with pytest.raises(ValueError, match="broken ADTS frame"):
        adts_duration(whole[:-1])
    assert adts_duration(b"") == 0.0


@pytest.fixture
def gradio() -> ModuleType:
    pytest.importorskip("gradio", reason="the [ui] extra (gradio) is not installed")
    return import_gradio()


async def test_the_player_streams_the_segments_as_given_and_downloads_them_as_one_aac_file(
    gradio: ModuleType, no_ffmpeg: Path
) -> None:
    from speakwire.ui.player import speech_player

    player = speech_player()
    stream_id = "session/1/2/playlist.m3u8"
    segments = [s for s in encode_in_chunks(tone(1.0, 24_000), 24_000, 9_600) if s]
    chunks = [(await player.stream_output(s, stream_id, i == 0))[0] for i, s in enumerate(segments)]
    assert [c and c["data"] for c in chunks] == segments
    assert [c and c["duration"] for c in chunks] == [adts_duration(s) for s in segments]
    assert {c and c["extension"] for c in chunks} == {".aac"}
    end, output_file = await player.stream_output(None, stream_id, False)
    assert end is None
    assert output_file["orig_name"] == "speech.aac"

    download = await player.combine_stream(segments, desired_output_format="aac")
    assert Path(download.path).name == "speech.aac"
    assert Path(download.path).read_bytes() == b"".join(segments)  # noqa: ASYNC240 (a test reading its own file)
    with pytest.raises(TypeError, match=r"streams ADTS segments \(bytes\), not tuple"):
        await player.stream_output((24_000, np.zeros(10)), stream_id, True)
