"""The static, device-resident step (``static_step``) against the eager reference step, on tiny checkpoints.

The loop runs ``StaticStep`` by default (what a CUDA graph records; eagerly on CPU). ``oracle.eager_step``
runs the reference: the package's decoder layers over ``SlotKVCache``, gathering each row's state and building
index tensors from host lists every step. For the same rows both must give exactly the same codes, greedy and
sampled, in padded buckets, with rows joining and leaving and cancelled; and a static step must build no
tensor from host data and read back exactly one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from loop_rows import assert_rows_match, codes_of, collect, loaded_engine, prepared, send, solo_codes, start_row
from oracle.eager_step import eager_steps
from qwen3_testing import steer_eos

from speakwire.engines.base import SynthesisRequest
from speakwire.engines.qwen3.generation_loop import Row
from speakwire.engines.qwen3.sampling import RowSampling, Sampling

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test. hello world, this is a tiny test."
TEXTS = [TEXT, "Hi there!", "hello world.", TEXT + " " + TEXT, "this is a test.", TEXT]


@pytest.fixture(scope="module")
def engine(tiny_checkpoints: dict[str, Any]) -> Iterator[Any]:
    with loaded_engine(tiny_checkpoints["custom_voice"], max_batch=8) as loaded:
        yield loaded


def request(engine: Any, *, seed: int, frames: int, greedy: bool = False, sampling: Any = None) -> SynthesisRequest:
    return prepared(
        engine, greedy=greedy, sampling=sampling, voice="ryan", language="english", seed=seed, max_new_tokens=frames
    )


def run_mix(engine: Any, specs: list[dict[str, Any]], *, static: bool) -> list[tuple[np.ndarray, str]]:
    """Rows started at their ``after`` (frames of row 0 already out), each consumed on its own thread."""
    with contextlib.ExitStack() as stack:
        if not static:
            stack.enter_context(eager_steps(engine.loop))
        assert engine.loop.wait_idle(timeout=60)
        return _run_mix(engine, specs)


def _run_mix(engine: Any, specs: list[dict[str, Any]]) -> list[tuple[np.ndarray, str]]:
    results: list[Any] = [None] * len(specs)
    rows: list[Row | None] = [None] * len(specs)
    started = [threading.Event() for _ in specs]
    base = _frames_out(engine)

    def consume(i: int) -> None:
        spec = specs[i]
        row = engine.open_row(request(engine, **spec["request"]))
        rows[i] = row
        send(row, spec["text"])
        started[i].set()
        results[i] = collect(row, cancel_after=spec.get("cancel_after"))

    first = threading.Thread(target=consume, args=(0,))
    first.start()
    started[0].wait(30)
    others = []
    for i in range(1, len(specs)):
        wait_for = specs[i].get("after", 0)
        while wait_for and _frames_out(engine) - base < wait_for:
            time.sleep(0.001)
        thread = threading.Thread(target=consume, args=(i,))
        thread.start()
        others.append(thread)
    for thread in [first, *others]:
        thread.join(timeout=300)
    return results


def _frames_out(engine: Any) -> int:
    return int(engine.loop.stats.rows_stepped)


def _mix() -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    for i in range(6):
        spec: dict[str, Any] = {
            "request": {"seed": 10 + i, "frames": 15 + 7 * i, "greedy": i % 3 == 1},
            "text": TEXTS[i],
        }
        specs.append(spec)
    specs[3]["cancel_after"] = 4  # leaves in the middle of the batch (row 2 ends at EOS after 3 frames)
    return specs


def _cancelled(specs: list[dict[str, Any]]) -> dict[int, int]:
    """The rows of a mix cancelled on purpose, with the frames they had when cancelled."""
    return {i: spec["cancel_after"] for i, spec in enumerate(specs) if spec.get("cancel_after")}


def _reasons(results: list[tuple[np.ndarray, str]]) -> list[str]:
    return [reason for _, reason in results]


def test_the_static_step_gives_exactly_the_codes_of_the_eager_step(engine: Any) -> None:
    """Six rows (greedy and sampled) at once: slots 0..5, the 8-row bucket with two padding rows, one cancel."""
    specs = _mix()
    eager = run_mix(engine, specs, static=False)
    static = run_mix(engine, specs, static=True)
    assert _reasons(static) == _reasons(eager)
    assert_rows_match(static, codes_of(eager), cancelled=_cancelled(specs))
    assert engine.loop.stats.max_batch >= 5


def test_a_step_over_its_span_bucket_gives_the_codes_of_its_own_span(engine: Any) -> None:
    """What a CUDA graph reads: the positions of its span bucket (``spans_for``), not the rows' own. Run at the
    bucketed spans, the mix gets the codes it gets at its own spans; past the cache's length there is no bucket."""
    state = engine.loop.state
    assert state.spans[-1] == engine.loop.talker.cache.max_len
    assert [state.span_bucket(n) for n in (1, 256, 257, state.spans[-1])] == [
        256, 256, min(512, state.spans[-1]), state.spans[-1]
    ]  # fmt: skip
    with pytest.raises(ValueError, match="past the cache"):
        state.span_bucket(state.spans[-1] + 1)
    specs = _mix()
    own = run_mix(engine, specs, static=True)
    steps, padded_before = engine.loop.stats.steps, state.padded_steps
    state.pad_spans = True
    try:
        padded = run_mix(engine, specs, static=True)
    finally:
        state.pad_spans = False
    stepped, padded_steps = engine.loop.stats.steps - steps, state.padded_steps - padded_before
    assert padded_steps > stepped // 2  # padded, not the same run twice
    assert_rows_match(padded, codes_of(own), cancelled=_cancelled(specs))


