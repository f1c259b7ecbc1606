"""A failed generation step (CUDA out of memory, say) ends that step's rows, not the engine; repeated ones make it
unhealthy, and then /ready and /ping answer 503 with the reason. Failures are injected into the step on CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from loop_rows import collect, collect_to_end, loaded_engine, prepared, start_row

from speakwire.engines.qwen3.generation_loop import FAILED_STEPS_UNHEALTHY, Row
from speakwire.settings import Settings

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test."


@pytest.fixture
def engine(tiny_checkpoints: dict[str, Path]) -> Iterator[Any]:
    with loaded_engine(tiny_checkpoints["custom_voice"], max_batch=4) as loaded:
        yield loaded


def open_row(engine: Any, seed: int, frames: int = 12) -> Row:
    req = prepared(engine, voice="ryan", language="english", seed=seed, max_new_tokens=frames)
    return start_row(engine, req, TEXT)


class Failing:
    """Wraps ``StaticStep.run``: raises on the calls numbered in ``failing`` (1-based)."""

    def __init__(self, engine: Any, failing: set[int]) -> None:
        self.state = engine.loop.state
        self.inner = self.state.run
        self.failing = failing
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls in self.failing:
            raise RuntimeError("CUDA out of memory (injected)")
        return self.inner(*args, **kwargs)

    def __enter__(self) -> Failing:
        self.state.run = self
        return self

    def __exit__(self, *exc: object) -> None:
        del self.state.run


def test_a_failed_step_ends_its_rows_with_an_error_and_frees_their_slots(engine: Any) -> None:
    solo = collect(open_row(engine, seed=5))[0]
    loop = engine.loop
    with Failing(engine, {3}):
        with loop._cond:  # both arrive in the same turn, so they step together
            rows = [open_row(engine, seed=s) for s in (1, 2)]
        ends = [collect_to_end(row)[1] for row in rows]
        assert [end.reason for end in ends] == ["error", "error"]
        assert all(isinstance(end.error, RuntimeError) for end in ends)
        assert loop.wait_idle(timeout=30) and loop.free_slots == loop.slots
        # the loop goes on: a new row gets exactly the codes it gets on a fresh loop
        codes, reason = collect(open_row(engine, seed=5))
    assert reason in ("eos", "capped")
    np.testing.assert_array_equal(codes, solo)
    assert loop.health_error is None and loop.failed_steps == 0


def test_repeated_failed_steps_make_the_engine_unhealthy(engine: Any) -> None:
    with Failing(engine, set(range(1, 100))):
        for seed in range(FAILED_STEPS_UNHEALTHY):
            assert engine.health_error is None
            assert collect_to_end(open_row(engine, seed=seed))[1].reason == "error"
    assert engine.health_error is not None and "CUDA out of memory (injected)" in engine.health_error
    assert engine.loop.free_slots == engine.loop.slots


def test_an_unhealthy_engine_answers_503_on_ready_and_ping(tiny_checkpoints: dict[str, Path], engine: Any) -> None:
    from support.live_server import start_server

    live = start_server(Settings(engine="qwen3", model=str(tiny_checkpoints["custom_voice"])), engine=engine)
    try:
        assert httpx.get(f"{live.url}/ready", timeout=10).status_code == 200
        assert httpx.get(f"{live.url}/ping", timeout=10).status_code == 200
        engine.loop.health_error = "3 generation steps in a row failed: RuntimeError: CUDA out of memory"
        for path in ("/ready", "/ping"):
            reply = httpx.get(f"{live.url}{path}", timeout=10)
            assert reply.status_code == 503
            assert reply.json() == {"status": "unhealthy", "error": engine.loop.health_error}
        assert httpx.post(f"{live.url}/ping", timeout=10).status_code == 503
    finally:
        live.stop()
