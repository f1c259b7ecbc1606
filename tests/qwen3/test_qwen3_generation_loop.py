"""The batched generation loop against the package's own ``generate``, on tiny random checkpoints.

The loop must be the package's model, only batched: for the same text, voice and seed a row's codes
equal what ``generate_*`` produces (greedy, and sampled with the same seed), alone or in any batch,
with its text sent at once or word by word. Cancels free slots at once, and nothing leaks.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from typing import Any

import numpy as np
import pytest
from loop_rows import assert_rows_match, collect, loaded_engine, prepared, send, solo_codes, start_row
from oracle.eager_step import eager_steps, static_predictor
from oracle.package import generate, synthesize_full
from qwen3_testing import noise_clip, steer_eos

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.qwen3.generation_loop import Frame

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test. hello world, this is a tiny test."
FRAMES = 40

VOICES: dict[str, dict[str, Any]] = {
    "CustomVoice": {"voice": "ryan", "language": "english"},
    "CustomVoice-dialect": {"voice": "eric", "language": "auto"},
    "VoiceDesign": {"instructions": "a calm, deep voice", "language": "english"},
    "Base-icl": {"ref_audio": noise_clip(2.0), "ref_text": "Hi there!"},
    "Base-x-vector": {"ref_audio": noise_clip(2.0, seed=5), "x_vector_only_mode": True},
}


@pytest.fixture
def engines(custom_voice_engine: Any, voice_design_engine: Any, base_engine: Any) -> dict[str, Any]:
    return {"CustomVoice": custom_voice_engine, "VoiceDesign": voice_design_engine, "Base": base_engine}


def request(engine: Any, voice: str, *, greedy: bool = False, seed: int = 7, frames: int = FRAMES) -> SynthesisRequest:
    return prepared(engine, greedy=greedy, seed=seed, max_new_tokens=frames, **VOICES[voice])


def engine_for(engines: dict[str, Any], voice: str) -> Any:
    return engines[voice.split("-")[0]]


def package_codes(engine: Any, text: str, req: SynthesisRequest) -> np.ndarray:
    """The codes the package's ``generate_*`` makes (its decode input, reference codes cut off)."""
    import torch

    tokenizer = engine.tts_model.model.speech_tokenizer
    inner = tokenizer.decode
    seen: list[Any] = []

    def record(items: Any) -> Any:
        seen.append(items[0]["audio_codes"])
        return inner(items)

    tokenizer.decode = record
    try:
        torch.manual_seed(int(req.seed or 0))
        generate(engine, text, req, max_new_tokens=int(req.max_new_tokens or FRAMES) + 1)
    finally:
        tokenizer.decode = inner
    codes = seen[0].cpu().numpy()
    history = engine._history(req)
    return codes[0 if history is None else int(history.shape[0]) :]


def loop_codes(engine: Any, pieces: list[str], req: SynthesisRequest, *, pause_s: float = 0.0) -> np.ndarray:
    """The codes of a row sent its text in ``pieces``, ``pause_s`` apart."""
    row = engine.open_row(req)
    for piece in pieces:
        row.feed(piece)
        time.sleep(pause_s)
    row.finish()
    return collect(row)[0]


def words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + " " for part in parts[:-1]] + [parts[-1]]


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
@pytest.mark.parametrize("voice", list(VOICES))
def test_a_rows_codes_equal_the_packages_generate(engines: dict[str, Any], voice: str, greedy: bool) -> None:
    engine = engine_for(engines, voice)
    req = request(engine, voice, greedy=greedy)
    expected = package_codes(engine, TEXT, req)
    assert len(expected) > 1
    np.testing.assert_array_equal(loop_codes(engine, [TEXT], req), expected)