def test_rows_joining_and_leaving_get_their_solo_codes_on_the_static_step(engine: Any) -> None:
    """Rows that join a running batch (new slots), leave it (freed slots) and rejoin: each row's codes are its solo
    codes from the eager step, whatever the bucket it stepped in."""
    specs = _mix()
    solo = [run_mix(engine, [spec], static=False)[0] for spec in specs]
    staggered = [{**spec, "after": 6 * i} for i, spec in enumerate(specs)]
    together = run_mix(engine, staggered, static=True)
    assert_rows_match(together, codes_of(solo), cancelled=_cancelled(specs))


def test_a_row_with_top_p_or_a_large_top_k_steps_eagerly_with_the_same_codes(engine: Any) -> None:
    """Top-p < 1 or top-k above TOPK_CAP cannot be graphed: such a step runs the same function with a sort."""
    wide = RowSampling(Sampling(top_k=0, top_p=0.8, repetition_penalty=1.1), Sampling(top_k=200, top_p=0.9))
    specs = _mix()[:3]
    specs[0]["request"] = {"seed": 3, "frames": 25, "sampling": wide}
    eager = run_mix(engine, specs, static=False)
    static = run_mix(engine, specs, static=True)
    assert_rows_match(static, codes_of(eager), cancelled=_cancelled(specs))


def test_greedy_stages_in_slots_that_sampled_before_get_the_eager_codes(engine: Any) -> None:
    """A greedy stage samples with temperature 1, top-k 1 and noise 1 on the static step: rows that take over a
    slot whose last row sampled (its noise still there) and rows greedy in one stage only get the eager codes."""
    talker_greedy = RowSampling(Sampling(do_sample=False, repetition_penalty=1.1), Sampling(top_k=20))
    predictor_greedy = RowSampling(Sampling(temperature=0.7), Sampling(do_sample=False, top_k=0, top_p=0.5))
    specs: list[dict[str, Any]] = [
        {"request": {"seed": 21, "frames": 9}, "text": TEXTS[1]},
        {"request": {"seed": 22, "frames": 12, "greedy": True}, "text": TEXTS[2]},
        {"request": {"seed": 23, "frames": 12, "sampling": talker_greedy}, "text": TEXTS[4]},
        {"request": {"seed": 24, "frames": 12, "sampling": predictor_greedy}, "text": TEXTS[0]},
    ]
    for spec in specs:  # one at a time: every row takes slot 0 after the one before it
        eager = run_mix(engine, [spec], static=False)
        assert_rows_match(run_mix(engine, [spec], static=True), codes_of(eager))
    assert engine.loop.state.graphable(predictor_greedy)  # a greedy stage's top-k and top-p do not matter


