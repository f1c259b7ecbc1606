"""Process-wide CPU thread bookkeeping for Qwen3 on CPU: how many cores this process may use, and torch's
intra-op threads shared between the generation loop and code2wav while a CPU engine is loaded.

``torch.set_num_threads`` is process-wide, so it is counted here, once for the process, not per engine.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from typing import Any

logger = logging.getLogger(__name__)

_threads_lock = threading.Lock()
_cpu_engines = 0
"""CPU engines loaded and not yet closed (``share_cpu_threads`` / ``release_cpu_threads``)."""
_threads_before: int | None = None
"""Torch's intra-op threads before a CPU engine lowered them, until the last one closes."""


def share_cpu_threads(torch: Any) -> None:
    """On CPU devices only (the caller checks): the generation loop and code2wav run ops at the same time, from
    two threads, each with its own team of intra-op threads; give each team half the usable cores
    (``usable_cores``), so the two do not oversubscribe them.

    With torch's default (one thread per core) both teams spin on OpenMP barriers while the other holds the
    cores; on 2 cores that about doubled the loop thread's CPU per step. ``torch.set_num_threads`` is
    process-wide, so this only ever lowers the count (it never raises what someone else chose), an explicit
    ``OMP_NUM_THREADS`` is left alone, and the count lowered goes back when the last CPU engine closes
    (``release_cpu_threads``): the process that loaded an engine gets its threads back."""
    global _cpu_engines, _threads_before
    with _threads_lock:
        _cpu_engines += 1
        if "OMP_NUM_THREADS" in os.environ:
            return
        before = int(torch.get_num_threads())
        threads = min(before, max(1, usable_cores() // 2))
        if threads < before:
            torch.set_num_threads(threads)
            if _threads_before is None:
                _threads_before = before
            logger.info("qwen3: %d intra-op threads per CPU thread (the loop's and code2wav's)", threads)


def release_cpu_threads(torch: Any) -> None:
    """One CPU engine closed (or failed to load); the last puts back the count ``share_cpu_threads`` lowered.

    Unconditionally: with OpenMP, ``torch.get_num_threads`` answers for the calling thread once it has run
    torch, and the server loads on a worker thread but closes on the event loop's, which may still see the
    count from before the load; comparing with it skipped the restore."""
    global _cpu_engines, _threads_before
    with _threads_lock:
        _cpu_engines -= 1
        if _cpu_engines or _threads_before is None:
            return
        torch.set_num_threads(_threads_before)
        _threads_before = None


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
"""cgroup v2: the CPU quota of the container, ``"max 100000"`` (none) or ``"<quota> <period>"`` microseconds."""


def usable_cores(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity (``os.cpu_count`` counts the machine's, which a
    pinned process or a container does not have), at most the cgroup v2 quota (rounded up), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cpu_max)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_cpu_quota(path: str = CGROUP_CPU_MAX) -> float | None:
    """The cgroup v2 CPU quota in cores (``quota / period``), or None: no file, no quota (``max``), unreadable."""
    try:
        with open(path, encoding="ascii") as file:
            fields = file.read().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None
