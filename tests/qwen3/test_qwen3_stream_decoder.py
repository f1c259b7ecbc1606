"""Incremental code2wav decoding equals one full decode, and needs more history than one window."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from itertools import accumulate, pairwise
from typing import Any

import numpy as np
import pytest
from qwen3_testing import require_qwen_tts

pytestmark = pytest.mark.qwen

CODEBOOK, QUANTIZERS = 64, 16
SCHEDULE = (2, 4, 8, 16, 25, 25)  # 80 frames
SPANS = list(pairwise(accumulate(SCHEDULE, initial=0)))  # (start, stop) of each chunk of the schedule
SAMPLES_PER_FRAME = 1920


def decoder_classes() -> tuple[Any, Any]:
    """The package's code2wav decoder config and model classes (skips without the ``[qwen]`` extra)."""
    require_qwen_tts()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2DecoderConfig,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder

    return Qwen3TTSTokenizerV2DecoderConfig, Qwen3TTSTokenizerV2Decoder


def decoder(*, layers: int, window: int) -> Any:
    """A random code2wav decoder with the released layout but tiny widths, scaled to speech-like levels."""
    Qwen3TTSTokenizerV2DecoderConfig, Qwen3TTSTokenizerV2Decoder = decoder_classes()
    import torch

    torch.manual_seed(0)
    config = Qwen3TTSTokenizerV2DecoderConfig(
        codebook_size=CODEBOOK,
        codebook_dim=16,
        hidden_size=32,
        latent_dim=32,
        head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_quantizers=QUANTIZERS,
        upsample_rates=[8, 5, 4, 3],
        upsampling_ratios=[2, 2],
        decoder_dim=32,
        sliding_window=window,
        layer_scale_initial_scale=1.0,
    )
    model = Qwen3TTSTokenizerV2Decoder(config).eval()
    with torch.no_grad():
        for name, parameter in model.quantizer.named_parameters():
            if name.endswith("embedding_sum"):
                parameter.normal_()
        level = float(model(torch.randint(0, CODEBOOK, (1, QUANTIZERS, 40))).std())
        model.decoder[-1].conv.weight.mul_(0.2 / level)
        model.decoder[-1].conv.bias.mul_(0.2 / level)
    return model


def codes(frames: int) -> Any:
    import torch

    return torch.randint(0, CODEBOOK, (frames, QUANTIZERS), generator=torch.Generator().manual_seed(1))


def streams_of_codes(streams: int, frames: int, *, shift: int) -> list[Any]:
    """One code sequence per stream: the same random codes, rolled ``shift`` frames further for each stream."""
    return [codes(frames).roll(shift * i, dims=0) for i in range(streams)]


def in_chunks(frames: Any) -> list[Any]:
    """``frames`` cut as the schedule cuts a stream."""
    return [frames[start:stop] for start, stop in SPANS]


def full_decode(model: Any, frames: Any) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return np.asarray(model(frames.T.unsqueeze(0))[0, 0].numpy())


def assert_same_audio(got: Any, expected: Any) -> None:
    """Equal to float rounding: what batching, padding and streaming may change, and no more."""
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@contextlib.contextmanager
def batcher_of(model: Any, **options: Any) -> Iterator[Any]:
    """A ``DecodeBatcher`` over ``model``, closed afterwards (its stats stay readable)."""
    from speakwire.engines.qwen3.decode_batcher import DecodeBatcher

    batcher = DecodeBatcher(model, **options)
    try:
        yield batcher
    finally:
        batcher.close()


