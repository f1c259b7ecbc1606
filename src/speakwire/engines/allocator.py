"""Keep a CPU engine's memory bounded when every call has a different tensor size.

Why: Piper's tensors scale with the sentence (a 300-character sentence's decoder allocates a few
hundred MiB, a short one a few MiB), so no two calls ask for the same sizes. Measured with
``python -m bench.memory_growth`` (two workers, random lengths, 2-core machine), three things grew:

* onnxruntime's CPU arena (``enable_cpu_mem_arena``) keeps every chunk it ever extended by, and its
  best-fit regions never merge across extensions, so mixed sizes fragment it; its memory patterns
  (``enable_mem_pattern``) are planned per input shape. ``PiperOptions.memory_arena`` turns both off
  (the default), as onnxruntime advises for dynamic shapes.
* Then glibc's malloc does the caching, and it has its own two problems: its dynamic mmap threshold
  rises to the largest freed block, so big tensors land in per-thread heaps that fragment (one arena
  per thread), and with the threshold fixed low every big tensor is a fresh ``mmap`` whose pages are
  faulted in on each call (10-15% slower on whole sentences).

So ``tune_allocator`` fixes glibc's thresholds high (big blocks are reused from the heap, as an arena
would) and caps it at two arenas, and ``MemoryReleaser`` gives the free
pages back to the OS (``malloc_trim``) at most every few seconds, cheap because most pages stay in use. Only glibc on
Linux is tuned; elsewhere both are no-ops. An operator who set ``MALLOC_ARENA_MAX`` or
``GLIBC_TUNABLES`` keeps their own settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

LOAD_MMAP_THRESHOLD_BYTES = 128 * 1024
"""While loading (``loading``): glibc's own starting threshold, held fixed."""
MMAP_THRESHOLD_BYTES = 256 * 1024 * 1024
"""Blocks below this come from the heap and are reused; above it (beyond any Piper tensor) they are mapped."""
ARENA_MAX = 2
_ANCHOR_BYTES = 64 * 1024
"""A free this big (glibc's ``FASTBIN_CONSOLIDATION_THRESHOLD``) makes glibc consider trimming its arena's top."""
RELEASE_INTERVAL_S = 5.0
"""One ``malloc_trim`` per this many seconds of work: trimming per call costs ~13% (pages re-faulted)."""
RELEASE_BUDGET_BYTES = 48 * 1024 * 1024
"""Or sooner, once RSS has grown this much since the last trim (freed pages re-touched elsewhere in the heap)."""

_lock = threading.Lock()
_libc: ctypes.CDLL | None = None
_tuned = False
_loaders = 0
"""Open ``loading`` contexts (voices loading at once): the first lowers the threshold, the last restores it."""
_anchors: dict[int, int] = {}
"""Thread ident -> a block that thread allocated in its arena (``anchor_thread``); freed by each trim."""


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") and hasattr(libc, "gnu_get_libc_version"):
                libc.malloc.restype = ctypes.c_void_p
                libc.free.argtypes = [ctypes.c_void_p]
                _libc = libc
        except OSError:
            return None
    return _libc


def tune_allocator() -> bool:
    """Set glibc's thresholds and arena cap for this process; False where nothing was changed."""
    global _tuned
    with _lock:
        libc = _glibc()
        if libc is None or _operator_tuned():
            return False
        ok = _apply(libc)
        _tuned = ok
        if not ok:
            logger.debug("mallopt refused the allocator settings; keeping glibc's defaults")
        return ok


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """While a model loads, map every big block, so that the load's temporaries leave no holes in the heap.

    Why: loading a voice parses, splits and serializes its graph (a few hundred MiB freed once the sessions
    exist) while the sessions' long-lived weights are allocated in between. From the heap (the tuned 256 MiB
    threshold) that leaves ~250 MiB of free holes below live blocks, and later calls' tensors wander through
    them, touching fresh pages, until the next trim: RSS rose by the holes' size under load. Mapped, those
    blocks go back to the OS when freed and the weights stay out of the heap; the tuned settings come back
    when the last of the voices loading at once is done (and a ``tune_allocator`` meanwhile keeps the load's
    threshold). Only after ``tune_allocator``; untuned, glibc's dynamic threshold is left alone.
    """
    global _loaders
    libc = _glibc()
    if libc is None or not _tuned:
        yield  # glibc's own (dynamic) settings already map big blocks, or the operator's are kept
        return
    with _lock:
        _loaders += 1
        if _loaders == 1:
            libc.mallopt(_M_MMAP_THRESHOLD, LOAD_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        with _lock:
            _loaders -= 1
            if _loaders == 0:
                _apply(libc)


def anchor_thread() -> None:
    """Leave one small block of this thread's arena for the next ``trim`` to free (once per thread and trim)."""
    libc = _glibc()
    ident = threading.get_ident()
    if libc is None or not _tuned or ident in _anchors:
        return
    block = libc.malloc(_ANCHOR_BYTES)
    if block:
        with _lock:
            _anchors[ident] = block


def trim() -> None:
    """Give every arena's free pages back to the OS, the tops of the threads' heaps included.

    Why: ``malloc_trim`` releases the free chunks of every arena and the main arena's top, but never the top of a
    thread arena's heap: glibc shrinks those only when a free of at least 64 KiB in that arena finds the top past
    ``M_TRIM_THRESHOLD``, held at 256 MiB here (beyond a thread heap's 64 MiB), so it never did. The worker threads'
    last tensors stayed resident after the work stopped: +17-50 MB after a trim with the same bytes in use
    (``mallinfo2``), the RSS left after stalled clients closed (``bench/results/stalled-readers-2core/after-memory``).
    So each trim frees the block each thread left in its arena (``anchor_thread``) with the threshold at zero for
    that moment; a free goes to the arena its block came from, whichever thread frees it.
    """
    libc = _glibc()
    if libc is None:
        return
    libc.malloc_trim(0)
    with _lock:
        if not _tuned or not _anchors:
            return
        libc.mallopt(_M_TRIM_THRESHOLD, 0)
        try:
            for block in _anchors.values():
                libc.free(block)
            _anchors.clear()
        finally:
            libc.mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES)


