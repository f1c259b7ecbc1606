"""Frame-space streaming of the real joe voice: windows of frames that join to the whole sentence."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import onnx
import onnx.helper
import onnxruntime
import pytest
from piper import SynthesisConfig

from speakwire.audio.chunk import Float32Array
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.engines.piper import PiperEngine, PiperOptions, _frontend_feed, embedded_voice_paths
from speakwire.engines.piper_split import GraphSplitError, SplitVoice, split_voice
from speakwire.engines.piper_stream import FrameSchedule, FrameStreamer

SENTENCE = "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above them."
LONG_SENTENCE = (
    "Outside the windows, fishing boats rocked gently in the harbor while gulls circled above them, and the "
    "old keeper of the lighthouse watched the weather turn slowly from grey to gold as the evening came in."
)
PARAGRAPH = (
    "The library opens early on weekdays. By nine the reading room is full, and the quiet is the kind "
    "that makes every turned page sound loud! Who could work anywhere else?"
)
HOP = 256
EXACT = 1e-3


@pytest.fixture(scope="module")
def whole_engine() -> PiperEngine:
    return PiperEngine.load(options=PiperOptions(stream_frames=False))


@pytest.fixture(scope="module")
def joe_split() -> SplitVoice:
    return split_voice(onnx.load(str(embedded_voice_paths()[0])))


@pytest.fixture(scope="module")
def streamer(joe_split: SplitVoice) -> FrameStreamer:
    return FrameStreamer(joe_split, onnxruntime.SessionOptions(), FrameSchedule())


def chunks(engine: PiperEngine, text: str, **request: object) -> list[Float32Array]:
    validated = engine.validate(SynthesisRequest(**request))  # type: ignore[arg-type]
    return [chunk.samples for chunk in engine.synthesize(text, validated)]


def feed_for(engine: PiperEngine, text: str, *, noise: bool) -> dict[str, np.ndarray]:
    voice = engine._voice  # the engine's phonemizer, so the ids are exactly what synthesize() feeds
    (phonemes,) = voice.phonemize(text)
    config = SynthesisConfig() if noise else SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    return _frontend_feed(voice, voice.phonemes_to_ids(phonemes), config)


# ----- the engine -----------------------------------------------------------------------------------


def test_engine_streams_frames_by_default(piper_engine: PiperEngine) -> None:
    assert piper_engine.info.extra["frame_streaming"] is True


@pytest.mark.parametrize("speed", [1.0, 1.4])
def test_seeded_streamed_sentences_equal_whole_sentences(
    piper_engine: PiperEngine, whole_engine: PiperEngine, speed: float
) -> None:
    streamed = np.concatenate(chunks(piper_engine, PARAGRAPH, seed=7, speed=speed))
    whole = np.concatenate(chunks(whole_engine, PARAGRAPH, seed=7, speed=speed))
    assert streamed.shape == whole.shape
    assert np.max(np.abs(streamed - whole)) < EXACT


def test_streamed_audio_has_the_whole_sentence_length(piper_engine: PiperEngine, whole_engine: PiperEngine) -> None:
    streamed = chunks(piper_engine, SENTENCE, seed=1)
    (whole,) = chunks(whole_engine, SENTENCE, seed=1)
    assert sum(len(samples) for samples in streamed) == len(whole)


def test_first_chunk_is_one_small_window(piper_engine: PiperEngine) -> None:
    first = next(iter(chunks(piper_engine, SENTENCE)))
    assert len(first) == FrameSchedule().sizes[0] * HOP  # 24 frames, ~0.28 s of a ~5 s sentence


def test_chunks_grow_by_the_schedule_then_repeat_its_last_size(piper_engine: PiperEngine) -> None:
    pieces = chunks(piper_engine, LONG_SENTENCE, seed=1)  # one espeak sentence, ~11 s
    assert all(len(samples) % HOP == 0 for samples in pieces)
    frames = [len(samples) // HOP for samples in pieces]
    assert frames[:6] == [24, 48, 96, 192, 256, 256]
    assert frames == [stop - start for start, stop in FrameSchedule().windows(sum(frames))]


def test_cancel_between_windows_stops_the_sentence(piper_engine: PiperEngine) -> None:
    request = piper_engine.validate(SynthesisRequest())
    run = SynthesisRun()
    stream: Iterator[object] = piper_engine.synthesize(SENTENCE + " " + SENTENCE, request, run)
    next(stream)
    run.cancelled.set()
    assert list(stream) == []


def test_disabled_streaming_yields_one_chunk_per_sentence(whole_engine: PiperEngine) -> None:
    assert whole_engine.info.extra["frame_streaming"] is False
    assert len(chunks(whole_engine, PARAGRAPH, seed=1)) == 3  # espeak sentences, one ONNX call each


def test_voice_whose_windows_miss_context_falls_back_to_whole_sentences(
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_context = PiperOptions(frame_schedule=FrameSchedule(left=0, right=0))
    with caplog.at_level(logging.WARNING, logger="speakwire.engines.piper"):
        engine = PiperEngine.load(options=no_context)
    assert engine.info.extra["frame_streaming"] is False
    assert "synthesizing whole sentences" in caplog.text
    assert len(chunks(engine, SENTENCE)) == 1


def test_every_session_uses_the_configured_threads() -> None:
    engine = PiperEngine.load(options=PiperOptions(intra_op_threads=2, inter_op_threads=1))
    streamer = engine._streamer
    assert streamer is not None
    sessions = [engine._voice.session, streamer._frontend, streamer._decoder]
    assert [session.get_session_options().intra_op_num_threads for session in sessions] == [2, 2, 2]


def later(engine: PiperEngine, text: str, **request: object) -> list[Float32Array]:
    """Chunks of ``text`` spoken as a later segment (no listener waiting): the bounded-memory path."""
    validated = engine.validate(SynthesisRequest(**request))  # type: ignore[arg-type]
    return [chunk.samples for chunk in engine.synthesize(text, validated, SynthesisRun(latency_critical=False))]


def test_later_sentences_decode_in_windows_of_at_most_window_frames(piper_engine: PiperEngine) -> None:
    window = PiperOptions().window_frames
    pieces = later(piper_engine, LONG_SENTENCE, seed=1)  # one espeak sentence, ~11 s: several windows
    frames = [len(samples) // HOP for samples in pieces]
    assert len(frames) > 1 and all(len(samples) % HOP == 0 for samples in pieces)
    assert frames == [stop - start for start, stop in FrameSchedule(sizes=(window,)).windows(sum(frames))]


@pytest.mark.parametrize("text", [LONG_SENTENCE, PARAGRAPH])
def test_bounded_windows_join_to_the_whole_sentences(
    piper_engine: PiperEngine, whole_engine: PiperEngine, text: str
) -> None:
    bounded = np.concatenate(later(piper_engine, text, seed=3))
    whole = np.concatenate(later(whole_engine, text, seed=3))
    assert bounded.shape == whole.shape
    assert np.max(np.abs(bounded - whole)) < EXACT


def test_window_frames_zero_decodes_each_later_sentence_in_one_call() -> None:
    engine = PiperEngine.load(options=PiperOptions(window_frames=0))
    assert engine.info.extra["frame_streaming"] is True  # the first sentence still streams
    assert len(later(engine, LONG_SENTENCE, seed=1)) == 1


def test_negative_window_frames_is_rejected() -> None:
    with pytest.raises(ValueError, match="window_frames"):
        PiperOptions(window_frames=-1)


def test_split_sessions_use_an_arena_without_memory_patterns(piper_engine: PiperEngine) -> None:
    streamer = piper_engine._streamer
    assert streamer is not None
    for session in (streamer._frontend, streamer._decoder):
        options = session.get_session_options()
        assert options.enable_cpu_mem_arena and not options.enable_mem_pattern


def test_the_whole_graph_session_keeps_no_arena(piper_engine: PiperEngine) -> None:
    """PiperVoice runs it without run options, so an arena there would keep the load probe's memory."""
    options = piper_engine._voice.session.get_session_options()
    assert not options.enable_cpu_mem_arena and not options.enable_mem_pattern


