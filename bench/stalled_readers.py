"""What clients that stop reading cost the server: RSS per stalled stream, a long HTTP request's peak, recovery.

One ``python -m speakwire serve`` (embedded Piper voice) on loopback; its resident memory (``VmRSS``) is
read every 50 ms from ``/proc/<pid>/status``. In order:

The server's sockets get a 128 KiB send buffer and the stalled clients a 64 KiB receive buffer
(``--server-sndbuf``, ``--client-rcvbuf``), as a remote client's path would hold, not loopback's megabytes.

1. idle: after warm-up, a short request and a pause longer than the allocator's trim interval;
2. stalled: ``--stalled`` WebSocket clients (``/v1/audio/speech/stream``, PCM streamed; a 64 KiB receive
   buffer, ``--client-rcvbuf``, as a remote client's window would be, not loopback's tens of MB) each send
   ``--stalled-chars`` characters and ``input.done``, then read nothing for ``--stall-s`` seconds. Meanwhile
   a normal client asks for one short sentence over HTTP every second (time to its first audio byte);
   the active-streams gauge is read at the end of the stall;
3. the stalled clients close; after a pause the RSS is read again (against idle);
4. one ``--http-chars``-character ``POST /v1/audio/speech`` (raw PCM) read at full speed: its peak RSS.

``--parts http`` (or ``stalled``) runs one phase only, after the same idle reading. The warm-up speaks two
sentences, so that both of Piper's paths have run once before idle is read.

    SPEAKWIRE_WRITE_STALL_TIMEOUT=60 python -m bench.stalled_readers --out bench/results/stalled-readers-2core/a.json

Reports the minimum RSS of the idle windows (pages the trim gives back come back slowly) and, above it: the
peak of the stalled phase (engine working memory of eight streams synthesizing at once included), the
median over ``--plateau-s`` (50-68 s into an 85 s stall; run with ``SPEAKWIRE_WRITE_STALL_TIMEOUT=60`` so
that the streams are let go only after it, late enough for every stream to reach its lead on a busy 2-core
machine, and within the stall, so the closes are seen too) divided by the
stalled clients as the memory a stalled stream holds, the audio made per stalled stream meanwhile (from
``speakwire_audio_seconds_total``, which counts finished segments, once a second) and the server's CPU
in that window (cores busy: near zero once every stalled stream waits for its reader), the long request's
peak, and the RSS after each phase against idle. Server flags (``--max-lead-s`` etc.) go through
``SPEAKWIRE_*`` variables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import websockets

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe
from speakwire.bench.metrics import metric, scrape
from speakwire.bench.process import rss_mib
from speakwire.bench.servers import ServerProcess, free_port

SENTENCES = (
    "The order shipped this morning and should arrive on Tuesday, weather permitting. ",
    "Is there anything else I can help you with today? ",
    "Your account number ends in four two seven, and the balance is forty dollars. ",
    "Thanks for calling; we will send a confirmation by email within the hour. ",
)


WARM_UP = "Warm up. The second sentence of the warm-up is not latency critical, so it takes the other path."
"""Both of Piper's paths (the first sentence frame-streamed, later ones in bounded windows) run before idle is read,
so what they allocate once (kernels, lazily imported modules) is in idle and not in a phase's figure."""


def text_of(chars: int) -> str:
    out: list[str] = []
    total = 0
    i = 0
    while total < chars:
        sentence = SENTENCES[i % len(SENTENCES)]
        out.append(sentence)
        total += len(sentence)
        i += 1
    return "".join(out)[:chars]


