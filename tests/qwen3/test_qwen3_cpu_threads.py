"""A CPU engine lowers torch's process-wide intra-op threads to its share; the process gets them back once the last
CPU engine is closed (or a load fails), so loading and closing an engine leaves the process as it found it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qwen3_testing import require_qwen_tts

from speakwire.engines.qwen3.engine import usable_cores

pytestmark = pytest.mark.qwen


@pytest.fixture
def many_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """More intra-op threads than a CPU engine's share (half the usable cores), restored afterwards."""
    require_qwen_tts()
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # an explicit count is left alone by the engine
    session = torch.get_num_threads()
    many = max(2, usable_cores())
    torch.set_num_threads(many)
    yield many
    torch.set_num_threads(session)


def test_the_threads_come_back_when_the_last_cpu_engine_closes(
    tiny_checkpoints: dict[str, Path], many_threads: int
) -> None:
    import torch

    from speakwire.engines.qwen3 import load_qwen3_engine

    checkpoint = str(tiny_checkpoints["custom_voice"])
    first = load_qwen3_engine(checkpoint, device="cpu", max_batch=1)
    second = None
    try:
        lowered = torch.get_num_threads()
        assert lowered < many_threads
        second = load_qwen3_engine(checkpoint, device="cpu", max_batch=1)
        first.close()
        assert torch.get_num_threads() == lowered  # the second engine still runs on its share
        second.close()
        assert torch.get_num_threads() == many_threads
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_failed_load_gives_the_threads_back(tmp_path: Path, many_threads: int) -> None:
    import torch

    from speakwire.engines.qwen3 import load_qwen3_engine

    with pytest.raises((OSError, ValueError)):  # transformers: no model in this directory
        load_qwen3_engine(str(tmp_path), device="cpu")
    assert torch.get_num_threads() == many_threads


def test_an_engine_loaded_on_one_thread_and_closed_on_another_gives_the_threads_back(
    tiny_checkpoints: dict[str, Path], many_threads: int
) -> None:
    """As the server does: load on a worker thread (``asyncio.to_thread``), close on the event loop's. With
    OpenMP each thread that ran torch answers for itself, and the closing thread saw the count before the load."""
    import threading

    import torch

    from speakwire.engines.qwen3 import load_qwen3_engine

    checkpoint = str(tiny_checkpoints["custom_voice"])
    engines: list[object] = []
    loader = threading.Thread(target=lambda: engines.append(load_qwen3_engine(checkpoint, device="cpu", max_batch=1)))
    loader.start()
    loader.join()
    assert engines, "the engine did not load"
    engine = engines[0]
    engine.close()  # type: ignore[attr-defined]
    seen: list[int] = []
    fresh = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert seen == [many_threads]  # a thread started after the close runs with the count from before the load