def on_threads(target: Callable[[int], None], count: int) -> None:
    """``target(i)`` for each ``i`` below ``count``, each on a thread of its own, all started before any is joined."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def decode_in_step(batcher: Any, model: Any, frames: list[Any]) -> list[np.ndarray]:
    """Each stream's audio, decoded chunk by chunk through ``batcher`` from a thread of its own; every stream asks
    for its next chunk at the same moment, as after one loop step."""
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    out: list[list[np.ndarray]] = [[] for _ in frames]
    gate = threading.Barrier(len(frames))

    def stream_audio(i: int) -> None:
        state = StreamDecoder(model)
        for chunk in in_chunks(frames[i]):
            gate.wait()
            out[i].append(batcher.decode(state, chunk))

    on_threads(stream_audio, len(frames))
    return [np.concatenate(pieces) for pieces in out]


def assert_streams_in_step_decode_as_alone(streams: int, **options: Any) -> Any:
    """``streams`` streams decoded in step through one batcher (``options``) each give their full decode alone.

    Returns the batcher's stats, for what the test says of its batches.
    """
    model = decoder(layers=2, window=4)
    frames = streams_of_codes(streams, sum(SCHEDULE), shift=1)
    solo = [full_decode(model, f) for f in frames]
    with batcher_of(model, **options) as batcher:
        audio = decode_in_step(batcher, model, frames)
    for got, expected in zip(audio, solo, strict=True):
        assert_same_audio(got, expected)
    return batcher.stats


def test_chunks_decoded_one_by_one_equal_the_full_decode_across_three_windowed_layers() -> None:
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    model = decoder(layers=3, window=5)
    frames = codes(sum(SCHEDULE))
    stream = StreamDecoder(model)
    pieces = [stream.decode(chunk) for chunk in in_chunks(frames)]

    assert [len(piece) for piece in pieces] == [size * SAMPLES_PER_FRAME for size in SCHEDULE]
    assert_same_audio(np.concatenate(pieces), full_decode(model, frames))
    assert stream.frames_decoded == sum(SCHEDULE)


def test_one_window_of_left_context_is_not_enough_with_several_layers() -> None:
    """Why the history is layers × window: re-decoding with only `window` frames of context drifts."""
    model = decoder(layers=3, window=5)
    import torch

    frames = codes(sum(SCHEDULE))
    full = full_decode(model, frames)
    pieces = []
    with torch.inference_mode():
        for start, stop in SPANS:
            context = min(5, start)
            chunk = frames[start - context : stop].T.unsqueeze(0)
            pieces.append(model(chunk)[0, 0, context * SAMPLES_PER_FRAME :].numpy())
    assert np.abs(np.concatenate(pieces) - full).max() > 1e-3


def test_history_frames_are_context_only_as_in_in_context_cloning() -> None:
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    model = decoder(layers=2, window=4)
    frames = codes(50)
    stream = StreamDecoder(model, history=frames[:20])
    audio = np.concatenate([stream.decode(frames[20:22]), stream.decode(frames[22:50])])
    assert_same_audio(audio, full_decode(model, frames)[20 * SAMPLES_PER_FRAME :])
    assert stream.frames_decoded == 30


def test_the_released_decoder_needs_576_frames_of_transformer_and_10_of_conv_history() -> None:
    Qwen3TTSTokenizerV2DecoderConfig, Qwen3TTSTokenizerV2Decoder = decoder_classes()
    import torch

    from speakwire.engines.qwen3.stream_decoder import conv_reach, transformer_reach

    with torch.device("meta"):  # the released shapes (8 layers, window 72), without allocating weights
        released = Qwen3TTSTokenizerV2Decoder(Qwen3TTSTokenizerV2DecoderConfig(codebook_dim=512))
    assert transformer_reach(released) == 8 * 72
    assert conv_reach(released) == 10


def test_streams_decoded_together_in_one_batch_equal_each_decoded_alone() -> None:
    streams = 6
    stats = assert_streams_in_step_decode_as_alone(streams)
    assert stats.max_batch > 1 and stats.calls < streams * len(SCHEDULE)


@pytest.mark.parametrize(("streams", "cap"), [(7, 3), (5, 1), (4, 4), (3, 8)])
def test_windows_due_together_decode_in_batches_of_at_most_the_cap(streams: int, cap: int) -> None:
    """N windows of one shape queued at once: ceil(N / cap) calls per chunk, each chunk its solo decode."""
    import math

    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    model = decoder(layers=2, window=4)
    frames = streams_of_codes(streams, sum(SCHEDULE), shift=3)
    states, solos = [StreamDecoder(model) for _ in range(streams)], [StreamDecoder(model) for _ in range(streams)]
    with batcher_of(model, max_windows=cap) as batcher:
        for start, stop in SPANS:
            calls = batcher.stats.calls
            chunk = [f[start:stop] for f in frames]
            # as the text stream hands them over: a list of (Q,) frames, stacked on the batcher's side
            batched = batcher.decode_many([(s, list(c), None) for s, c in zip(states, chunk, strict=True)])
            assert batcher.stats.calls - calls == math.ceil(streams / cap)
            for audio, solo, c in zip(batched, solos, chunk, strict=True):
                assert len(audio) == (stop - start) * SAMPLES_PER_FRAME
                assert_same_audio(audio, solo.decode(c))
    assert batcher.stats.chunks == streams * len(SCHEDULE)
    assert batcher.stats.max_batch == min(cap, streams)


def test_concurrent_streams_under_a_small_cap_equal_each_decoded_alone() -> None:
    streams = 6
    stats = assert_streams_in_step_decode_as_alone(streams, max_windows=2)
    assert stats.chunks == streams * len(SCHEDULE) and stats.max_batch <= 2


def test_windows_of_different_shapes_decode_in_one_call_each_as_decoded_alone() -> None:
    """Streams out of step (different history, different chunk sizes, one with a reference's history) share a
    call, padded on the right; each row's audio is its solo decode."""
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    model = decoder(layers=2, window=4)
    # (frames already decoded, frames in this chunk, reference history) per stream. Frames through the
    # audio-rate part (conv reach 10 + new): 1 and 2 (first chunks: one call); 12, 13, 14, 22 (one call:
    # within twice the shortest); 35 (alone).
    plans = [(0, 1, 0), (0, 2, 0), (6, 8, 0), (30, 25, 0), (14, 3, 0), (0, 2, 12), (20, 12, 0)]
    frames = streams_of_codes(len(plans), 60, shift=5)
    with batcher_of(model) as batcher:
        states, solos, chunks = [], [], []
        for (done, size, history), f in zip(plans, frames, strict=True):
            prefix = codes(history) if history else None
            state, solo = StreamDecoder(model, history=prefix), StreamDecoder(model, history=prefix)
            if done:
                state.decode(f[:done])
                solo.decode(f[:done])
            states.append(state)
            solos.append(solo)
            chunks.append(f[done : done + size])
        calls = batcher.stats.calls
        batched = batcher.decode_many([(s, c, None) for s, c in zip(states, chunks, strict=True)])
        assert batcher.stats.calls - calls == 3
        assert batcher.stats.max_batch == 4
        for audio, solo, chunk in zip(batched, solos, chunks, strict=True):
            assert len(audio) == len(chunk) * SAMPLES_PER_FRAME
            assert_same_audio(audio, solo.decode(chunk))


def test_jobs_handed_over_together_share_calls_and_each_owners_callbacks_keep_their_order() -> None:
    """The loop hands a step's chunk ends (and rows' ends) to code2wav at once, with what to do with the audio:
    nobody waits on a thread for it. A row's callbacks run in the order it handed its jobs over, its end after its
    last chunk, even when a later chunk of another length is decoded first; two windows of one utterance (its
    group) never share a call; each chunk is its solo decode."""
    from speakwire.engines.qwen3.decode_batcher import DecodeJob
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder

    model = decoder(layers=2, window=4)
    rows = 3
    frames = streams_of_codes(rows, 6, shift=2)
    seen: list[tuple[int, str, np.ndarray | None]] = []
    done = threading.Event()

    def callback(row: int, what: str) -> Any:
        def record(audio: np.ndarray | None, error: BaseException | None) -> None:
            assert error is None
            seen.append((row, what, audio))
            if len(seen) == 3 * rows:
                done.set()

        return record

    talk = object()  # rows 1 and 2 are one utterance (a long text rolled over)
    jobs = []
    states = [StreamDecoder(model) for _ in range(rows)]
    for row in range(rows):
        group = talk if row else None
        jobs.append(DecodeJob(row, states[row], frames[row][:4], None, callback(row, "long"), group))
    for row in range(rows):
        group = talk if row else None
        jobs.append(DecodeJob(row, states[row], frames[row][4:5], None, callback(row, "short"), group))
        jobs.append(DecodeJob(row, None, None, None, callback(row, "end"), group))
    with batcher_of(model) as batcher:
        batcher.submit(jobs)
        assert done.wait(60)
        stats = batcher.stats
    for row in range(rows):
        assert [what for r, what, _ in seen if r == row] == ["long", "short", "end"]
        solo = StreamDecoder(model)
        long, short = (audio for r, what, audio in seen if r == row and what != "end")
        assert_same_audio(long, solo.decode(frames[row][:4]))
        assert_same_audio(short, solo.decode(frames[row][4:5]))
    # Rows 0 and 1 share calls; row 2, of row 1's utterance, never does (without that rule: batches of 3).
    assert stats.chunks == 2 * rows and stats.max_batch == 2


def test_the_memory_cap_is_what_fits_at_least_one_at_most_the_ceiling() -> None:
    from speakwire.engines.qwen3.decode_batcher import DecodeBatcher, windows_in

    mib = 2**20
    assert windows_in(100 * mib, 30 * mib, 64) == 3
    assert windows_in(100 * mib, 30 * mib, 2) == 2  # never more than the streams that can be due at once
    assert windows_in(10 * mib, 30 * mib, 64) == 1  # one window always goes (as before the cap)
    assert windows_in(-5 * mib, 30 * mib, 64) == 1
    with pytest.raises(ValueError, match="max_windows"):
        DecodeBatcher(decoder(layers=1, window=2), max_windows=0)


def test_the_largest_window_is_as_long_as_any_window_the_schedule_builds() -> None:
    from speakwire.engines.qwen3.stream_decoder import StreamDecoder, largest_window

    model = decoder(layers=2, window=4)
    state, longest = StreamDecoder(model, history=codes(40)), (0, 0, 0)
    for chunk in in_chunks(codes(sum(SCHEDULE))):
        window = state.window(chunk)
        assert window is not None
        longest = max(longest, window.shape)
    assert largest_window(model, max(SCHEDULE)).shape == longest
