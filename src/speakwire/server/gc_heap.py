"""Keep Python's garbage collector from stopping every stream to walk the loaded model.

A loaded engine is hundreds of thousands of long-lived Python objects that are never garbage: torch
modules and parameters, transformers configs, the tokenizer, the web stack (measured after warm-up:
484k objects with the tiny Qwen3 model, 49k with Piper). CPython's full collection walks all of them
with the GIL held, whenever the objects that survived younger collections reach a quarter of their
number: 290-320 ms per pause with Qwen3 loaded and 22-26 ms with Piper, during which the generation
loop, code2wav and the event loop all stand still (a one-stream Qwen3 request's first audio went from
60 ms to 380 ms when one landed in it). ``gc.freeze()`` once the engine is warm moves them into the
permanent generation, which collections skip: a full collection then takes well under a millisecond
and sees only what requests made since.

``thaw`` undoes it before the engine is released, so that a closed engine's reference cycles are
collected again (a server stopped and started in one process, as the tests do, does not keep the
old model). Both act on the whole process: with two servers in one process (tests only), the first
to stop thaws the other's heap too, which costs its collections time, never memory. What was alive
at the freeze and becomes garbage in a cycle later (a keep-alive connection open at start-up) waits
for the thaw: a few objects, bounded.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from future collections; the count frozen."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("gc: %d start-up objects frozen (%.0f ms); collections skip them", frozen,
                (time.perf_counter() - started) * 1e3)  # fmt: skip
    return frozen


def thaw() -> None:
    """Make the frozen objects collectable again (before releasing the engine they belong to)."""
    gc.unfreeze()