class RssSampler:
    """Samples a process's VmRSS (MiB) every ``interval_s`` in a thread; ``mark()`` names phases."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.cpu: list[tuple[float, float]] = []
        """(time, CPU seconds the process has used), every sample."""
        self.stat = Path(f"/proc/{pid}/stat")
        self.ticks = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                self.samples.append((now, rss_mib(self.pid)))
                fields = self.stat.read_text().rsplit(")", 1)[1].split()
                self.cpu.append((now, (int(fields[11]) + int(fields[12])) / self.ticks))
            except (OSError, RuntimeError):
                return
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, start: float, end: float) -> list[float]:
        return [rss for at, rss in self.samples if start <= at <= end]

    def cpu_share(self, start: float, end: float) -> float:
        """CPU seconds per wall second between ``start`` and ``end`` (1.0 = one core busy)."""
        inside = [(at, cpu) for at, cpu in self.cpu if start <= at <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / (t1 - t0)


def active_streams(base: str) -> float | None:
    return metric(base, "speakwire_active_streams", missing=0.0)


def counter(base: str, name: str) -> float:
    """Sum of a counter over its label sets (0 when it has none yet)."""
    return scrape(base, timeout_s=5.0).get(name, 0.0)


def small_socket(port: int, rcvbuf: int) -> socket.socket:
    """A loopback TCP socket whose receive buffer (set before connecting, so the window scale fits it) is
    ``rcvbuf``: on loopback Linux would otherwise grow it to tens of MB, and a client that stops reading
    would still take minutes of audio into the kernel, which no phone on a bad network does."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def stalled_client(
    ws_url: str, port: int, rcvbuf: int, text: str, stop: asyncio.Event, result: dict[str, Any]
) -> None:
    """Connect, send the text, read nothing until ``stop``; record how the server left it."""
    try:
        async with websockets.connect(ws_url, sock=small_socket(port, rcvbuf), max_size=None, max_queue=4,
                                      ping_interval=None, close_timeout=2) as ws:  # fmt: skip
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
            await ws.send(json.dumps({"type": "input.text", "text": text}))
            await ws.send(json.dumps({"type": "input.done"}))
            await stop.wait()
            result["closed_by_server"] = ws.close_code
            result["close_reason"] = ws.close_reason
    except websockets.ConnectionClosed as exc:
        result["closed_by_server"] = exc.rcvd.code if exc.rcvd else None
    except OSError as exc:
        result["error"] = repr(exc)


async def probe_first_audio(base: str, stop: asyncio.Event, out: list[float]) -> None:
    """One short sentence over HTTP every second: seconds to the first audio byte."""
    async with httpx.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            started = time.perf_counter()
            body = {"model": "tts-1", "input": "Hello there, how can I help you today?", "response_format": "pcm"}
            first: float | None = None
            async with client.stream("POST", f"{base}/v1/audio/speech", json=body) as response:
                async for chunk in response.aiter_raw():
                    if chunk and first is None:
                        first = time.perf_counter() - started
            if first is not None:
                out.append(first)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)


