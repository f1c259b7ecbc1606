"""The encode pool: a few threads that run codec calls for the event loop and hand each result straight back.

``ThreadPoolExecutor.submit`` + ``asyncio.wrap_future`` cost the loop two futures chained both ways per call, and
a chunk of MP3 makes one such round trip (issue 27 measured the MP3 utterance's loop CPU against the per-format
code it replaced). Here a call is one ``asyncio`` future the loop made: the job goes on a ``SimpleQueue``, a pool
thread runs it and settles the future with one ``call_soon_threadsafe``.

A job whose future was cancelled before a thread took it is skipped; one cancelled while it runs finishes (a thread
cannot be stopped), and ``Job.finished`` says when, so the caller can keep one encoder to one thread at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

POOL_THREADS = min(4, os.cpu_count() or 1)
"""Threads shared by every stream of the process: encoding is ~2 % of a core per real-time stream."""
THREAD_NAME = "speakwire-encode"
"""Its threads are ``speakwire-encode_0``, ``_1``, ...: named as a ``ThreadPoolExecutor``'s are (the role they took
over), so tools that count a pool's threads against its bound count these too."""


class Job(Generic[T]):
    """One call on the pool: ``future`` (the loop's) gets its outcome; ``finished`` is set once it has run or been
    skipped."""

    __slots__ = ("args", "call", "finished", "future", "loop")

    def __init__(self, call: Callable[..., T], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.args = args
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.finished = threading.Event()


_jobs: queue.SimpleQueue[Job[Any]] = queue.SimpleQueue()
_threads: list[threading.Thread] = []
_threads_lock = threading.Lock()


def submit(call: Callable[..., T], *args: Any) -> Job[T]:
    """Run ``call(*args)`` on a pool thread; await ``.future`` on the running loop for its result or error.
    Cancelling that await skips the call if no thread has taken it yet."""
    job = Job(call, args, asyncio.get_running_loop())
    if len(_threads) < POOL_THREADS:
        _start_threads()
    _jobs.put(job)
    return job


def _start_threads() -> None:
    with _threads_lock:
        while len(_threads) < POOL_THREADS:
            thread = threading.Thread(target=_work, name=f"{THREAD_NAME}_{len(_threads)}", daemon=True)
            thread.start()
            _threads.append(thread)


def _work() -> None:
    while True:
        job = _jobs.get()
        if job.future.cancelled():  # its caller gave up before any thread took it
            job.finished.set()
            continue
        try:
            outcome: tuple[bool, Any] = (True, job.call(*job.args))
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome = (False, exc)
        job.finished.set()
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            job.loop.call_soon_threadsafe(_settle, job.future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():  # cancelled while the call ran
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
