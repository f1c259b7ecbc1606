"""What a benchmark measures of a process (a server under test, or itself): CPU time and resident memory.

Standard library only (psutil when installed), so a benchmark that measures its own memory imports nothing
that would weigh on the figure.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


class CpuMeter:
    """CPU seconds a process used between ``start()`` and ``stop()``, as % of the whole machine.

    Uses psutil when installed (a bench-only dependency); without it every reading is None.
    """

    def __init__(self, pid: int | None) -> None:
        self._process = None
        self._cores = os.cpu_count() or 1
        self._begin: tuple[float, float] | None = None
        if pid is None:
            return
        try:
            import psutil
        except ImportError:
            return
        with contextlib.suppress(psutil.Error):
            self._process = psutil.Process(pid)

    def _cpu_seconds(self) -> float | None:
        if self._process is None:
            return None
        try:
            times = self._process.cpu_times()
        except Exception:  # the process is gone: no reading rather than a failed benchmark
            return None
        return float(times.user + times.system)

    def start(self) -> None:
        cpu = self._cpu_seconds()
        self._begin = None if cpu is None else (time.perf_counter(), cpu)

    def stop(self) -> float | None:
        cpu = self._cpu_seconds()
        if cpu is None or self._begin is None:
            return None
        wall = time.perf_counter() - self._begin[0]
        return 100.0 * (cpu - self._begin[1]) / wall / self._cores if wall > 0 else None


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), from ``/proc``; 0 where absent."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int | str = "self") -> float:
    """Resident memory (``VmRSS``) of process ``pid`` in MiB, from ``/proc`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