async def stalled_phase(base: str, ws_url: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    stop = asyncio.Event()
    results: list[dict[str, Any]] = [{} for _ in range(args.stalled)]
    probes: list[float] = []
    text = text_of(args.stalled_chars)
    clients = [asyncio.create_task(stalled_client(ws_url, port, args.client_rcvbuf, text, stop, r)) for r in results]
    probe = asyncio.create_task(probe_first_audio(base, stop, probes))
    started = time.monotonic()
    timeline: list[dict[str, float | None]] = []
    while (elapsed := time.monotonic() - started) < args.stall_s:
        audio = await asyncio.to_thread(counter, base, "speakwire_audio_seconds_total")
        active = await asyncio.to_thread(active_streams, base)
        timeline.append({"t_s": round(elapsed, 1), "audio_s": round(audio, 1), "active": active,
                         "at": time.monotonic()})  # fmt: skip
        await asyncio.sleep(1.0)
    active = await asyncio.to_thread(active_streams, base)
    stop.set()
    await asyncio.gather(*clients, probe)
    return {"active_streams_at_end_of_stall": active, "clients": results, "first_audio_s": probes,
            "timeline": timeline}  # fmt: skip


async def long_http(base: str, chars: int) -> dict[str, Any]:
    body = {"model": "tts-1", "input": text_of(chars), "response_format": "pcm"}
    started = time.perf_counter()
    received = 0
    first: float | None = None
    async with httpx.AsyncClient(timeout=600) as client, client.stream("POST", f"{base}/v1/audio/speech",
                                                                       json=body) as response:  # fmt: skip
        async for chunk in response.aiter_raw():
            if chunk and first is None:
                first = time.perf_counter() - started
            received += len(chunk)
    return {"bytes": received, "first_audio_s": first, "wall_s": time.perf_counter() - started}


SERVE = """
import socket, sys, uvicorn
from speakwire.server.app import create_app
from speakwire.settings import Settings
port, sndbuf = int(sys.argv[1]), int(sys.argv[2])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if sndbuf:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)  # accepted sockets inherit it
sock.bind(("127.0.0.1", port))
settings = Settings.from_env(host="127.0.0.1", port=port, max_streams=64, log_level="warning")
config = uvicorn.Config(create_app(settings), log_level="warning", ws_ping_interval=None)
uvicorn.Server(config).run(sockets=[sock])
"""
"""``speakwire serve`` as its ``run`` does (no drain, and no WebSocket keepalive pings: their 20 s timeout would end
a stalled session at some moment of its own, not the server's flow control), on a listening socket whose send
buffer is fixed: on loopback Linux grows a send buffer to 4 MB (87 s of 24 kHz audio) even towards a
closed window, where a remote client's path would hold a few hundred KB; the kernel's share is not RSS but
would hide a stalled reader from the server for minutes of audio."""


def stalled_summary(
    args: argparse.Namespace,
    sampler: RssSampler,
    stalled: dict[str, Any],
    idle: float,
    stall_peak: float,
    plateau: float,
    made: list[dict[str, Any]],
    window: tuple[float, float],
    after_stalled: float,
    active_after: float | None,
) -> dict[str, Any]:
    """The stalled phase's figures (see the module docstring)."""
    probes = stalled["first_audio_s"]
    return {
        "stalled": {
            "clients": args.stalled,
            "peak_above_idle_mib": round(stall_peak - idle, 1),
            "plateau_window_s": args.plateau_s,
            "plateau_above_idle_mib": round(plateau - idle, 1),
            "per_stream_mib": round((plateau - idle) / args.stalled, 1),
            "audio_made_per_stream_s": [round((p["audio_s"] or 0) / args.stalled, 1) for p in (made[0], made[-1])]
            if made else None,
            "server_cpu_cores_in_plateau": round(sampler.cpu_share(*window), 2),
            "timeline": [{k: v for k, v in p.items() if k != "at"} for p in stalled["timeline"]],
            "active_streams_at_end_of_stall": stalled["active_streams_at_end_of_stall"],
            "server_closes": [c.get("closed_by_server") for c in stalled["clients"]],
            "close_reasons": sorted({str(c.get("close_reason")) for c in stalled["clients"]}),
        },
        "after_stalled_rss_mib": round(after_stalled, 1),
        "after_stalled_vs_idle": round(after_stalled / idle, 3),
        "active_streams_after_close": active_after,
        "normal_client_first_audio_ms": {
            "n": len(probes),
            "p50": round(1000 * statistics.median(probes), 1) if probes else None,
            "max": round(1000 * max(probes), 1) if probes else None,
        },
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--stalled", type=int, default=8)
    parser.add_argument("--stalled-chars", type=int, default=9500)
    parser.add_argument("--stall-s", type=float, default=85.0)
    parser.add_argument("--http-chars", type=int, default=10_000)
    parser.add_argument("--plateau-s", type=float, nargs=2, default=(50.0, 68.0),
                        help="window of the stall (seconds from its start) whose median RSS is the held cost; with "
                        "SPEAKWIRE_WRITE_STALL_TIMEOUT=60 it ends before the stalled streams are let go")  # fmt: skip
    parser.add_argument(
        "--server-sndbuf",
        type=int,
        default=128 * 1024,
        help="SO_SNDBUF of the server's sockets (0: Linux's autotuning, megabytes on loopback)",
    )
    parser.add_argument("--client-rcvbuf", type=int, default=64 * 1024, help="stalled clients' SO_RCVBUF")
    parser.add_argument("--settle-s", type=float, default=8.0, help="pause before each idle reading (trim is 5 s)")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("stalled", "http"),
        default=["stalled", "http"],
        help="phases to run (idle is always read first)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    log_dir = args.out.parent
    port = free_port()
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/audio/speech/stream"
    machine = describe()
    command = [sys.executable, "-c", SERVE, str(port), str(args.server_sndbuf)]
    with ServerProcess("speakwire", command, port=port, log_dir=log_dir) as server:
        assert server.pid is not None
        sampler = RssSampler(server.pid)
        sampler.start()
        httpx.post(f"{base}/v1/audio/speech", json={"model": "tts-1", "input": WARM_UP, "response_format": "pcm"},
                   timeout=60).raise_for_status()  # fmt: skip
        time.sleep(args.settle_s)
        t0 = time.monotonic()
        time.sleep(2.0)
        idle = min(sampler.window(t0, time.monotonic()))

        stalled_report: dict[str, Any] | None = None
        if "stalled" in args.parts:
            t1 = time.monotonic()
            stalled = asyncio.run(stalled_phase(base, ws_url, port, args))
            t2 = time.monotonic()
            stall_peak = max(sampler.window(t1, t2))
            plateau_from, plateau_to = t1 + args.plateau_s[0], t1 + args.plateau_s[1]
            plateau = statistics.median(sampler.window(plateau_from, plateau_to))
            made = [p for p in stalled["timeline"] if plateau_from <= p["at"] <= plateau_to]
            time.sleep(args.settle_s)
            t3 = time.monotonic()
            time.sleep(2.0)
            after_stalled = min(sampler.window(t3, time.monotonic()))
            active_after = active_streams(base)
            stalled_report = stalled_summary(args, sampler, stalled, idle, stall_peak, plateau, made,
                                             (plateau_from, plateau_to), after_stalled, active_after)  # fmt: skip

        http_report: dict[str, Any] = {}
        if "http" in args.parts:
            t4 = time.monotonic()
            http = asyncio.run(long_http(base, args.http_chars))
            t5 = time.monotonic()
            window = sampler.window(t4, t5)
            time.sleep(args.settle_s)
            t6 = time.monotonic()
            time.sleep(2.0)
            after_http = min(sampler.window(t6, time.monotonic()))
            http_report = {
                "http_long": {**http, "peak_above_idle_mib": round(max(window) - idle, 1),
                              "median_above_idle_mib": round(statistics.median(window) - idle, 1),
                              "audio_s": round(http["bytes"] / 2 / 24000, 1),
                              "server_cpu_cores": round(sampler.cpu_share(t4, t5), 2)},
                "after_http_rss_mib": round(after_http, 1),
                "after_http_vs_idle": round(after_http / idle, 3),
            }  # fmt: skip
        if stalled_report is not None:
            try:
                stalled_report["stalled"]["stalled_closes_total"] = counter(base, "speakwire_stalled_closes_total")
            except httpx.HTTPError:
                stalled_report["stalled"]["stalled_closes_total"] = 0.0
        sampler.stop()

    report = {
        "machine": {**machine, "load_average_at_end": list(os.getloadavg())},
        "settings": {k: v for k, v in os.environ.items() if k.startswith("SPEAKWIRE_")},
        "args": {k: str(v) for k, v in vars(args).items()},
        "idle_rss_mib": round(idle, 1),
        **(stalled_report or {}),
        **http_report,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