def test_a_static_step_builds_no_tensor_from_host_data_and_reads_back_once(engine: Any) -> None:
    """Counted on the loop thread around one full step of 4 rows: aten ops that take host data (``lift_fresh``:
    ``torch.tensor``, list indexing, Python scalars assigned), host reads (``_local_scalar_dense``: ``item``,
    ``bool``, ``int``; ``tolist``; ``numpy``), full sorts, and rotary-table computations (none: made at load)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    loop = engine.loop
    counts: Counter[str] = Counter()
    mine: dict[str, int | None] = {"thread": None}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    inner_step, inner_tolist, inner_numpy = loop._step, torch.Tensor.tolist, torch.Tensor.numpy
    rotary = engine.tts_model.model.talker.model.rotary_emb
    rotary_forward = rotary.forward
    wanted = threading.Event()
    done = threading.Event()

    def reads(name: str, inner: Any) -> Any:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            if mine["thread"] == threading.get_ident():
                counts[name] += 1
            return inner(self, *args, **kwargs)

        return counted

    def rotary_counted(*args: Any, **kwargs: Any) -> Any:
        counts["rotary"] += 1
        return rotary_forward(*args, **kwargs)

    def step() -> bool:
        if not wanted.is_set() or done.is_set():
            return bool(inner_step())
        before = loop.stats.rows_stepped
        counts.clear()
        mine["thread"] = threading.get_ident()
        try:
            with Count():
                progressed = inner_step()
        finally:
            mine["thread"] = None
        if loop.stats.rows_stepped - before == 4:
            done.set()
        return bool(progressed)

    rows = []
    with steer_eos(engine, after=None):
        loop._step = step
        torch.Tensor.tolist = reads("tolist", inner_tolist)  # type: ignore[method-assign]
        torch.Tensor.numpy = reads("numpy", inner_numpy)  # type: ignore[method-assign]
        rotary.forward = rotary_counted
        try:
            rows = [start_row(engine, request(engine, seed=s, frames=200, greedy=s == 1), TEXT) for s in range(4)]
            while any(row.events.qsize() < 2 for row in rows):
                time.sleep(0.005)
            wanted.set()
            assert done.wait(60)
        finally:
            del loop._step
            torch.Tensor.tolist = inner_tolist  # type: ignore[method-assign]
            torch.Tensor.numpy = inner_numpy  # type: ignore[method-assign]
            rotary.forward = rotary_forward
            for row in rows:
                row.cancel()
            for row in rows:
                collect(row)
    assert counts["lift_fresh"] == 0, counts
    assert counts["_local_scalar_dense"] == 0 and counts["tolist"] == 0, counts
    assert counts["numpy"] == 1  # the one read-back: the frame codes and next codes of the bucket
    assert counts["sort"] == 0 and counts["topk"] == 16  # 15 code-predictor draws and the talker's
    assert counts["rotary"] == 0  # the rotary tables of the talker and the predictor are made at load
    assert counts["exponential_"] == 3  # one noise draw per sampling row (one row is greedy)


def test_the_talkers_rotary_table_holds_the_per_step_rotary_of_every_position(engine: Any) -> None:
    """The table the step reads (one ``index_select``) against the rotary computed for a batch of positions, as
    the step computed it before: the same numbers bit for bit, padded rows and the scratch position included."""
    import torch

    from speakwire.engines.qwen3.static_step import _signed_sin

    state = engine.loop.state
    hidden = engine.tts_model.model.talker.config.hidden_size
    for positions in ([0], [5, 0, 17, 3], list(range(state.park + 1)), [state.park, 1, 2, 3, 4, 5, 6, 7]):
        index = torch.tensor(positions)
        with torch.no_grad():
            cos, sin = state._rotary(torch.zeros((len(positions), 1, hidden)), index)
        table = state._talker_rotary.index_select(0, index)
        assert torch.equal(table[:, :1], cos.transpose(1, 2))
        assert torch.equal(table[:, 1:], _signed_sin(torch, sin.transpose(1, 2)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_static_steps_rms_norm_is_the_packages_bit_for_bit(engine: Any, dtype: str) -> None:
    """``package_rms_norm`` (one ``rms_norm`` op; the weight a second op below float32) against the package's
    ``Qwen3TTSRMSNorm`` forward, for the shapes the step norms: hidden states, and q|k heads."""
    import torch

    from speakwire.engines.qwen3.static_step import package_rms_norm

    norm_type = type(engine.tts_model.model.talker.model.norm)
    generator = torch.Generator().manual_seed(3)
    for shape in [(16, 1, 1024), (1, 2, 1024), (64, 1, 2048), (16, 1, 24, 128), (3, 1, 16, 64)]:
        norm = norm_type(shape[-1], eps=1e-6).to(getattr(torch, dtype))
        with torch.no_grad():
            norm.weight.copy_(torch.randn(shape[-1], generator=generator) * 0.5 + 1)
            x = (torch.randn(shape, generator=generator) * 4).to(norm.weight.dtype)
            expected = norm(x)
            with torch.inference_mode():
                got = package_rms_norm(torch, norm, x)
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected), shape


def test_an_eager_attention_implementation_is_refused_at_load(engine: Any) -> None:
    from speakwire.engines.qwen3.batched_talker import check_attention

    config = engine.tts_model.model.talker.config
    saved = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        with pytest.raises(ValueError, match="sdpa"):
            check_attention(engine.tts_model)
    finally:
        config._attn_implementation = saved
    check_attention(engine.tts_model)


def test_a_burst_of_16_prompts_runs_in_at_most_two_forwards_with_each_rows_solo_codes(
    tiny_checkpoints: dict[str, Any],
) -> None:
    """Rows that arrive in the same turn prefill as one padded forward; every row still gets its solo codes."""
    with loaded_engine(tiny_checkpoints["custom_voice"], max_batch=16) as burst:
        texts = [TEXTS[i % len(TEXTS)] + " hello" * (i % 4) for i in range(16)]
        specs = [{"seed": 40 + i, "frames": 12, "greedy": i % 4 == 0} for i in range(16)]
        solo = [solo_codes(burst, request(burst, **spec), text) for spec, text in zip(specs, texts, strict=True)]
        assert burst.loop.wait_idle(timeout=60)
        forwards = []
        hook = burst.tts_model.model.talker.model.layers[0].register_forward_pre_hook(
            lambda module, args: forwards.append(args[0].shape[1]) if args[0].shape[1] > 1 else None
        )
        try:
            requests = [request(burst, **spec) for spec in specs]
            with burst.loop._cond:  # all 16 arrive in one turn
                rows = [start_row(burst, req, text) for req, text in zip(requests, texts, strict=True)]
            together = [collect(row) for row in rows]
        finally:
            hook.remove()
        assert 1 <= len(forwards) <= 2, forwards
        assert_rows_match(together, solo)
