"""N workers released at the same instant, and the wall time until the last one is done.

The engine-level benchmarks (Piper threads, Qwen3 streams, concurrent HTTP requests) all start their
workers together, as a burst of clients arrives, and time the level from that instant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def together(count: int, work: Callable[[int], None], *, name: str = "bench") -> float:
    """Run ``work(0)`` … ``work(count - 1)`` on ``count`` threads released at once; wall seconds until all return.

    Raises:
        BaseException: The first exception a worker raised, once every worker has returned.
    """
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait()
        try:
            work(index)
        except BaseException as exc:  # re-raised in the caller's thread, after the others finished
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"{name}-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return wall