@pytest.mark.parametrize("voice", ["CustomVoice", "VoiceDesign", "Base-icl", "Base-x-vector"])
def test_greedy_streamed_audio_equals_the_packages_audio(engines: dict[str, Any], voice: str) -> None:
    engine = engine_for(engines, voice)
    with steer_eos(engine, after=FRAMES):
        streamed = np.concatenate([c.samples for c in engine.synthesize(TEXT, request(engine, voice, greedy=True))])
        full = synthesize_full(engine, TEXT, request(engine, voice, greedy=True)).samples
    assert len(streamed) == len(full) == FRAMES * 1920
    np.testing.assert_allclose(streamed, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("voice", ["CustomVoice", "Base-icl"])
def test_text_sent_word_by_word_gives_the_codes_of_text_sent_at_once(engines: dict[str, Any], voice: str) -> None:
    engine = engine_for(engines, voice)
    whole = loop_codes(engine, [TEXT], request(engine, voice, seed=11, frames=60))
    by_word = loop_codes(engine, words(TEXT), request(engine, voice, seed=11, frames=60), pause_s=0.03)
    np.testing.assert_array_equal(by_word, whole)


def test_frames_come_before_the_text_is_complete(custom_voice_engine: Any) -> None:
    row = custom_voice_engine.open_row(request(custom_voice_engine, "CustomVoice", frames=200))
    first_words = words(TEXT)[:4]
    for piece in first_words:
        row.feed(piece)
    event = row.events.get(timeout=30)
    assert isinstance(event, Frame)  # audio while the rest of the text has not been sent
    assert 0 < event.text_read <= len("".join(first_words))
    row.cancel()
    collect(row)


def test_a_row_that_has_read_all_its_text_waits_for_more(custom_voice_engine: Any) -> None:
    loop = custom_voice_engine.loop
    row = custom_voice_engine.open_row(request(custom_voice_engine, "CustomVoice", frames=200))
    row.feed("hello world, ")  # "hello world," is final; the talker reads it, then must wait
    time.sleep(0.5)
    steps = loop.stats.steps
    frames_so_far = row.events.qsize()
    time.sleep(0.3)
    assert loop.stats.steps == steps and row.events.qsize() == frames_so_far  # paused, not at EOS
    assert frames_so_far <= len(row.track.ids)  # one frame per text token read, no text EOS early
    row.feed("this is a tiny test.")
    row.finish()
    codes, _ = collect(row)
    assert len(codes) >= frames_so_far


def test_every_row_of_a_mixed_batch_gets_exactly_its_solo_output(custom_voice_engine: Any, base_engine: Any) -> None:
    mixes = [
        (custom_voice_engine, "CustomVoice", {"seed": 1, "frames": 30}),
        (custom_voice_engine, "CustomVoice-dialect", {"seed": 2, "frames": 45}),
        (custom_voice_engine, "CustomVoice", {"seed": 3, "frames": 60, "greedy": True}),
        (custom_voice_engine, "CustomVoice", {"seed": 4, "frames": 50}),
        (base_engine, "Base-icl", {"seed": 5, "frames": 40}),
        (base_engine, "Base-x-vector", {"seed": 6, "frames": 35}),
        (base_engine, "Base-icl", {"seed": 7, "frames": 55, "greedy": True}),
    ]
    texts = [TEXT, "Hi there!", TEXT + " " + TEXT, "hello world.", TEXT, "this is a test.", TEXT]
    solo = [
        loop_codes(engine, [text], request(engine, voice, **opts))
        for (engine, voice, opts), text in zip(mixes, texts, strict=True)
    ]
    cancelled = 3  # this one is cancelled after 5 frames, in the middle of the batch

    rows = [engine.open_row(request(engine, voice, **opts)) for engine, voice, opts in mixes]
    results: list[Any] = [None] * len(rows)

    def consume(i: int) -> None:
        results[i] = collect(rows[i], cancel_after=5 if i == cancelled else None)

    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(len(rows))]
    for thread in consumers:
        thread.start()
    for row, text in zip(rows, texts, strict=True):
        send(row, text)
    for thread in consumers:
        thread.join(timeout=120)
    assert_rows_match(results, solo, cancelled={cancelled: 5})
    assert custom_voice_engine.loop.stats.max_batch >= 4 and base_engine.loop.stats.max_batch >= 3


