"""A real-time player simulated at the client: when would the listener have heard silence?

Why at the client: the server's own ``speakwire_underruns_total`` only sees when it *sent* audio; the
listener hears gaps caused by everything after that too (socket buffers, the event loop of either side,
the client's own load). So each benchmark stream replays its audio arrivals through this clock.

The model: playback starts at the first audio byte and runs at real time. Every arrival appends its
audio to the buffer. An arrival after the buffer ran dry is an *underrun*: the listener heard a stall
of ``arrival - buffer_end`` seconds, and playback resumes at the arrival. No I/O here, so it is tested
with synthetic arrival times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class PlaybackSimulator:
    """Feed ``(arrival time, byte count)`` in arrival order; read underruns, stall time and audio length.

    Args:
        bytes_per_second: Audio bytes that play in one second (``sample_rate * 2`` for mono s16le).
        skip_bytes: Leading bytes that are not audio (a WAV header): they count towards the first byte
            (time to first byte) but add no playback time.
        jitter_s: A jitter buffer: playback starts this long after the first audio byte (as real players
            do, 50-200 ms), so lateness up to this much is never heard. 0: play at the first byte.
    """

    bytes_per_second: float
    skip_bytes: int = 0
    jitter_s: float = 0.0
    first_arrival: float | None = None
    buffer_end: float | None = None
    """When the audio received so far will have finished playing (None before the first audio)."""
    underruns: int = 0
    stall_s: float = 0.0
    audio_s: float = 0.0
    bytes_received: int = 0
    stall_positions_s: list[float] = field(default_factory=list)
    """Where in the audio each stall was heard (seconds of audio played before it), to tell stalls at
    segment joins from stalls inside a segment (e.g. between decoder windows)."""

    def __post_init__(self) -> None:
        if self.bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")

    def feed(self, at: float, nbytes: int) -> None:
        """Record ``nbytes`` arriving at time ``at`` (seconds, any monotonic clock)."""
        if nbytes <= 0:
            return
        if self.first_arrival is None:
            self.first_arrival = at
        self.bytes_received += nbytes
        header_left = max(0, self.skip_bytes - (self.bytes_received - nbytes))
        audio_bytes = nbytes - min(nbytes, header_left)
        if audio_bytes <= 0:
            return
        duration = audio_bytes / self.bytes_per_second
        if self.buffer_end is None:
            self.buffer_end = at + self.jitter_s + duration
        elif at > self.buffer_end:
            self.underruns += 1
            self.stall_s += at - self.buffer_end
            self.stall_positions_s.append(self.audio_s)
            self.buffer_end = at + duration
        else:
            self.buffer_end += duration
        self.audio_s += duration


def simulate(
    arrivals: Iterable[tuple[float, int]], bytes_per_second: float, *, skip_bytes: int = 0, jitter_s: float = 0.0
) -> PlaybackSimulator:
    """Replay a whole list of ``(arrival time, byte count)`` through a fresh simulator."""
    player = PlaybackSimulator(bytes_per_second, skip_bytes=skip_bytes, jitter_s=jitter_s)
    for at, nbytes in arrivals:
        player.feed(at, nbytes)
    return player
