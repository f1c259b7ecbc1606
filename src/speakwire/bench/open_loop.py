"""Open-loop latency near capacity: Poisson arrivals of LLM-fed WebSocket streams, and a 16-stream burst.

Closed loops (``speakwire bench load``) keep N streams in flight, so a slow server slows its own load down.
Real traffic does not wait: callers arrive at random (Poisson) whether or not the server keeps up. So
this benchmark starts streams at exponential intervals for a rate that is a given share of the capacity
the server reports in ``GET /ready`` (``capacity.measured_real_time_streams``: audio seconds the engine
makes per wall second with every worker busy), at 30/50/70/90% by default:

    arrivals per second = share × measured real-time streams / mean reply audio seconds

Each stream is a voice agent's reply: ~9 s of speech (sentences of the benchmark texts grouped to
~150 characters), sent to ``/v1/audio/speech/stream`` one word at a time at LLM speed (``--words-per-s``
50, about 65 tokens per second), then ``input.done``. The client plays what arrives in real time through
a 100 ms jitter buffer (``--jitter``): first audio is timed from the first word sent, and a stall is
audio arriving after the buffered audio ran out (``speakwire.bench.playback``). Streams refused by
admission control (``busy`` error + close 1013) are counted apart: they are the server keeping its
promise to the admitted ones.

The burst opens 16 streams in the same instant and sets their first audio beside the compute bound:
with W workers, the k-th first audio cannot come before one idle stream's first audio plus
``ceil(k / W) - 1`` more first windows (the idle HTTP first audio of the same first segment).

    speakwire bench open-loop --out bench/results/open-loop-2core            # ~10 min: 4 levels × 120 s
    speakwire bench open-loop --level-s 20 --levels 30,70 --out /tmp/ol      # smoke run, ~2 min

It starts ``python -m speakwire serve`` on a free loopback port (admission derived from the measured
capacity, as a plain ``speakwire serve``), or measures ``--url``.

A/B of admission (issue 31): ``--admission live,fixed`` starts one server per variant (``speakwire serve
--admission``) and runs every level on each, in turn, the order alternating from level to level and the
arrivals the same (same seed), so a noisy machine's drift falls on both. 100% is then the *measured
saturation throughput*: ``--saturation-streams`` long replies at once on each server, audio seconds made
per wall second, the highest over the servers (not the warm-up's figure, which is what is being compared;
not the mean: a server whose limit admits fewer streams than saturate the machine shows only what it admits,
and session 12's mean put 100% at 5.25 while the live server sustained 8-11).

    speakwire bench open-loop --admission live,fixed --levels 10,50,70,90,110 --level-s 40 --burst 0 \\
        --out bench/results/admission-live-2core
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.loadgen import text_pieces, websocket_reply
from speakwire.bench.machine import describe, load_average
from speakwire.bench.metrics import scrape
from speakwire.bench.playback import simulate
from speakwire.bench.results import percentile, write_results
from speakwire.bench.servers import ServerProcess, speakwire_server, websocket_url
from speakwire.bench.texts import TEXTS_JSON, paragraphs

OUTPUT_RATE = 24000
"""What the WebSocket streams by default (s16le mono)."""


def replies(paragraphs: list[str], target_chars: int = 150) -> list[str]:
    """Consecutive sentences grouped into replies of about ``target_chars`` (~9 s of speech)."""
    out: list[str] = []
    for paragraph in paragraphs:
        current = ""
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph.strip()):
            current = f"{current} {sentence}".strip()
            if len(current) >= target_chars:
                out.append(current)
                current = ""
        if len(current) >= target_chars // 2:
            out.append(current)
    return out


@dataclass(slots=True)
class Stream:
    """One reply as the client saw it; times in seconds."""

    arrival_s: float
    """When it started, from the level's start."""
    chars: int
    refused: bool = False
    refusal: str = ""
    """The server's reason, when it refused (``refusal_rule``)."""
    error: str | None = None
    ttfa_s: float | None = None
    """From the first word sent to the first audio byte."""
    audible_s: float | None = None
    """From the first word sent to the first audible sample, as the player hears it (``audible``)."""
    server_ttfa_s: float | None = None
    """From the word that completed the first segment (its lookahead: the next word, or input.done) to the
    first audio byte: the server's part of first audio, without waiting for the LLM's words."""
    total_s: float = 0.0
    audio_s: float = 0.0
    stalls: int = 0
    stall_s: float = 0.0
    stall_positions_s: list[float] = field(default_factory=list)
    first_segment: str = ""

    @property
    def admitted(self) -> bool:
        return not self.refused and self.error is None


