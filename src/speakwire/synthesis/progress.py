"""An utterance's playback clock: when its listener runs out of audio, hence when its next work must start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from speakwire.pacing import WorkCosts, first_segment_key, refill_key


@dataclass(slots=True)
class Progress:
    """Playback bookkeeping, used to order this utterance's work against others'."""

    created_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    """When the first text arrived."""
    first_audio_at: float | None = None
    playback_end: float | None = None
    """When the client will have played all audio sent so far (real-time playback from the first chunk)."""
    segment_submitted_at: float = 0.0
    produced_end: float | None = None
    """The worker's own view of ``playback_end``, updated the moment it hands audio over (the loop's view
    lags by a callback), so it can decide to yield its worker without waiting for the loop."""

    def note_produced(self, duration_s: float) -> None:
        """A worker handed over ``duration_s`` of audio (runs on the worker)."""
        now = time.monotonic()
        end = self.produced_end
        self.produced_end = (now if end is None else max(now, end)) + duration_s

    def latest_start(self, costs: WorkCosts, next_chunk_cost_s: float | None = None) -> float:
        """Latest start (``pacing``) of this utterance's next work: the scheduler's ordering key."""
        end = self.produced_end if self.produced_end is not None else self.playback_end
        complete = self.segment_submitted_at or self.started_at or self.created_at
        if end is None or end < complete:
            # No audio yet, or the listener already heard it all while the client paused its text: this is
            # first audio again, not a refill already seconds late (which would overtake every real refill).
            return first_segment_key(complete, costs)
        return refill_key(end, costs.first_chunk_s if next_chunk_cost_s is None else next_chunk_cost_s)
