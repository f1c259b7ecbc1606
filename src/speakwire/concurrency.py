"""N workers released at the same instant, and the wall time until the last one is done.

A burst of clients arriving together is the case both the server's warm-up capacity probe
(``server.capacity``) and the engine-level benchmarks measure, so both start their workers with this one
barrier and time from the instant it opens. It lives outside ``bench`` because the server may not import
benchmark code.
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