async def one_stream(url: str, text: str, *, words_per_s: float, jitter_s: float, arrival_s: float = 0.0) -> Stream:
    """Feed ``text`` word by word, collect the audio, replay it through a jitter-buffered real-time player."""
    stream = Stream(arrival_s=arrival_s, chars=len(text))
    reply = await websocket_reply(url, text_pieces(text, 1), piece_interval_s=1 / words_per_s, timeout_s=120)
    stream.refused, stream.refusal, stream.first_segment = reply.refused, reply.refusal, reply.first_segment
    stream.error = None if reply.refused else reply.error
    if reply.first_sent is not None:
        stream.total_s = reply.ended_at - reply.first_sent
    if reply.arrivals and reply.first_sent is not None and not stream.refused:
        first_audio = reply.arrivals[0][0]
        stream.ttfa_s = first_audio - reply.first_sent
        if (audible_at := reply.onset.heard_at(reply.sample_rate)) is not None:
            stream.audible_s = audible_at - reply.first_sent
        completed_by = min(len(stream.first_segment.split()), len(reply.sent_at) - 1)
        if stream.first_segment and completed_by >= 0:
            stream.server_ttfa_s = first_audio - reply.sent_at[completed_by]
        player = simulate(reply.arrivals, reply.sample_rate * 2, jitter_s=jitter_s)
        stream.audio_s = player.audio_s
        stream.stalls, stream.stall_s = player.underruns, player.stall_s
        stream.stall_positions_s = [round(p, 2) for p in player.stall_positions_s]
    return stream


def refusal_rule(message: str) -> str:
    """Which admission rule a refusal names: the parenthesis of "Server is at capacity (...)", numbers as N
    ("N concurrent streams", "queued audio is already late for playback", ...)."""
    match = re.search(r"\((.*)\)", message)
    return re.sub(r"\d+", "N", match.group(1)) if match else (message or "close 1013")


def summarize(streams: list[Stream]) -> dict[str, Any]:
    admitted = [s for s in streams if s.admitted]
    ttfa = [s.ttfa_s for s in admitted if s.ttfa_s is not None]
    audible = [s.audible_s for s in admitted if s.audible_s is not None]
    server_ttfa = [s.server_ttfa_s for s in admitted if s.server_ttfa_s is not None]

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    return {
        "streams": len(streams),
        "admitted": len(admitted),
        "refused": sum(s.refused for s in streams),
        "refused_by": dict(Counter(refusal_rule(s.refusal) for s in streams if s.refused)),
        "errors": sum(s.error is not None for s in streams),
        "ttfa_p50_ms": ms(percentile(ttfa, 50)),
        "ttfa_p95_ms": ms(percentile(ttfa, 95)),
        "ttfa_max_ms": ms(max(ttfa, default=None)),
        "audible_p50_ms": ms(percentile(audible, 50)),
        "audible_p95_ms": ms(percentile(audible, 95)),
        "server_ttfa_p50_ms": ms(percentile(server_ttfa, 50)),
        "server_ttfa_p95_ms": ms(percentile(server_ttfa, 95)),
        "stalls_per_stream": round(sum(s.stalls for s in admitted) / len(admitted), 3) if admitted else None,
        "streams_with_stalls": sum(s.stalls > 0 for s in admitted),
        "stall_s_total": round(sum(s.stall_s for s in admitted), 3),
        "audio_s_total": round(sum(s.audio_s for s in admitted), 1),
    }


async def poisson_level(
    url: str, texts: list[str], *, rate_per_s: float, level_s: float, seed: int, words_per_s: float, jitter_s: float
) -> tuple[list[Stream], float]:
    """Start streams at exponential intervals for ``level_s`` seconds; wait for all of them."""
    rng = random.Random(seed)
    tasks: list[asyncio.Task[Stream]] = []
    started = time.perf_counter()
    at = rng.expovariate(rate_per_s)
    while at < level_s:
        delay = started + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        text = texts[rng.randrange(len(texts))]
        tasks.append(
            asyncio.create_task(one_stream(url, text, words_per_s=words_per_s, jitter_s=jitter_s, arrival_s=at))
        )
        at += rng.expovariate(rate_per_s)
    streams = list(await asyncio.gather(*tasks))
    return streams, time.perf_counter() - started


