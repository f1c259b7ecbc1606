"""Hooks a pipeline's owner (the server's metrics) sets to hear how its utterances go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from speakwire.synthesis.events import Usage


@dataclass(slots=True)
class PipelineObserver:
    """Hooks for metrics; each is optional and called on the event loop."""

    on_first_audio: Callable[[float], None] | None = None
    on_segment: Callable[[float, float], None] | None = None
    """(synthesis wall seconds, audio seconds)."""
    on_underrun: Callable[[], None] | None = None
    on_cancel: Callable[[], None] | None = None
    on_finish: Callable[[Usage], None] | None = None
