"""Capacity re-estimated from the work the server really runs, and the admission limit that follows it.

The warm-up measures the engine once, in a few seconds, with every worker making the same short reply
(``server.capacity``). On a shared 2-core VM that one figure moved between 10.6 and 15.3 real-time streams
from run to run, and once said 6.49 while four long streams sustained 13.9 audio seconds per second: a
server sized by it refused 11 of 64 streams at 70% of what it could do (issue 31). So the warm-up is only
where the estimate starts; from then on it follows what the workers actually do.

A *window* is what happened between two reads (admission reads before every new stream, ``/ready`` and
``/metrics`` on each request): the audio the utterances made, the seconds the engine's threads were busy,
and what hurt listeners (underruns, work that started late for its listener). Windows add up until they
hold ``MIN_SAMPLE_AUDIO_S`` of audio, so a few short utterances do not make a sample of their own, and idle
time is never in one (only time during which some thread was busy counts). Each sample is the throughput
the engine would have with every worker busy, in real-time streams:

    audio seconds / seconds during which some thread was busy / min(1, busy threads on average / workers)

which is the measured throughput itself when every worker was busy, and a linear extrapolation from fewer
busy workers (one engine call uses one core here, so it scales while there are cores). A sample taken with
at least half the workers busy (``LOADED_SHARE``) moves the estimate ``SAMPLE_WEIGHT`` of the way to itself, a
quieter one less (in proportion to the share busy), and one sample moves it by at most ``MAX_STEP`` either
way, so a noisy window or an outlier nudges it instead of setting it. The audio is
counted per engine chunk as the workers make it (``Scheduler.count_audio``), beside their busy time: audio
that a barge-in or a cancel throws away cost the same compute as audio that was heard.

Without a warm-up figure (``--no-warmup``) there is nothing to bound the first sample by: a made-up start
would be wrong by the factor it claims to bound (the default limit of 64 implies ~71 real-time streams, a
2-core VM does ~12). So the first sample sets the figure, as the warm-up's one measurement would, but only a
sample taken with at least half the workers busy (``LOADED_SHARE``: extrapolated at most twofold); samples
from a quieter server are set aside until then, and the default limit holds meanwhile. Every later sample
is bounded by ``MAX_STEP``.

What listeners hear corrects the limit, not the measurement, and only what they hear while the server is
loaded: a sample taken with at least half the workers busy (``LOADED_SHARE``) that has an underrun or a late
start multiplies ``correction`` by ``HURT_FACTOR`` (down to ``MIN_CORRECTION``), and a clean one adds
``RECOVERY_STEP`` back, up to 1. A sample from a half-idle server changes neither: its hurt is not for want
of workers (a client that paused its text, a blip of the VM), and the limit is about a full server. Nor
does hurt while the limit is already one stream: there is nothing to shed, and a lone stream that stalls
stalls for the machine's reasons (session 12's loaded VM: a correction of 0.6 from six such samples, which
only delayed the recovery once the estimate rose). A
reader that parks its stream (flow control) is not hurt either: its work is submitted anew when the reader
comes back (``SegmentDriver._continue_segment``), so neither its wait nor the playback that ran out
meanwhile counts. The limit is

    streams = floor(estimate x ADMISSION_SHARE x correction), within 1 .. MAX_STREAMS

An operator's ``--max-streams`` and an engine's own limit (Qwen3's KV slots) still win; the estimate is then
only shown. ``--admission fixed`` keeps the warm-up's limit for the server's life (the behaviour before, for
A/B runs), the estimate still shown beside it. Past the limit new streams are refused (429 / 1013 with
Retry-After), as are new streams while queued work is already late (``synthesis.pipeline``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speakwire.scheduler import WorkUsage
from speakwire.server.capacity import ADMISSION_SHARE, MAX_STREAMS, Capacity
from speakwire.settings import ADMISSION_MODES, Admission

MIN_SAMPLE_AUDIO_S = 4.0
"""Audio seconds a sample must hold (windows add up until they do): less is a word or two, mostly overhead."""
SAMPLE_WEIGHT = 0.5
"""How far one sample taken with at least half the workers busy moves the estimate towards itself (an EWMA's
alpha). Was 0.25, scaled down by the share of workers busy: in the open loop of session 12
(bench/results/admission-live-2core/s12) a warm-up on a loaded VM said 0.66 real-time streams (1 admitted),
the work that followed said ~6.5, and after 21 samples (220 s of audio) the estimate was 1.99, still 1
admitted. One stream on two workers is a share of 0.5, so each sample weighed 0.125 and moved the estimate
by at most 6%, and the low limit kept it at one stream. At 0.5 from half busy, a sample at the ``MAX_STEP``
bound moves it 25%: ten samples (40 s of audio) out of a tenfold error. The price is noise: the figure's
spread is ~0.58 of a sample's instead of ~0.38 (an EWMA's sqrt(a / (2 - a))), ~10% on this VM."""
MAX_STEP = 1.5
"""One sample moves the estimate by at most this factor up or down."""
MIN_REAL_TIME_STREAMS = 0.5
"""The estimate never goes below this (one stream is always admitted: the limit is at least 1)."""
HURT_FACTOR = 0.85
"""A sample during which a listener was hurt (underrun, late start) multiplies the correction by this."""
RECOVERY_STEP = 0.05
"""A clean sample taken with at least half the workers busy adds this back to the correction."""
MIN_CORRECTION = 0.5
"""The correction never takes the limit below this share of what the measurement allows."""
LOADED_SHARE = 0.5
"""Share of the workers busy (on average while any was) from which a sample says something about the limit:
it may lower the correction (hurt) or raise it back (clean), and, with no figure yet, set the first figure."""


@dataclass(frozen=True, slots=True)
class WorkWindow:
    """What the server did between two reads."""

    usage: WorkUsage
    """The engine threads' busy time, late starts and audio (``Scheduler.usage``, the difference of two)."""
    underruns: int = 0
    """Audio that reached a listener after the audio before it had run out (``Utterance``'s playback clock)."""

    @property
    def audio_s(self) -> float:
        """Audio the workers made (``WorkUsage.audio_s``: per engine chunk, so cancelled audio counts too)."""
        return self.usage.audio_s

    def __add__(self, other: WorkWindow) -> WorkWindow:
        a, b = self.usage, other.usage
        usage = WorkUsage(
            a.busy_thread_s + b.busy_thread_s, a.busy_s + b.busy_s, a.late_starts + b.late_starts, a.audio_s + b.audio_s
        )
        return WorkWindow(usage, self.underruns + other.underruns)

    @property
    def hurt(self) -> bool:
        """A listener heard a gap, or work started late for its listener."""
        return self.underruns > 0 or self.usage.late_starts > 0