def max_in_flight(streams: list[Stream]) -> int:
    events = sorted([(s.arrival_s, 1) for s in streams if s.admitted] +
                    [(s.arrival_s + s.total_s, -1) for s in streams if s.admitted])  # fmt: skip
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def server_counters(base: str) -> dict[str, float]:
    """Sums over protocols of the server's underrun and rejection counters."""
    metrics = scrape(base)
    return {name: metrics.get(f"speakwire_{name}_total", 0.0) for name in ("underruns", "rejections")}


async def wait_idle(base: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=10) as http:
        while time.monotonic() < deadline:
            ready = (await http.get(f"{base}/ready")).json()
            load = ready.get("load", {})
            if not load.get("active_streams") and not load.get("busy_workers"):
                return
            await asyncio.sleep(0.5)


async def http_first_audio_s(base: str, text: str) -> float:
    body = {"input": text, "response_format": "pcm", "stream_format": "audio", "sample_rate": OUTPUT_RATE}
    async with httpx.AsyncClient(timeout=60) as http:
        sent = time.perf_counter()
        async with http.stream("POST", f"{base}/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            async for _ in response.aiter_raw():
                return time.perf_counter() - sent
    raise RuntimeError("no audio")


async def reply_audio_s(base: str, text: str) -> float:
    body = {"input": text, "response_format": "pcm", "sample_rate": OUTPUT_RATE}
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(f"{base}/v1/audio/speech", json=body)
        response.raise_for_status()
        return len(response.content) / (2 * OUTPUT_RATE)


async def burst(base: str, ws_url: str, texts: list[str], args: argparse.Namespace, workers: int) -> dict[str, Any]:
    """``--burst`` streams at once, beside the compute bound of their first windows on ``workers`` workers."""
    idle = [await one_stream(ws_url, texts[i % len(texts)], words_per_s=args.words_per_s, jitter_s=args.jitter)
            for i in range(3)]  # fmt: skip
    idle_ws = percentile([s.ttfa_s for s in idle if s.ttfa_s is not None], 50) or 0.0
    first_segment = idle[0].first_segment or texts[0]
    first_window = percentile([await http_first_audio_s(base, first_segment) for _ in range(3)], 50) or 0.0
    await wait_idle(base)
    before = server_counters(base)
    streams = list(await asyncio.gather(*(
        one_stream(ws_url, texts[i % len(texts)], words_per_s=args.words_per_s, jitter_s=args.jitter)
        for i in range(args.burst)
    )))  # fmt: skip
    after = server_counters(base)
    admitted = max(1, sum(s.admitted for s in streams))
    bound = [idle_ws + (math.ceil(k / workers) - 1) * first_window for k in range(1, admitted + 1)]
    summary = summarize(streams)
    summary.update({
        "burst": args.burst,
        "workers": workers,
        "idle_ws_first_audio_ms": round(idle_ws * 1000, 1),
        "idle_http_first_window_ms": round(first_window * 1000, 1),
        "first_segment": first_segment,
        "bound_p50_ms": round((percentile(bound, 50) or 0) * 1000, 1),
        "bound_p95_ms": round((percentile(bound, 95) or 0) * 1000, 1),
        "server_underruns": after["underruns"] - before["underruns"],
    })  # fmt: skip
    return {"summary": summary, "streams": [asdict(s) for s in streams]}


async def run(base: str, args: argparse.Namespace) -> dict[str, Any]:
    ws_url = websocket_url(base, "/v1/audio/speech/stream")
    texts = replies(paragraphs(args.texts), args.reply_chars)
    async with httpx.AsyncClient(timeout=10) as http:
        ready = (await http.get(f"{base}/ready")).json()
    capacity = ready.get("capacity") or {}
    measured = args.capacity or capacity.get("measured_real_time_streams")
    if not measured and args.levels:
        raise SystemExit(f"{base}/ready reports no measured capacity: {json.dumps(ready)}")
    workers = int(capacity.get("workers") or 1)
    override = f" (levels use {measured})" if args.capacity else ""
    _log(f"capacity: {capacity.get('measured_real_time_streams')} real-time streams measured{override}, "
         f"{capacity.get('streams')} admitted, {workers} workers")  # fmt: skip
    await one_stream(ws_url, "Warming up the connection.", words_per_s=args.words_per_s, jitter_s=args.jitter)
    durations = [await reply_audio_s(base, text) for text in texts]
    mean_audio = sum(durations) / len(durations)
    _log(f"{len(texts)} replies, {mean_audio:.1f} s of audio each on average")
    levels = []
    for index, share in enumerate(args.levels):
        await wait_idle(base)
        rate = share / 100 * measured / mean_audio
        before = server_counters(base)
        streams, wall = await poisson_level(ws_url, texts, rate_per_s=rate, level_s=args.level_s, seed=index,
                                            words_per_s=args.words_per_s, jitter_s=args.jitter)  # fmt: skip
        after = server_counters(base)
        summary = summarize(streams)
        carried = sum(s.audio_s for s in streams if s.admitted)
        summary.update({
            "share_of_capacity_pct": share,
            "arrivals_per_s": round(rate, 3),
            "level_s": args.level_s,
            "wall_s": round(wall, 1),
            "carried_real_time_streams": round(carried / args.level_s, 2),
            "max_in_flight": max_in_flight(streams),
            "server_underruns": after["underruns"] - before["underruns"],
            "server_rejections": after["rejections"] - before["rejections"],
        })  # fmt: skip
        _log(_line(f"{share}%", summary))
        levels.append({"summary": summary, "streams": [asdict(s) for s in streams]})
    await wait_idle(base)
    burst_result = await burst(base, ws_url, texts, args, workers) if args.burst else None
    if burst_result:
        s = burst_result["summary"]
        _log(_line(f"burst {args.burst}", s) + f"; bound p50 {s['bound_p50_ms']} / p95 {s['bound_p95_ms']} ms")
    return {
        "capacity": capacity,
        "ready": ready,
        "replies": len(texts),
        "mean_reply_audio_s": round(mean_audio, 2),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "levels": levels,
        "burst": burst_result,
    }


async def saturation_throughput(base: str, text: str, streams: int) -> dict[str, float]:
    """``streams`` long replies at once over HTTP, read as fast as they come: audio seconds per wall second."""
    body = {"input": text, "response_format": "pcm", "stream_format": "audio", "sample_rate": OUTPUT_RATE}

    async def one(http: httpx.AsyncClient) -> int:
        received = 0
        async with http.stream("POST", f"{base}/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            async for part in response.aiter_raw():
                received += len(part)
        return received

    async with httpx.AsyncClient(timeout=300) as http:
        started = time.perf_counter()
        sizes = await asyncio.gather(*(one(http) for _ in range(streams)))
        wall = time.perf_counter() - started
    audio_s = sum(sizes) / (2 * OUTPUT_RATE)
    return {"streams": streams, "audio_s": round(audio_s, 1), "wall_s": round(wall, 2),
            "real_time_streams": round(audio_s / wall, 2)}  # fmt: skip


async def ready_capacity(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        capacity: dict[str, Any] = (await http.get(f"{base}/ready")).json().get("capacity") or {}
    return capacity


async def run_ab(bases: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Every level on every variant's server, interleaved; 100% = the saturation throughput measured here."""
    texts = replies(paragraphs(args.texts), args.reply_chars)
    variants = list(bases)
    first = bases[variants[0]]
    at_start = {name: await ready_capacity(base) for name, base in bases.items()}
    for name, capacity in at_start.items():
        _log(f"{name}: warm-up {capacity.get('measured_real_time_streams')} real-time streams, "
             f"{capacity.get('streams')} admitted ({capacity.get('source')})")  # fmt: skip
    for base in bases.values():
        await one_stream(websocket_url(base, "/v1/audio/speech/stream"), "Warming up the connection.",
                         words_per_s=args.words_per_s, jitter_s=args.jitter)  # fmt: skip
    durations = [await reply_audio_s(first, text) for text in texts]
    mean_audio = sum(durations) / len(durations)
    long_text = " ".join(texts[: args.saturation_replies])
    saturation = {}
    for name, base in bases.items():
        await wait_idle(base)
        # No more than the server admits now (the fixed variant may admit 2 on a busy VM): a refusal is no figure.
        limit = int((await ready_capacity(base)).get("streams") or args.saturation_streams)
        saturation[name] = await saturation_throughput(base, long_text, min(args.saturation_streams, limit))
        _log(f"{name}: {saturation[name]['streams']} long replies at once: "
             f"{saturation[name]['real_time_streams']} real-time streams")  # fmt: skip
    measured = args.capacity or max(s["real_time_streams"] for s in saturation.values())
    _log(f"100% = {measured:.2f} real-time streams; {len(texts)} replies of {mean_audio:.1f} s on average")
    levels = []
    for index, share in enumerate(args.levels):
        rate = share / 100 * measured / mean_audio
        turn = index % len(variants)
        order = variants[turn:] + variants[:turn]
        level: dict[str, Any] = {"share_of_capacity_pct": share, "arrivals_per_s": round(rate, 3), "order": order}
        for name in order:
            base = bases[name]
            await wait_idle(base)
            before = server_counters(base)
            streams, wall = await poisson_level(
                websocket_url(base, "/v1/audio/speech/stream"), texts, rate_per_s=rate, level_s=args.level_s,
                seed=index, words_per_s=args.words_per_s, jitter_s=args.jitter,
            )  # fmt: skip
            after = server_counters(base)
            summary = summarize(streams)
            summary.update({
                "share_of_capacity_pct": share,
                "arrivals_per_s": round(rate, 3),
                "wall_s": round(wall, 1),
                "max_in_flight": max_in_flight(streams),
                "server_underruns": after["underruns"] - before["underruns"],
                "server_rejections": after["rejections"] - before["rejections"],
                "capacity_after": await ready_capacity(base),
            })  # fmt: skip
            _log(_line(f"{share}% {name}", summary) + f"; limit after {summary['capacity_after'].get('streams')}")
            level[name] = {"summary": summary, "streams": [asdict(s) for s in streams]}
        levels.append(level)
    return {
        "variants": variants,
        "capacity_at_start": at_start,
        "saturation": saturation,
        "hundred_pct_real_time_streams": round(measured, 2),
        "replies": len(texts),
        "mean_reply_audio_s": round(mean_audio, 2),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "levels": levels,
    }


def ab_markdown(result: dict[str, Any]) -> str:
    machine, config, variants = result["machine"], result["config"], result["variants"]
    lines = [
        f"# Open loop, admission {' vs '.join(variants)}: Poisson arrivals of LLM-fed WebSocket streams (Piper)",
        "",
        f"{machine['os']}, {machine['cpu_count']} CPUs, load average at start {machine['load_average_at_start']}, "
        f"at end {machine.get('load_average_end')}.",
        f"100% = {result['hundred_pct_real_time_streams']} real-time streams: the highest of "
        + ", ".join(f"{name} {s['real_time_streams']}" for name, s in result["saturation"].items())
        + " measured with "
        + ", ".join(f"{s['streams']}" for s in result["saturation"].values())
        + f" long replies at once (at most {config['saturation_streams']}, no more than admitted). Replies: "
        f"{result['replies']} texts, {result['mean_reply_audio_s']} s of audio on average, fed one word every "
        f"{1000 / config['words_per_s']:.0f} ms; playback through a {config['jitter'] * 1000:.0f} ms jitter "
        f"buffer; {config['level_s']:g} s of arrivals per level, the same arrivals for each variant.",
        "",
        "Warm-up at start: "
        + "; ".join(
            f"{name} {c.get('measured_real_time_streams')} real-time streams, {c.get('streams')} admitted"
            for name, c in result["capacity_at_start"].items()
        )
        + ".",
        "",
        "| load | admission | streams | admitted | refused | first audio p50 | p95 | max | server part p95 | "
        "stalls/stream | streams with stalls | server underruns | max in flight | limit after (source, figure) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for level in result["levels"]:
        for name in variants:
            s = level[name]["summary"]
            c = s["capacity_after"]
            lines.append(
                f"| {s['share_of_capacity_pct']}% | {name} | {s['streams']} | {s['admitted']} | {s['refused']} | "
                f"{s['ttfa_p50_ms']} ms | {s['ttfa_p95_ms']} ms | {s['ttfa_max_ms']} ms | "
                f"{s['server_ttfa_p95_ms']} ms | {s['stalls_per_stream']} | {s['streams_with_stalls']} | "
                f"{s['server_underruns']:g} | {s['max_in_flight']} | {c.get('streams')} ({c.get('source')}, "
                f"{c.get('measured_real_time_streams')}) |"
            )
    reasons = [
        f"- {level[name]['summary']['share_of_capacity_pct']}% {name}: "
        + ", ".join(f"{count} for {rule!r}" for rule, count in level[name]["summary"].get("refused_by", {}).items())
        for level in result["levels"]
        for name in variants
        if level[name]["summary"].get("refused_by")
    ]
    if reasons:
        lines += ["", "Refused by rule (the server's reason, numbers as N):", "", *reasons]
    lines += ["", *_targets(result)]
    return "\n".join(lines) + "\n"


def _targets(result: dict[str, Any]) -> list[str]:
    """Issue 31's targets per variant, as ratios within the run: p95 first audio at 90% over p95 at 10%, and
    stalls and refusals up to 90%."""
    by_share = {level["share_of_capacity_pct"]: level for level in result["levels"]}
    lines = [
        "| admission | p95 at 90% / p95 at 10% (target <= 1.5) | stalls up to 90% (target 0) | "
        "refused up to 90% (target <= 2%) | refused at 110% |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in result["variants"]:
        low = by_share.get(10, {}).get(name, {}).get("summary", {})
        high = by_share.get(90, {}).get(name, {}).get("summary", {})
        ratio = (
            f"{high['ttfa_p95_ms'] / low['ttfa_p95_ms']:.2f}"
            if high.get("ttfa_p95_ms") and low.get("ttfa_p95_ms")
            else "n/a"
        )
        runs = [level[name] for share, level in by_share.items() if share <= 90]
        stalls = sum(st["stalls"] for run in runs for st in run["streams"] if not st["refused"] and not st["error"])
        streams = sum(run["summary"]["streams"] for run in runs)
        refused = sum(run["summary"]["refused"] for run in runs)
        over = by_share.get(110, {}).get(name, {}).get("summary")
        beyond = f"{over['refused']} of {over['streams']}" if over else "n/a"
        share = f"{100 * refused / streams:.1f}%" if streams else "n/a"
        lines.append(f"| {name} | {ratio} | {stalls} | {refused} of {streams} ({share}) | {beyond} |")
    return lines


def _line(label: str, s: dict[str, Any]) -> str:
    return (
        f"{label:>8}: {s['streams']} streams ({s['refused']} refused, {s['errors']} errors); first audio p50 "
        f"{s['ttfa_p50_ms']} ms, p95 {s['ttfa_p95_ms']} ms (audible p95 {s.get('audible_p95_ms')} ms); "
        f"stalls/stream {s['stalls_per_stream']} "
        f"({s['streams_with_stalls']} streams); refused by {s.get('refused_by') or '-'}"
    )


def _log(message: str) -> None:
    print(f"[open-loop {time.strftime('%H:%M:%S')}] {message}", flush=True)


def markdown(result: dict[str, Any]) -> str:
    cap = result["capacity"]
    config = result["config"]
    lines = [
        "# Open loop: Poisson arrivals of LLM-fed WebSocket streams (embedded Piper voice)",
        "",
        f"{result['machine']['os']}, {result['machine']['cpu_count']} CPUs, load average at start "
        f"{result['machine']['load_average_at_start']}.",
        f"Server capacity (`/ready`): {cap.get('measured_real_time_streams')} real-time streams measured at warm-up, "
        f"{cap.get('streams')} admitted ({cap.get('source')}), {cap.get('workers')} workers. Replies: "
        f"{result['replies']} texts, {result['mean_reply_audio_s']} s of audio on average, fed one word every "
        f"{1000 / config['words_per_s']:.0f} ms; playback through a {config['jitter'] * 1000:.0f} ms "
        f"jitter buffer; {config['level_s']:g} s of arrivals per level.",
        "",
        "First audio is timed from the first word sent; its *server part* from the word that completed the first "
        "segment (the server cannot start before it); *audible* to the first sample above −40 dBFS as the player "
        "hears it.",
        "",
        "| load | arrivals/s | streams | refused | errors | max in flight | first audio p50 | p95 | max | "
        "audible p50 | p95 | server part p50 | p95 | stalls/stream | streams with stalls | stall s "
        "| server underruns |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in result["levels"]:
        s = level["summary"]
        lines.append(
            f"| {s['share_of_capacity_pct']}% | {s['arrivals_per_s']} | {s['streams']} | {s['refused']} | "
            f"{s['errors']} | {s['max_in_flight']} | {s['ttfa_p50_ms']} ms | {s['ttfa_p95_ms']} ms | "
            f"{s['ttfa_max_ms']} ms | {s.get('audible_p50_ms')} ms | {s.get('audible_p95_ms')} ms | "
            f"{s['server_ttfa_p50_ms']} ms | {s['server_ttfa_p95_ms']} ms | "
            f"{s['stalls_per_stream']} | {s['streams_with_stalls']} | {s['stall_s_total']} | "
            f"{s['server_underruns']:g} |"
        )
    if result.get("burst"):
        s = result["burst"]["summary"]
        lines += [
            "",
            f"## Burst: {s['burst']} streams in the same instant",
            "",
            "| | first audio p50 | p95 | max | audible p95 | stalls/stream | refused |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| measured | {s['ttfa_p50_ms']} ms | {s['ttfa_p95_ms']} ms | {s['ttfa_max_ms']} ms | "
            f"{s.get('audible_p95_ms')} ms | {s['stalls_per_stream']} | {s['refused']} |",
            f"| compute bound | {s['bound_p50_ms']} ms | {s['bound_p95_ms']} ms | | | | |",
            "",
            f"Compute bound (over the {s['admitted']} admitted streams): one idle stream's first audio "
            f"({s['idle_ws_first_audio_ms']} ms over the WebSocket, "
            f"text feed included) plus ceil(k / {s['workers']}) − 1 more first windows "
            f"({s['idle_http_first_window_ms']} ms each: idle HTTP first audio of the first segment, "
            f'"{s["first_segment"].strip()}") for the k-th stream.',
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/open-loop"))
    parser.add_argument("--url", help="measure this running server instead of starting one")
    parser.add_argument("--levels", default="30,50,70,90", help="shares of the measured capacity, in percent")
    parser.add_argument("--level-s", type=float, default=120.0, help="seconds of arrivals per level")
    parser.add_argument("--burst", type=int, default=16, help="streams opened at once after the levels (0: none)")
    parser.add_argument("--words-per-s", type=float, default=50.0, help="LLM speed: words sent per second")
    parser.add_argument("--jitter", type=float, default=0.1, help="client jitter buffer, seconds")
    parser.add_argument("--reply-chars", type=int, default=150, help="reply length (~9 s of speech at 150)")
    parser.add_argument("--texts", type=Path, default=TEXTS_JSON)
    parser.add_argument(
        "--capacity",
        type=float,
        help="real-time streams to take as 100%% instead of /ready's "
        "measurement (A/B runs on a noisy machine: the same offered load for each variant)",
    )
    parser.add_argument("--server-arg", action="append", default=[], help="extra `speakwire serve` argument")
    parser.add_argument(
        "--admission",
        default="",
        help="A/B: comma-separated `speakwire serve --admission` variants (live,fixed), one server each, "
        "levels interleaved and taken as shares of the saturation throughput measured first",
    )
    parser.add_argument("--saturation-streams", type=int, default=4, help="A/B: long replies at once for 100%%")
    parser.add_argument("--saturation-replies", type=int, default=4, help="A/B: replies joined into each long one")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in str(args.levels).split(",") if x.strip()]  # "" = the burst only
    variants = [x.strip() for x in str(args.admission).split(",") if x.strip()]
    if variants:
        return _main_ab(args, variants)
    machine = describe()
    server: ServerProcess | None = None
    if args.url:
        base = args.url.rstrip("/")
    else:
        server = speakwire_server(args.out, *args.server_arg)
        server.start()
        base = server.url
    try:
        result = asyncio.run(run(base, args))
    finally:
        if server is not None:
            server.stop()
    result["machine"] = {**machine, "load_average_end": load_average()}
    write_results(args.out, result, markdown(result), markdown_name="README.md")
    print(markdown(result))
    return 0


def _main_ab(args: argparse.Namespace, variants: list[str]) -> int:
    if args.url:
        raise SystemExit("--admission starts its own servers (one per variant); it does not take --url")
    machine = describe()
    servers = {name: speakwire_server(args.out, "--admission", name, *args.server_arg, name=f"speakwire-{name}")
               for name in variants}  # fmt: skip
    try:
        for server in servers.values():
            server.start()
        result = asyncio.run(run_ab({name: server.url for name, server in servers.items()}, args))
    finally:
        for server in servers.values():
            server.stop()
    result["machine"] = {**machine, "load_average_end": load_average()}
    write_results(args.out, result, ab_markdown(result), markdown_name="README.md")
    print(ab_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
