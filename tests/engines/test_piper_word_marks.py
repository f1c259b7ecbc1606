"""Word marks from the real joe voice: the duration predictor times every word, on either synthesis path."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import onnx
import pytest

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.engines.piper import PiperEngine, PiperOptions, embedded_voice_paths
from speakwire.text.alignment import WordMark, word_spans
from speakwire.text.normalize import normalize_english

TEXT = normalize_english("Thanks for calling. Your order of $25 shipped, and it should arrive on Thursday! Hello — 😀")


def synthesize(engine: PiperEngine, text: str, *, stream: bool) -> list[AudioChunk]:
    request = engine.validate(SynthesisRequest(seed=1))  # noise-free: both paths draw the same durations
    # The first sentence streams in windows only when a listener waits.
    return list(engine.synthesize(text, request, SynthesisRun(latency_critical=stream)))


def marks_of(chunks: list[AudioChunk]) -> list[WordMark]:
    return [mark for chunk in chunks for mark in chunk.marks]


@pytest.fixture(scope="module")
def whole_engine() -> PiperEngine:
    return PiperEngine.load(options=PiperOptions(stream_frames=False))


def test_every_word_of_the_text_is_marked_in_order_within_the_audio(piper_engine: PiperEngine) -> None:
    chunks = synthesize(piper_engine, TEXT, stream=False)
    marks = marks_of(chunks)
    assert [(m.char_start, m.char_end) for m in marks] == word_spans(TEXT)
    total = sum(len(chunk.samples) for chunk in chunks)
    for previous, mark in zip([None, *marks], marks, strict=False):
        assert 0 <= mark.start <= mark.end <= total
        assert mark.start < total  # a word starts inside the audio, so some chunk holds it
        if previous is not None:
            assert previous.end <= mark.start
    spoken = [m for m in marks if any(ch.isalnum() for ch in TEXT[m.char_start : m.char_end])]
    assert all(m.end > m.start for m in spoken)


def test_streamed_windows_mark_the_same_words_as_whole_sentences(piper_engine: PiperEngine) -> None:
    streamed, whole = synthesize(piper_engine, TEXT, stream=True), synthesize(piper_engine, TEXT, stream=False)
    assert len(streamed) > len(whole)  # the first sentence really came in windows
    assert marks_of(streamed) == marks_of(whole)


def test_the_whole_graph_alone_marks_the_same_words(piper_engine: PiperEngine, whole_engine: PiperEngine) -> None:
    assert not whole_engine.info.extra["frame_streaming"] and whole_engine.info.extra["word_timings"]
    whole_graph, split = synthesize(whole_engine, TEXT, stream=True), synthesize(piper_engine, TEXT, stream=True)
    assert marks_of(whole_graph) == marks_of(split)


def test_marks_ride_on_the_first_chunk_of_each_sentence_before_its_audio(piper_engine: PiperEngine) -> None:
    chunks = synthesize(piper_engine, TEXT, stream=True)
    at = 0
    for chunk in chunks:
        for mark in chunk.marks:
            assert mark.start >= at  # never a word whose audio was already handed over
        at += len(chunk.samples)
    assert sum(1 for chunk in chunks if chunk.marks) == 3  # espeak's three sentences


def test_speed_scales_the_marks_with_the_audio(piper_engine: PiperEngine) -> None:
    request = piper_engine.validate(SynthesisRequest(seed=1, speed=2.0))
    fast = list(piper_engine.synthesize("One two three four.", request, SynthesisRun(latency_critical=False)))
    normal = synthesize(piper_engine, "One two three four.", stream=False)
    assert marks_of(fast)[-1].end < 0.7 * marks_of(normal)[-1].end


def test_a_voice_without_durations_synthesizes_without_marks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import speakwire.engines.piper_split as piper_split

    monkeypatch.setattr(piper_split, "find_durations", lambda nodes, latent=None: None)
    with caplog.at_level(logging.WARNING, logger="speakwire.engines.piper"):
        engine = PiperEngine.load(options=PiperOptions(stream_frames=False))
    assert sum("no word timings" in record.getMessage() for record in caplog.records) == 1
    assert engine.info.extra["word_timings"] is False
    chunks = synthesize(engine, "Still speaks.", stream=False)
    assert chunks and not marks_of(chunks)


def test_a_voice_patched_with_pipers_alignment_output_loads_and_marks_the_same(
    tmp_path: Path, piper_engine: PiperEngine
) -> None:
    from piper.patch_voice_with_alignment import add_alignment_output

    model_path, config_path = embedded_voice_paths()
    model = onnx.load(str(model_path))
    add_alignment_output(model)
    patched = tmp_path / "patched.onnx"
    onnx.save(model, str(patched))
    shutil.copy(config_path, f"{patched}.json")
    engine = PiperEngine.load(patched, options=PiperOptions(stream_frames=False))
    assert marks_of(synthesize(engine, TEXT, stream=False)) == marks_of(synthesize(piper_engine, TEXT, stream=False))


LONG = normalize_english(
    "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above them, and the old "
    "keeper of the lighthouse watched the weather turn slowly from grey to gold as the evening came in. Then dark."
)


def test_bounded_windows_mark_the_same_words_as_the_whole_graph(
    piper_engine: PiperEngine, whole_engine: PiperEngine
) -> None:
    bounded, whole = synthesize(piper_engine, LONG, stream=False), synthesize(whole_engine, LONG, stream=False)
    assert len(bounded) > len(whole) == 2  # the long sentence really came in several windows
    assert marks_of(bounded) == marks_of(whole)
    assert [(m.char_start, m.char_end) for m in marks_of(bounded)] == word_spans(LONG)
    assert sum(len(chunk.samples) for chunk in bounded) == sum(len(chunk.samples) for chunk in whole)
