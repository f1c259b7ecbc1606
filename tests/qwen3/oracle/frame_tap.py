"""Per-frame codes out of qwen-tts while it generates, and a way to stop it between frames.

qwen-tts 0.1.1 has no streaming API: ``generate_*`` return audio only when the
utterance is complete, and extra kwargs such as ``streamer`` or
``stopping_criteria`` are silently dropped before they reach the talker's
``generate``. What it does expose is the talker's ``forward``: at every decode
step its output's ``hidden_states[1]`` holds the ``(B, 16)`` codes of the frame
consumed at that step (``None`` at prefill). So we wrap that ``forward`` once, at
load time, and route each frame to the *generation session attached to the
calling thread*; threads with no session (e.g. the package's own non-streaming
path) pass straight through.

The wrapper also enforces a session's stop conditions *before* each step, by
raising ``GenerationStopped`` out of ``generate``: a cancelled request or a gone
consumer stops within one frame step, and a runaway utterance stops at its frame
budget. ``functools.wraps`` matters: HF ``generate`` validates model kwargs
against ``inspect.signature(forward)``, which follows ``__wrapped__``.

In a streaming session the package's final full decode is skipped as well (the
audio was already decoded incrementally), so the last chunk is not held back by
a redundant decode of the whole utterance.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class GenerationStopped(Exception):
    """Raised inside ``generate`` to end it early; ``reason`` is ``"cancelled"`` or ``"capped"``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)
class GenerationSession:
    """One utterance being generated: where its frames go and when it must stop.

    Args:
        max_frames: Frame budget; consuming frame ``max_frames + 1`` marks the session capped.
        frames: Receives each frame's ``(Q,)`` codes; ``None`` for a session that only counts.
        stop_at_cap: Raise at the cap (streaming) rather than let ``max_new_tokens`` end it.
        skip_final_decode: Make the package's final ``speech_tokenizer.decode`` a no-op.
        cancelled: Events that, when any is set, stop generation before the next step.
    """

    max_frames: int
    frames: queue.SimpleQueue[Any] | None = None
    stop_at_cap: bool = True
    skip_final_decode: bool = False
    cancelled: tuple[threading.Event, ...] = ()
    frame_count: int = 0
    capped: bool = False
    stopped_by: str | None = None
    error: BaseException | None = field(default=None, repr=False)

    def before_step(self, *, decode_step: bool) -> None:
        if any(event.is_set() for event in self.cancelled):
            raise GenerationStopped("cancelled")
        if decode_step and self.frame_count >= self.max_frames:
            # This step would consume frame max_frames + 1, so the token before it was not EOS.
            self.capped = True
            if self.stop_at_cap:
                raise GenerationStopped("capped")

    def on_frame(self, codes: Any) -> None:
        self.frame_count += 1
        if self.frames is not None and self.frame_count <= self.max_frames:
            self.frames.put(codes)


class FrameTap:
    """Wraps one loaded ``Qwen3TTSModel`` so sessions attached to a thread see its frames."""

    def __init__(self, tts: Any) -> None:
        self._local = threading.local()
        self._talker = tts.model.talker
        self._tokenizer = tts.model.speech_tokenizer
        self._original_forward = self._talker.forward
        self._original_decode = self._tokenizer.decode
        self._talker.forward = self._wrap_forward(self._original_forward)
        self._tokenizer.decode = self._wrap_decode(self._original_decode)

    @contextlib.contextmanager
    def attach(self, session: GenerationSession) -> Iterator[GenerationSession]:
        """Route frames generated on this thread to ``session`` for the duration of the block."""
        self._local.session = session
        try:
            yield session
        finally:
            self._local.session = None

    def remove(self) -> None:
        """Restore the model's original methods."""
        self._talker.forward = self._original_forward
        self._tokenizer.decode = self._original_decode

    def _session(self) -> GenerationSession | None:
        return getattr(self._local, "session", None)

    def _wrap_forward(self, original: Any) -> Any:
        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            session = self._session()
            if session is None:
                return original(*args, **kwargs)
            embeds = kwargs.get("inputs_embeds")
            # Same test as the talker's own forward: a multi-position embedding input is the prefill.
            session.before_step(decode_step=not (embeds is not None and embeds.shape[1] > 1))
            output = original(*args, **kwargs)
            codes = output.hidden_states[1]
            if codes is not None:
                session.on_frame(codes[0].detach().clone())
            return output

        return forward

    def _wrap_decode(self, original: Any) -> Any:
        @functools.wraps(original)
        def decode(*args: Any, **kwargs: Any) -> Any:
            session = self._session()
            if session is not None and session.skip_final_decode:
                return [], int(self._tokenizer.get_output_sample_rate())
            return original(*args, **kwargs)

        return decode