EMPTY_WINDOW = WorkWindow(WorkUsage())


class LiveCapacity:
    """The real-time streams this server sustains, re-estimated from each window of work, and its limit.

    No I/O and no clock: it is fed windows (``observe``), so it does the same thing for the same windows.
    """

    def __init__(
        self,
        start: Capacity,
        *,
        admission: Admission = "live",
        min_sample_audio_s: float = MIN_SAMPLE_AUDIO_S,
    ) -> None:
        """``start``: the limit and figure known at start-up (warm-up, operator, engine or default)."""
        if admission not in ADMISSION_MODES:
            raise ValueError(f"admission must be one of {', '.join(ADMISSION_MODES)}, not {admission!r}")
        self.start = start
        self.admission: Admission = admission
        self.workers = max(1, start.workers)
        self.min_sample_audio_s = min_sample_audio_s
        self.real_time_streams: float | None = start.audio_s_per_s
        """The estimate: audio seconds per wall second with every worker busy (None: nothing measured yet)."""
        self.correction = 1.0
        """Share of the measured limit admitted, lowered when listeners are hurt (``HURT_FACTOR``)."""
        self.samples = 0
        """Samples folded into the estimate since start-up."""
        self.hurt_samples = 0
        """Samples during which a listener was hurt."""
        self.audio_s = 0.0
        self.busy_s = 0.0
        """Audio and busy time of every sample so far (what the estimate is made of)."""
        self._pending = EMPTY_WINDOW

    # ----- what the server does -----------------------------------------------------------

    def observe(self, window: WorkWindow) -> bool:
        """Add a window; returns True when it completed a sample (the estimate or correction may have moved)."""
        if window.audio_s < 0 or window.usage.busy_thread_s < 0 or window.usage.busy_s < 0:
            raise ValueError(f"a window of work cannot be negative: {window}")
        pending = self._pending = self._pending + window
        if pending.audio_s < self.min_sample_audio_s or pending.usage.busy_s <= 0:
            return False  # too little to tell yet (short utterances, or idle): hold
        self._pending = EMPTY_WINDOW
        return self._fold(pending)

    def _fold(self, sample: WorkWindow) -> bool:
        """Fold a sample in; False when it was set aside (a first figure from a half-idle server)."""
        usage = sample.usage
        busy_share = min(1.0, usage.busy_thread_s / usage.busy_s / self.workers)
        value = sample.audio_s / usage.busy_s / max(busy_share, 1e-9)
        current = self.real_time_streams
        loaded = busy_share >= LOADED_SHARE
        if current is None:
            if not loaded:
                return False  # no figure yet, and this one is extrapolated more than twofold: not the first
            estimate = value
        else:
            value = min(max(value, current / MAX_STEP), current * MAX_STEP)
            weight = SAMPLE_WEIGHT * min(1.0, busy_share / LOADED_SHARE)
            estimate = current + weight * (value - current)
        self.real_time_streams = min(max(estimate, MIN_REAL_TIME_STREAMS), float(MAX_STREAMS))
        self.samples += 1
        self.audio_s += sample.audio_s
        self.busy_s += usage.busy_s
        if not loaded:
            return True  # hurt or not, a half-idle server says nothing about its limit (a slow reader, a blip)
        if sample.hurt:
            self.hurt_samples += 1
            if self._measured_limit() > 1:  # at one stream there is nothing to shed: the hurt is the machine's
                self.correction = max(MIN_CORRECTION, self.correction * HURT_FACTOR)
        else:
            self.correction = min(1.0, self.correction + RECOVERY_STEP)
        return True

    def _measured_limit(self) -> int:
        """The limit the estimate and the correction give, before the bounds (1 .. ``MAX_STREAMS``)."""
        return math.floor((self.real_time_streams or 0.0) * ADMISSION_SHARE * self.correction)

    # ----- what admission and the probes read ---------------------------------------------

    @property
    def follows_measurement(self) -> bool:
        """The limit follows the live estimate (live admission, and neither operator nor engine set one)."""
        return self.admission == "live" and self.start.source in ("warm-up", "default")

    @property
    def streams(self) -> int:
        """Concurrent streams admitted now."""
        if not self.follows_measurement or self.samples == 0 or self.real_time_streams is None:
            return self.start.streams
        return min(MAX_STREAMS, max(1, self._measured_limit()))

    @property
    def source(self) -> str:
        """Where ``streams`` comes from: ``measured-live``, ``warm-up``, ``operator``, ``engine`` or ``default``."""
        if self.follows_measurement and self.samples > 0:
            return "measured-live"
        return self.start.source

    def to_dict(self) -> dict[str, object]:
        """``/ready``'s ``capacity``."""
        start = self.start

        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 2)

        return {
            "streams": self.streams,
            "source": self.source,
            "admission": self.admission,
            "workers": start.workers,
            "measured_real_time_streams": rounded(self.real_time_streams),
            "admission_share": ADMISSION_SHARE if self.source in ("measured-live", "warm-up") else None,
            "correction": round(self.correction, 3),
            "warm_up": {
                "streams": start.streams,
                "source": start.source,
                "real_time_streams": rounded(start.audio_s_per_s),
                "measure_wall_s": rounded(start.measure_wall_s),
            },
            "live": {
                "samples": self.samples,
                "hurt_samples": self.hurt_samples,
                "audio_s": round(self.audio_s, 1),
                "busy_s": round(self.busy_s, 1),
                "min_sample_audio_s": self.min_sample_audio_s,
            },
        }
