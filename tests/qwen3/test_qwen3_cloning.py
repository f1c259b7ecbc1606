"""Voice cloning end to end: a clip in any format → decoded → cached clone prompt → streamed audio."""

from __future__ import annotations

import base64
import io
from typing import Any

import av
import numpy as np
import pytest
from oracle.package import synthesize_full
from qwen3_testing import noise_clip, steer_eos

from speakwire.audio.decode import decode_reference_audio, parse_audio_reference
from speakwire.engines.base import SynthesisRequest
from speakwire.errors import BadRequestError

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test."


def encoded_clip(container: str, codec: str, *, seconds: float = 2.0, rate: int = 44_100) -> bytes:
    """A tone-plus-noise clip encoded with PyAV, as a client's recorder would send it."""
    rng = np.random.default_rng(3)
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream)
        frame = av.AudioFrame.from_ndarray(wave[None, :], format="fltp", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


def clone(engine: Any, ref_audio: Any, *, frames: int = 8, **fields: Any) -> tuple[np.ndarray, SynthesisRequest]:
    # Validated and prepared as the pipeline does: the frozen request comes back with its clone prompt.
    asked = SynthesisRequest(ref_audio=ref_audio, seed=5, **{"ref_text": "Hi there!", **fields})
    request = engine.prepare(engine.validate(asked))
    with steer_eos(engine, after=frames):
        audio = np.concatenate([c.samples for c in engine.synthesize(TEXT, request)])
    return audio, request


@pytest.mark.parametrize(("container", "codec"), [("wav", "pcm_s16le"), ("mp3", "libmp3lame")])
def test_a_voice_is_cloned_from_an_encoded_file(base_engine: Any, container: str, codec: str) -> None:
    reference = decode_reference_audio(encoded_clip(container, codec))
    audio, request = clone(base_engine, reference)
    assert len(audio) == 8 * 1920 and float(np.abs(audio).max()) > 0.01
    prompt = request.extra["voice_clone_prompt"]
    assert prompt.icl_mode and prompt.ref_code.shape == (25, 16)  # 2 s at 12.5 frames/s


def test_a_voice_is_cloned_from_a_data_uri(base_engine: Any) -> None:
    uri = "data:audio/mpeg;base64," + base64.b64encode(encoded_clip("mp3", "libmp3lame")).decode()
    audio, _ = clone(base_engine, decode_reference_audio(parse_audio_reference(uri)))
    assert len(audio) == 8 * 1920


def test_undecodable_reference_audio_is_a_bad_request() -> None:
    uri = "data:audio/wav;base64," + base64.b64encode(b"definitely not a wav file" * 10).decode()
    with pytest.raises(BadRequestError, match="could not be decoded as audio"):
        decode_reference_audio(parse_audio_reference(uri))


def test_the_same_reference_is_encoded_once_and_then_served_from_the_cache(
    base_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tts = base_engine.tts_model
    encoder = tts.create_voice_clone_prompt
    encodes: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        encodes.append(kwargs.get("ref_text"))
        return encoder(*args, **kwargs)

    monkeypatch.setattr(tts, "create_voice_clone_prompt", counting)
    reference = noise_clip(1.5, seed=42)
    hits, misses = base_engine.prompt_cache.hits, base_engine.prompt_cache.misses

    first = base_engine.prepare(base_engine.validate(SynthesisRequest(ref_audio=reference, ref_text="Hi there!")))
    again = SynthesisRequest(ref_audio=noise_clip(1.5, seed=42), ref_text="Hi there!")  # equal samples, new array
    second = base_engine.prepare(base_engine.validate(again))

    assert encodes == ["Hi there!"]
    assert (base_engine.prompt_cache.hits - hits, base_engine.prompt_cache.misses - misses) == (1, 1)
    assert second.extra["voice_clone_prompt"] is first.extra["voice_clone_prompt"]

    other = SynthesisRequest(ref_audio=reference, ref_text="Another transcript.")
    base_engine.prepare(base_engine.validate(other))
    assert encodes == ["Hi there!", "Another transcript."]


def test_cloning_with_a_cached_prompt_sounds_the_same_as_with_a_fresh_one(base_engine: Any) -> None:
    fresh, _ = clone(base_engine, noise_clip(1.5, seed=9))
    cached, _ = clone(base_engine, noise_clip(1.5, seed=9))
    assert np.array_equal(fresh, cached)


def test_x_vector_only_cloning_needs_no_transcript_and_has_no_reference_codes(base_engine: Any) -> None:
    audio, request = clone(base_engine, noise_clip(2.0), ref_text=None, x_vector_only_mode=True)
    prompt = request.extra["voice_clone_prompt"]
    assert prompt.ref_code is None and not prompt.icl_mode
    assert len(audio) == 8 * 1920


def test_x_vector_only_streaming_equals_the_packages_output(base_engine: Any) -> None:
    def request() -> SynthesisRequest:
        return SynthesisRequest(ref_audio=noise_clip(2.0), x_vector_only_mode=True, seed=11)

    with steer_eos(base_engine, after=30):
        streamed = np.concatenate([c.samples for c in base_engine.synthesize(TEXT, request())])
        full = synthesize_full(base_engine, TEXT, request()).samples
    np.testing.assert_allclose(streamed, full, rtol=0, atol=1e-5)


def test_reference_audio_at_another_rate_is_resampled_before_encoding(base_engine: Any) -> None:
    from speakwire.audio.chunk import AudioChunk

    clip16k = AudioChunk(np.zeros(32_000, dtype=np.float32) + 0.01, 16_000)
    _, request = clone(base_engine, clip16k)
    assert request.extra["voice_clone_prompt"].ref_code.shape[0] == 25  # 2 s → 25 frames at 12.5 Hz