# ----- the split and the windows --------------------------------------------------------------------


def test_joe_voice_splits_at_z_p_with_the_frame_mask_as_only_other_input(joe_split: SplitVoice) -> None:
    boundary = joe_split.boundary
    assert boundary.latent == "/Add_output_0"  # z_p = m_p + noise * exp(logs_p) * noise_scale
    assert len(boundary.conditioning) == 1  # the frame mask; a single speaker has no embedding
    assert boundary.frontend_inputs == ("input", "input_lengths", "scales")
    assert boundary.hop_length == HOP


def test_both_noise_nodes_land_in_the_frontend(joe_split: SplitVoice) -> None:
    def noise_nodes(serialized: bytes) -> int:
        return sum(node.op_type == "RandomNormalLike" for node in onnx.load_from_string(serialized).graph.node)

    assert (noise_nodes(joe_split.frontend), noise_nodes(joe_split.decoder)) == (2, 0)


def test_frontend_and_one_full_decode_reproduce_the_whole_graph(
    streamer: FrameStreamer, whole_engine: PiperEngine
) -> None:
    feed = feed_for(whole_engine, SENTENCE, noise=False)
    latent = streamer.frontend(feed)
    split = streamer.decode(latent, 0, latent.frames)
    (whole,) = chunks(whole_engine, SENTENCE, seed=1)
    assert np.max(np.abs(np.clip(split, -1, 1) - whole)) < 1e-6