def test_a_cancel_frees_the_slot_within_one_step(custom_voice_engine: Any) -> None:
    loop = custom_voice_engine.loop
    with steer_eos(custom_voice_engine, after=None):
        row = start_row(custom_voice_engine, request(custom_voice_engine, "CustomVoice", frames=400), TEXT)
        row.events.get(timeout=30)
        row.events.get(timeout=30)
        steps = loop.stats.steps
        row.cancel()
        while loop.free_slots != loop.slots:
            time.sleep(0.001)
        assert loop.stats.steps - steps <= 1  # the step in flight when the cancel came
    assert collect(row)[1] == "cancelled"


def test_a_thousand_random_submit_cancel_cycles_leave_no_slot_tensor_or_thread_behind(
    custom_voice_engine: Any,
) -> None:
    import torch

    engine, loop = custom_voice_engine, custom_voice_engine.loop
    # warm: lazily created state exists before the baseline
    solo_codes(engine, request(engine, "CustomVoice", frames=3), TEXT)
    assert loop.wait_idle(timeout=30)
    gc.collect()
    threads, tensors = threading.active_count(), _tensor_count()
    rng = random.Random(0)
    rows = []
    for cycle in range(1000):
        row = engine.open_row(request(engine, "CustomVoice", seed=cycle, frames=rng.randint(1, 4)))
        action = rng.random()
        if action < 0.25:
            row.cancel()  # before any text
        else:
            row.feed(rng.choice(["hello ", "hello world, ", TEXT]))
            if action < 0.6:
                time.sleep(rng.random() * 0.005)
                row.cancel()  # while it waits, prefills or generates
            else:
                row.finish()
        rows.append(row)
        if len(rows) >= 24:
            for done in rows:
                collect(done)
            rows.clear()
    for done in rows:
        collect(done)
    del rows, row, done
    assert loop.wait_idle(timeout=30)  # the loop thread has let go of the last step's tensors
    gc.collect()
    assert loop.free_slots == loop.slots and loop.active_rows == 0
    assert threading.active_count() == threads
    assert _tensor_count() == tensors
    assert torch.is_tensor(loop.talker.cache.keys)


def _tensor_count() -> int:
    import torch

    return sum(1 for obj in gc.get_objects() if torch.is_tensor(obj))


def test_the_static_predictor_for_cuda_graphs_gives_exactly_the_eager_codes(tiny_checkpoints: dict[str, Any]) -> None:
    """The graph-capturable predictor (static buffers per batch bucket, padded rows), run eagerly on CPU."""
    # The eager reference step, where the static predictor is used.
    with loaded_engine(tiny_checkpoints["custom_voice"], max_batch=8) as engine, eager_steps(engine.loop):
        mixes = [("CustomVoice", {"seed": s, "frames": 20 + 5 * s, "greedy": s % 2 == 0}) for s in range(5)]
        texts = [TEXT, "Hi there!", "hello world.", TEXT, "this is a test."]
        eager = [loop_codes(engine, [t], request(engine, v, **o)) for (v, o), t in zip(mixes, texts, strict=True)]
        static_predictor(engine.loop.talker)
        rows = [engine.open_row(request(engine, voice, **opts)) for voice, opts in mixes]
        for row, text in zip(rows, texts, strict=True):
            send(row, text)
        static = [collect(row) for row in rows]  # five rows at once: the 8-row bucket, three rows padding
        assert_rows_match(static, eager)
        solo = loop_codes(engine, [texts[1]], request(engine, mixes[1][0], **mixes[1][1]))  # one row: bucket 1
        np.testing.assert_array_equal(solo, eager[1])
