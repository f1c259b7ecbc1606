"""When each piece of engine work must start so that no listener hears a gap: least-laxity ordering.

The scheduler hands a free worker the job with the earliest *key*. Ordering by when audio is due (the
older rule: a first segment due at once, a later one when the listener's buffer runs out) ignores what
making that audio costs. A young stream whose next decoder window takes 0.2 s, with 0.3 s buffered,
must start within 0.1 s; a new stream's first segment, due "now" by that rule, overtook it, and the
young stream stalled about 0.8 s into its reply (the open-loop benchmark's stalls at 70-90% load sat
right after the first two windows of a first segment).

So a job's key is its *latest start*: the instant it must start for its audio to arrive on time,

* a stream's first segment: ``FIRST_AUDIO_SLACK_S`` after its text was complete, minus the measured cost
  of a first chunk: a new listener may wait that long for a stream that is about to run dry;
* a later segment, or a segment continuing after it gave its worker away: when the listener's buffered
  audio runs out, minus the cost of its next chunk and ``DELIVERY_MARGIN_S``.

A running segment gives its worker away between chunks only to work whose key is earlier than its own
next chunk's (``should_yield``), so nobody is preempted by work that could have waited.

Costs are measured on the running server (contention included) as moving averages: the time to a
first chunk of a frame-streamed segment, and how much longer each chunk takes than the one before it.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_AUDIO_SLACK_S = 0.15
"""How long a new stream's first audio may wait behind streams that would otherwise run dry."""
DELIVERY_MARGIN_S = 0.05
"""Audio should reach the listener this long before its buffer runs out (event loop, socket, jitter)."""
NEXT_CHUNK_GROWTH = 2.0
"""A frame-streamed segment's next chunk costs up to this many times its last one (windows double)."""
DEFAULT_FIRST_CHUNK_S = 0.1
"""Cost of a first chunk before any was measured (a clause on one core of a laptop)."""


@dataclass(slots=True)
class WorkCosts:
    """Moving averages of what the engine's work costs on this machine right now."""

    first_chunk_s: float = DEFAULT_FIRST_CHUNK_S
    """Seconds from a latency-critical segment's start on a worker to its first chunk."""
    _measured: bool = False

    def observe_first_chunk(self, seconds: float) -> None:
        if not self._measured:
            self.first_chunk_s, self._measured = seconds, True
        else:
            self.first_chunk_s = 0.8 * self.first_chunk_s + 0.2 * seconds


def first_segment_key(text_complete_at: float, costs: WorkCosts) -> float:
    """Latest start of a stream's first segment whose text was complete at ``text_complete_at``.

    Never before that instant: on a machine whose first chunk costs more than the slack, the work would
    otherwise look late the moment it exists, and admission would refuse every new stream.
    """
    return text_complete_at + max(0.0, FIRST_AUDIO_SLACK_S - costs.first_chunk_s)


def refill_key(playback_end: float, next_chunk_s: float) -> float:
    """Latest start of work whose first audio, costing ``next_chunk_s``, must play from ``playback_end``."""
    return playback_end - next_chunk_s - DELIVERY_MARGIN_S


def next_chunk_s(last_chunk_s: float) -> float:
    """Expected cost of a running segment's next chunk, from what its last one cost."""
    return NEXT_CHUNK_GROWTH * last_chunk_s


def should_yield(own_next_key: float, earliest_waiting_key: float | None, now: float) -> bool:
    """Give the worker away only to work that must start before this segment's own next chunk.

    Not when that chunk is already due itself: between two late jobs a switch only moves the gap from
    one listener to the other (in an overload burst it doubled the stalls), and costs the running one.
    """
    return earliest_waiting_key is not None and earliest_waiting_key < own_next_key and own_next_key > now
