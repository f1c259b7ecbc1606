"""A bounded LRU of voice-clone prompts, so a reference clip is encoded once, not per request.

Building a clone prompt runs the speech tokenizer's encoder over the reference
audio and the ECAPA speaker encoder over its mel spectrogram: tens of
milliseconds on a GPU, seconds on a CPU, and the same work every time a client
re-sends the same clip (which streaming clients do on every request). The key is
a SHA-256 over everything the prompt depends on, so equal input means an equal
prompt: the 24 kHz float32 samples, the transcript (irrelevant in x-vector-only
mode, so left out there), the mode, and the model.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from speakwire.audio.chunk import Float32Array

T = TypeVar("T")


def prompt_key(samples: Float32Array, ref_text: str | None, x_vector_only_mode: bool, model: str) -> str:
    """SHA-256 hex digest identifying one clone prompt."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(samples, dtype=np.float32).tobytes())
    for part in ("" if x_vector_only_mode else (ref_text or ""), str(bool(x_vector_only_mode)), model):
        digest.update(b"\x00")
        digest.update(part.encode("utf-8"))
    return digest.hexdigest()


class PromptCache(Generic[T]):
    """Thread-safe LRU mapping ``prompt_key`` → prompt, with hit/miss counters.

    ``capacity`` 0 disables caching (every lookup is a miss and nothing is kept).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("prompt cache capacity must be >= 0")
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get_or_create(self, key: str, create: Callable[[], T]) -> T:
        """The cached prompt for ``key``, or ``create()``'s result, which is then cached."""
        with self._lock:
            if key in self._items:
                self.hits += 1
                self._items.move_to_end(key)
                return self._items[key]
            self.misses += 1
        value = create()  # outside the lock: encoding is slow, lookups of other keys must not wait
        if self.capacity:
            with self._lock:
                self._items[key] = value
                self._items.move_to_end(key)
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