def _operator_tuned() -> bool:
    return bool(os.environ.get("MALLOC_ARENA_MAX") or os.environ.get("GLIBC_TUNABLES"))


def _apply(libc: ctypes.CDLL) -> bool:
    """The tuned settings, with the load's threshold while a ``loading`` is open; called under ``_lock``."""
    return all(
        libc.mallopt(option, value)
        for option, value in (
            (_M_MMAP_THRESHOLD, LOAD_MMAP_THRESHOLD_BYTES if _loaders else MMAP_THRESHOLD_BYTES),
            (_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES),
            (_M_ARENA_MAX, ARENA_MAX),
        )
    )


class MemoryReleaser:
    """Returns freed heap pages to the OS; thread-safe, never blocks.

    Called after each piece of work (a decoded window, a sentence). It trims when the interval has passed
    since the last trim, or sooner when the process's RSS has grown ``budget_bytes`` past what it was
    right after the last trim: glibc places each call's tensors in whatever free chunks fit, so between
    trims successive calls touch fresh pages of the heap's free space, and RSS climbed to 2-4x one call's
    working set on a long request (``python -m bench.stalled_readers``). A timer makes sure one more trim follows
    ``interval_s`` after the last call, so memory also goes back once the work stops.
    """

    def __init__(self, interval_s: float | None = None, budget_bytes: int | None = None) -> None:
        self.interval_s = RELEASE_INTERVAL_S if interval_s is None else interval_s
        self.budget_bytes = RELEASE_BUDGET_BYTES if budget_bytes is None else budget_bytes
        self._last = time.monotonic()
        self._last_call = self._last
        self._floor = _rss_bytes()
        """RSS right after the last trim: the budget counts from here."""
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False
        """After ``close``: no timer is armed again (calls still trim when due)."""
        self.releases = 0

    def maybe_release(self) -> bool:
        """Trim now if the interval has passed or RSS is over budget (True), else make sure a trim follows."""
        if _glibc() is None:
            return False
        anchor_thread()  # this (worker) thread's arena gets trimmed too
        now = time.monotonic()
        self._last_call = now
        due = now - self._last >= self.interval_s
        over = bool(self.budget_bytes) and _rss_bytes() - self._floor > self.budget_bytes
        if (due or over) and self._release(force=True):
            return True
        with self._lock:
            if self._timer is None and not self._closed:
                self._arm(self.interval_s)
        return False

    def close(self) -> None:
        """Cancel the pending trim and arm none again: no timer thread outlives this (the engine is closing)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join(timeout=5)  # one that already fired finishes its trim and, closed, arms nothing

    def _arm(self, wait: float) -> None:
        self._timer = threading.Timer(wait, self._on_timer)
        self._timer.daemon = True
        self._timer.name = "speakwire-memory-release"
        self._timer.start()

    def _on_timer(self) -> None:
        idle = time.monotonic() - self._last_call
        with self._lock:
            self._timer = None
            if self._closed:
                return
            if idle < self.interval_s:  # work went on: wait for it to stop (trims meanwhile come from calls)
                self._arm(self.interval_s - idle)
                return
        self._release(force=True)

    def _release(self, *, force: bool = False) -> bool:
        libc = _glibc()
        if libc is None or not self._lock.acquire(blocking=False):
            return False  # another thread is trimming right now
        try:
            if not force and time.monotonic() - self._last < self.interval_s:
                return False
            trim()
            self._last = time.monotonic()
            self._floor = _rss_bytes()
            self.releases += 1
            return True
        finally:
            self._lock.release()


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int:
    """This process's resident set (one read of ``/proc/self/statm``); 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0
