"""Keep a CPU engine's memory bounded when every call has a different tensor size.

Why: Piper's tensors scale with the sentence (a 300-character sentence's decoder allocates a few
hundred MiB, a short one a few MiB), so no two calls ask for the same sizes. Measured with
``bench/memory_growth.py`` (two workers, random lengths, 2-core machine), three things grew:

* onnxruntime's CPU arena (``enable_cpu_mem_arena``) keeps every chunk it ever extended by, and its
  best-fit regions never merge across extensions, so mixed sizes fragment it; its memory patterns
  (``enable_mem_pattern``) are planned per input shape. ``PiperOptions.memory_arena`` turns both off
  (the default), as onnxruntime advises for dynamic shapes.
* Then glibc's malloc does the caching, and it has its own two problems: its dynamic mmap threshold
  rises to the largest freed block, so big tensors land in per-thread heaps that fragment (one arena
  per thread), and with the threshold fixed low every big tensor is a fresh ``mmap`` whose pages are
  faulted in on each call (10-15% slower on whole sentences).

So ``tune_allocator`` fixes glibc's thresholds high (big blocks are reused from the heap, as an arena
would) and caps it at two arenas, and ``MemoryReleaser`` gives the free pages back to the OS
(``malloc_trim``) at most every few seconds, cheap because most pages stay in use. Only glibc on
Linux is tuned; elsewhere both are no-ops. An operator who set ``MALLOC_ARENA_MAX`` or
``GLIBC_TUNABLES`` keeps their own settings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import time

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

MMAP_THRESHOLD_BYTES = 256 * 1024 * 1024
"""Blocks below this come from the heap and are reused; above it (beyond any Piper tensor) they are mapped."""
ARENA_MAX = 2
RELEASE_INTERVAL_S = 5.0
"""At most one ``malloc_trim`` per this many seconds: trimming per call costs ~13% (pages re-faulted)."""

_lock = threading.Lock()
_libc: ctypes.CDLL | None = None
_tuned = False


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") and hasattr(libc, "gnu_get_libc_version"):
                _libc = libc
        except OSError:
            return None
    return _libc


def tune_allocator() -> bool:
    """Set glibc's thresholds and arena cap for this process, once; False where nothing was changed."""
    global _tuned
    with _lock:
        if _tuned:
            return True
        libc = _glibc()
        if libc is None or os.environ.get("MALLOC_ARENA_MAX") or os.environ.get("GLIBC_TUNABLES"):
            return False
        ok = all(
            libc.mallopt(option, value)
            for option, value in (
                (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
                (_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES),
                (_M_ARENA_MAX, ARENA_MAX),
            )
        )
        _tuned = ok
        if not ok:
            logger.debug("mallopt refused the allocator settings; keeping glibc's defaults")
        return ok


class MemoryReleaser:
    """Returns freed heap pages to the OS at most every ``interval_s`` seconds; thread-safe, never blocks.

    Called after each piece of work: it trims when the interval has passed, else it makes sure a trim
    follows within the interval (a timer), so memory also goes back once the work stops.
    """

    def __init__(self, interval_s: float | None = None) -> None:
        self.interval_s = RELEASE_INTERVAL_S if interval_s is None else interval_s
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.releases = 0

    def maybe_release(self) -> bool:
        """Trim now if the interval has passed (True), else schedule one for when it has."""
        if _glibc() is None:
            return False
        wait = self.interval_s - (time.monotonic() - self._last)
        if wait <= 0:
            return self._release()
        with self._lock:
            if self._timer is None:
                self._timer = threading.Timer(wait, self._on_timer)
                self._timer.daemon = True
                self._timer.name = "speakwire-memory-release"
                self._timer.start()
        return False

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self._release()

    def _release(self) -> bool:
        libc = _glibc()
        if libc is None or not self._lock.acquire(blocking=False):
            return False  # another thread is trimming right now
        try:
            if time.monotonic() - self._last < self.interval_s:
                return False
            libc.malloc_trim(0)
            self._last = time.monotonic()
            self.releases += 1
            return True
        finally:
            self._lock.release()
