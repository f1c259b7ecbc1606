"""What benchmarks measured: one stream's and one level's records, percentiles, and the result files.

Records keep raw per-stream numbers (so a result file can be re-analysed later); ``LevelResult.summary``
derives the few numbers people compare: time to first audio (first byte, and first audible sample:
``audible``) p50/p95, real-time factor, underruns per
stream, throughput (audio seconds per wall second across all streams) and CPU use. Every benchmark that
writes a result folder does it with ``write_results``: the JSON (everything) beside a markdown table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speakwire.bench.playback import simulate


@dataclass(slots=True)
class StreamRecord:
    """One utterance as the client saw it. Times are seconds; ``started_at`` is relative to its level's start."""

    target: str
    concurrency: int
    index: int
    text_chars: int
    started_at: float
    total_s: float
    """From the request (HTTP) or the first ``input.text`` (WebSocket) to the last audio byte."""
    ttfa_s: float | None
    """Time to the first audio byte (the first byte of the body for a whole-file WAV); None if none came."""
    audio_s: float
    bytes: int
    underruns: int
    """Times a simulated real-time player at the client ran out of audio before the stream ended."""
    stall_s: float
    """Total silence those underruns caused."""
    error: str | None = None
    stall_positions_s: list[float] = field(default_factory=list)
    """Seconds into the audio where each stall was heard."""
    audible_s: float | None = None
    """Time to the first audible sample (above −40 dBFS) as a player started at the first byte hears it
    (``audible.AudibleOnset.heard_at``); None if the stream was silent or not looked at."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.audio_s > 0

    @property
    def rtf(self) -> float | None:
        """Wall time per second of audio (below 1: faster than real time)."""
        return self.total_s / self.audio_s if self.audio_s > 0 else None


def record_from_arrivals(
    *,
    target: str,
    concurrency: int,
    index: int,
    text: str,
    level_start: float,
    sent_at: float,
    ended_at: float,
    arrivals: Sequence[tuple[float, int]],
    bytes_per_second: float,
    skip_bytes: int = 0,
    error: str | None = None,
    audible_at: float | None = None,
) -> StreamRecord:
    """Build a record from raw ``(arrival time, byte count)`` pairs (``time.perf_counter`` instants).

    ``audible_at`` is when the first audible sample is heard, on the same clock (``AudibleOnset.heard_at``).
    """
    player = simulate(arrivals, bytes_per_second, skip_bytes=skip_bytes)
    return StreamRecord(
        target=target,
        concurrency=concurrency,
        index=index,
        text_chars=len(text),
        started_at=sent_at - level_start,
        total_s=(arrivals[-1][0] if arrivals else ended_at) - sent_at,
        ttfa_s=None if player.first_arrival is None else player.first_arrival - sent_at,
        audio_s=player.audio_s,
        bytes=player.bytes_received,
        underruns=player.underruns,
        stall_s=player.stall_s,
        error=error,
        stall_positions_s=[round(x, 3) for x in player.stall_positions_s],
        audible_s=None if audible_at is None else audible_at - sent_at,
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method) without numpy; None for no values.

    Every benchmark's p50/p95 is this one, so figures from different benchmarks read alike.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(slots=True)
class LevelResult:
    """All streams of one target at one concurrency, plus what was measured around them."""

    target: str
    concurrency: int
    wall_s: float
    streams: list[StreamRecord] = field(default_factory=list)
    server_cpu_pct: float | None = None
    """CPU time of the server process over the level, as % of the whole machine (all cores)."""
    client_cpu_pct: float | None = None
    """The same for the load generator itself: it shares the machine, so it is reported."""
    server_underruns: int | None = None
    """Increase of the server's own ``speakwire_underruns_total`` over the level (speakwire targets only)."""

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.streams if s.ok]
        ttfa = [s.ttfa_s for s in ok if s.ttfa_s is not None]
        audible = [s.audible_s for s in ok if s.audible_s is not None]
        rtf = [r for s in ok if (r := s.rtf) is not None]
        audio = sum(s.audio_s for s in ok)
        return {
            "target": self.target,
            "concurrency": self.concurrency,
            "streams": len(self.streams),
            "errors": len(self.streams) - len(ok),
            "ttfa_p50_s": percentile(ttfa, 50),
            "ttfa_p95_s": percentile(ttfa, 95),
            "ttfa_max_s": max(ttfa) if ttfa else None,
            "audible_p50_s": percentile(audible, 50),
            "audible_p95_s": percentile(audible, 95),
            "rtf_p50": percentile(rtf, 50),
            "rtf_p95": percentile(rtf, 95),
            "underruns_per_stream": sum(s.underruns for s in ok) / len(ok) if ok else None,
            "streams_with_underrun": sum(1 for s in ok if s.underruns) if ok else None,
            "stall_s_per_stream": sum(s.stall_s for s in ok) / len(ok) if ok else None,
            "stall_max_s": max((s.stall_s for s in ok), default=None),
            "audio_s": audio,
            "wall_s": self.wall_s,
            "throughput": audio / self.wall_s if self.wall_s > 0 else None,
            "server_cpu_pct": self.server_cpu_pct,
            "client_cpu_pct": self.client_cpu_pct,
            "server_underruns": self.server_underruns,
            "first_error": next((s.error for s in self.streams if s.error), None),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "concurrency": self.concurrency,
            "wall_s": self.wall_s,
            "server_cpu_pct": self.server_cpu_pct,
            "client_cpu_pct": self.client_cpu_pct,
            "server_underruns": self.server_underruns,
            "summary": self.summary(),
            "streams": [asdict(s) for s in self.streams],
        }


def write_results(
    out_dir: Path,
    document: Mapping[str, Any],
    markdown: str | None = None,
    *,
    json_name: str = "results.json",
    markdown_name: str = "results.md",
) -> list[Path]:
    """Write ``document`` as JSON (paths as strings) and ``markdown`` beside it in ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / json_name]
    paths[0].write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    if markdown is not None:
        paths.append(out_dir / markdown_name)
        paths[1].write_text(markdown, encoding="utf-8")
    return paths
