"""PocketSphinx times every word of real Piper speech near Piper's own exact timings, and gives none for noise."""

from __future__ import annotations

import numpy as np
import pytest

from speakwire.audio.chunk import Float32Array
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.engines.piper import PiperEngine
from speakwire.text.alignment import SegmentWords, WordTiming, word_spans
from speakwire.text.normalize import normalize_english

pytest.importorskip("pocketsphinx")

from speakwire.aligners.base import Aligner
from speakwire.aligners.pocketsphinx import PocketSphinxAligner, dictionary_words

TEXT = "Thanks for calling, Zorvexa. Your order of $25 shipped on March 3, and it should arrive by Thursday!"
MADE_UP = "Zorvexa."


def speak(engine: PiperEngine, text: str) -> tuple[Float32Array, int, list[WordTiming]]:
    """Piper's audio for ``text`` and its exact word timings (as the pipeline normalizes and maps them)."""
    normalized = normalize_english(text)
    request = engine.validate(SynthesisRequest(seed=1))
    chunks = list(engine.synthesize(normalized, request, SynthesisRun(latency_critical=False)))
    rate = chunks[0].sample_rate
    words = SegmentWords(text, normalized, offset=0, rate=rate, start_s=0.0)
    exact = words.add([mark for chunk in chunks for mark in chunk.marks]) + words.finish()
    return np.concatenate([chunk.samples for chunk in chunks]), rate, exact


@pytest.fixture(scope="module")
def aligner() -> PocketSphinxAligner:
    return PocketSphinxAligner.load()


@pytest.fixture(scope="module")
def spoken(piper_engine: PiperEngine) -> tuple[Float32Array, int, list[WordTiming]]:
    return speak(piper_engine, TEXT)


def test_the_pocketsphinx_aligner_is_an_aligner(aligner: PocketSphinxAligner) -> None:
    assert isinstance(aligner, Aligner)
    assert aligner.name == "pocketsphinx" and "english" in aligner.languages


def test_every_word_of_the_text_is_timed_in_order_inside_the_audio(
    aligner: PocketSphinxAligner, spoken: tuple[Float32Array, int, list[WordTiming]]
) -> None:
    audio, rate, _ = spoken
    timings = aligner.align(audio, rate, TEXT)
    assert [(t.char_start, t.char_end) for t in timings] == word_spans(TEXT)
    assert all(t.text == TEXT[t.char_start : t.char_end] for t in timings)
    duration = len(audio) / rate
    previous_end = 0.0
    for timing in timings:
        assert previous_end <= timing.start_s <= timing.end_s <= duration
        previous_end = timing.end_s


def test_a_made_up_name_is_timed_on_its_own_audio_not_dropped(
    aligner: PocketSphinxAligner, spoken: tuple[Float32Array, int, list[WordTiming]]
) -> None:
    audio, rate, exact = spoken
    assert "zorvexa" in [word.token for word in dictionary_words(normalize_english(TEXT))]
    name = next(t for t in aligner.align(audio, rate, TEXT) if t.text == MADE_UP)
    truth = next(t for t in exact if t.text == MADE_UP)
    assert name.end_s - name.start_s > 0.3  # the name's own ~0.6 s, not a sliver between its neighbours
    assert abs(name.start_s - truth.start_s) < 0.1 and abs(name.end_s - truth.end_s) < 0.1


def test_word_starts_are_near_pipers_exact_ones(
    aligner: PocketSphinxAligner, spoken: tuple[Float32Array, int, list[WordTiming]]
) -> None:
    audio, rate, exact = spoken
    timings = aligner.align(audio, rate, TEXT)
    errors = [abs(got.start_s - truth.start_s) for got, truth in zip(timings, exact, strict=True)]
    # Generous: the tight figures are bench.aligner_accuracy's (over 539 words: mean 47 ms, p95 86 ms).
    assert sum(errors) / len(errors) < 0.08
    assert max(errors) < 0.25


def test_audio_at_another_rate_gives_the_same_times(
    aligner: PocketSphinxAligner, spoken: tuple[Float32Array, int, list[WordTiming]]
) -> None:
    import soxr

    audio, rate, _ = spoken
    at_48k = soxr.resample(audio, rate, 48_000).astype(np.float32)
    here, there = aligner.align(audio, rate, TEXT), aligner.align(at_48k, 48_000, TEXT)
    assert len(here) == len(there)
    assert all(abs(a.start_s - b.start_s) <= 0.02 for a, b in zip(here, there, strict=True))


@pytest.mark.parametrize(
    "audio",
    [
        np.zeros(0, dtype=np.float32),
        np.zeros(22_050 * 2, dtype=np.float32),
        np.random.default_rng(0).normal(0, 0.01, 22_050 * 3).astype(np.float32),
        np.random.default_rng(1).normal(0, 0.3, 22_050 * 3).astype(np.float32),
    ],
    ids=["empty", "silence", "quiet-noise", "loud-noise"],
)
def test_audio_that_says_nothing_gets_no_timings_and_no_exception(
    aligner: PocketSphinxAligner, audio: Float32Array
) -> None:
    assert aligner.align(audio, 22_050, TEXT) == []


def test_text_with_nothing_to_say_gets_no_timings(
    aligner: PocketSphinxAligner, spoken: tuple[Float32Array, int, list[WordTiming]]
) -> None:
    audio, rate, _ = spoken
    assert aligner.align(audio, rate, "— …") == []


def test_stereo_samples_are_refused(aligner: PocketSphinxAligner) -> None:
    with pytest.raises(ValueError, match="mono"):
        aligner.align(np.zeros((100, 2), dtype=np.float32), 16_000, TEXT)
