"""A CPU engine lowers torch's process-wide intra-op threads to its share; the process gets them back once the last
CPU engine is closed (or a load fails), so loading and closing an engine leaves the process as it found it.

Each check runs in a fresh interpreter: in the test process the session's Qwen3 engines (``conftest``) stay open,
and while any CPU engine is open the lowered count rightly stays.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from qwen3_testing import require_qwen_tts

pytestmark = pytest.mark.qwen


def _many_threads() -> int:
    """More intra-op threads than a CPU engine's share (half the usable cores), set for this process."""
    import torch

    from speakwire.engines.qwen3.cpu_threads import usable_cores

    many = max(2, usable_cores())
    torch.set_num_threads(many)
    return many


def check_the_threads_come_back_when_the_last_cpu_engine_closes(checkpoint: str) -> None:
    import torch

    from speakwire.engines.qwen3 import load_qwen3_engine

    many = _many_threads()
    first = load_qwen3_engine(checkpoint, device="cpu", max_batch=1)
    lowered = torch.get_num_threads()
    assert lowered < many
    second = load_qwen3_engine(checkpoint, device="cpu", max_batch=1)
    first.close()
    assert torch.get_num_threads() == lowered  # the second engine still runs on its share
    second.close()
    assert torch.get_num_threads() == many


def check_a_failed_load_gives_the_threads_back(empty_dir: str) -> None:
    import torch

    from speakwire.engines.qwen3 import load_qwen3_engine

    many = _many_threads()
    try:
        load_qwen3_engine(empty_dir, device="cpu")
    except (OSError, ValueError):  # transformers: no model in this directory
        pass
    else:
        raise AssertionError("an empty directory loaded")
    assert torch.get_num_threads() == many


def check_an_engine_loaded_on_one_thread_and_closed_on_another_gives_the_threads_back(tmp: str) -> None:
    """As the server does: load on a worker thread (``asyncio.to_thread``), close on another. With OpenMP a
    thread that has run torch may answer for itself, and the closing thread here saw the count before the load
    (it built the checkpoint)."""
    import threading

    import torch
    from tiny_checkpoint import build_tiny_checkpoints

    from speakwire.engines.qwen3 import load_qwen3_engine

    many = _many_threads()
    checkpoint = str(build_tiny_checkpoints(Path(tmp))["custom_voice"])
    engines: list[object] = []
    loader = threading.Thread(target=lambda: engines.append(load_qwen3_engine(checkpoint, device="cpu", max_batch=1)))
    loader.start()
    loader.join()
    assert engines, "the engine did not load"
    engines[0].close()  # type: ignore[attr-defined]
    seen: list[int] = []
    fresh = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert seen == [many]  # a thread started after the close runs with the count from before the load


def in_fresh_interpreter(check: str, argument: str) -> None:
    here = Path(__file__).parent
    code = (f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; import test_qwen3_cpu_threads as t; "
            f"t.{check}(sys.argv[1])")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # an explicit count is left alone
    done = subprocess.run([sys.executable, "-c", code, argument], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_threads_come_back_when_the_last_cpu_engine_closes(tiny_checkpoints: dict[str, Path]) -> None:
    require_qwen_tts()
    in_fresh_interpreter("check_the_threads_come_back_when_the_last_cpu_engine_closes",
                         str(tiny_checkpoints["custom_voice"]))  # fmt: skip


def test_a_failed_load_gives_the_threads_back(tmp_path: Path) -> None:
    require_qwen_tts()
    in_fresh_interpreter("check_a_failed_load_gives_the_threads_back", str(tmp_path))


def test_an_engine_loaded_on_one_thread_and_closed_on_another_gives_the_threads_back(tmp_path: Path) -> None:
    require_qwen_tts()
    in_fresh_interpreter("check_an_engine_loaded_on_one_thread_and_closed_on_another_gives_the_threads_back",
                         str(tmp_path))  # fmt: skip