def test_noisy_stream_equals_the_whole_graph_given_the_same_noise(whole_engine: PiperEngine) -> None:
    # onnxruntime replays a noise node's ``seed`` attribute on a fresh session's first run, so stamping
    # one seed per node gives the whole graph and the frontend the same draw: normal, noisy synthesis
    # can then be compared sample for sample.
    model = onnx.load(str(embedded_voice_paths()[0]))
    for seed, node in enumerate(node for node in model.graph.node if node.op_type == "RandomNormalLike"):
        node.attribute.append(onnx.helper.make_attribute("seed", float(11 + seed)))
    feed = feed_for(whole_engine, SENTENCE, noise=True)

    def whole_graph(run_feed: dict[str, np.ndarray]) -> np.ndarray:
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return np.asarray(session.run(None, run_feed)[0]).reshape(-1)

    noisy = whole_graph(feed)
    streamer = FrameStreamer(split_voice(model), onnxruntime.SessionOptions(), FrameSchedule())
    streamed = np.concatenate(list(streamer.stream(feed)))
    noise_free = whole_graph(feed_for(whole_engine, SENTENCE, noise=False))
    assert noisy.shape != noise_free.shape or np.max(np.abs(noisy - noise_free)) > 0.1  # the noise is on
    assert streamed.shape == noisy.shape
    assert np.max(np.abs(streamed - noisy)) < EXACT


def test_windows_cover_every_frame_once_growing_then_repeating() -> None:
    schedule = FrameSchedule(sizes=(2, 4), left=1, right=1)
    assert list(schedule.windows(13)) == [(0, 2), (2, 6), (6, 10), (10, 13)]
    assert list(schedule.windows(0)) == []


@pytest.mark.parametrize("bad", [{"sizes": ()}, {"sizes": (16, 0)}, {"left": -1}, {"right": -1}])
def test_schedule_rejects_empty_sizes_and_negative_context(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FrameSchedule(**bad)  # type: ignore[arg-type]


def test_graph_without_a_vits_seam_cannot_be_split() -> None:
    doubled = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["input", "input"], ["output"])],
        "not-vits",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, None])],
        [onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, None])],
    )
    with pytest.raises(GraphSplitError, match="z_p"):
        split_voice(onnx.helper.make_model(doubled))
