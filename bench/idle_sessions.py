"""What idle sessions cost the server: thousands of configured, idle sessions across the dialects, and a live stream.

One ``python -m speakwire serve`` (embedded Piper voice, Wyoming on a second port, idle timeouts raised past the
run so the server keeps every session) on loopback; ``RLIMIT_NOFILE`` is raised to its hard limit for the
benchmark and the server it starts. In order:

1. idle: a warm-up (utterances and one session of every dialect opened and closed), then a live stream's first
   audio over ``--utterances`` vLLM-Omni utterances with nothing else open, then the server's figures: RSS, USS
   and PSS (psutil's ``memory_full_info``), open file descriptors, threads, established TCP connections;
2. open: ``--sessions`` sessions spread evenly over ``--dialects``, one dialect after another, each opened and
   configured the way that dialect's clients do it (``DIALECTS``), then left idle; the figures after each
   dialect give its memory per session;
3. held: the figures with every session open, and the live stream's first audio again (a new vLLM-Omni session
   per utterance, timed from its ``input.text``), so the ratio to idle is what the held sessions cost it;
4. closed: every client closes its session; after ``--settle-s`` the figures again, against idle; then the live
   stream once more (its first audio is a second no-sessions baseline, taken minutes later on a shared machine)
   and the figures after it (engine work lets the allocator give freed pages back: ``engines.allocator``);
5. ``--rounds`` more: the same sessions opened, held and closed again; memory that grew round after round would
   be held by the server, memory that stays level is the allocator's to reuse.

    python -m bench.idle_sessions --out bench/results/idle-sessions-2core              # 2,000 sessions, ~3 min

A session counts as configured when the dialect acknowledged it (its own reply: Deepgram's ``Metadata``, Magpie's
``synthesize_session.updated``, Wyoming's ``info``; for the speech stream, ``voice.listed`` answering a
``voice.list`` sent after ``session.config``: replies come in order, so the configuration was applied first) or,
where the dialect answers nothing (ElevenLabs' init message, a Cartesia context opened with an empty transcript),
when it is still open at the end of the hold: a configuration the server refused would have closed it.
The server's asyncio tasks are not exposed over HTTP; ``tests/bench/test_idle_sessions.py`` counts them in process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.loadgen import websocket_reply
from speakwire.bench.machine import describe, one_line
from speakwire.bench.results import percentile
from speakwire.bench.servers import free_port, speakwire_server, websocket_url

LIVE_SENTENCE = "Hello there, how can I help you today?"
"""What the live stream says each time: one short sentence, sent whole."""
IDLE_TIMEOUT_S = 3600.0
"""The server's ``ws_idle_timeout_s`` (Wyoming's too) for the run: no session is closed for idling meanwhile."""
ELEVENLABS_INACTIVITY_S = 180
"""ElevenLabs' own inactivity timeout, at its maximum (``inactivity_timeout``): the hold must end before it."""

Message = str | bytes


def _json(message: Message) -> dict[str, Any]:
    if isinstance(message, bytes):
        return {}
    try:
        value = json.loads(message)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _typed(kind: str) -> Callable[[Message], bool]:
    return lambda message: _json(message).get("type") == kind


@dataclass(frozen=True)
class Dialect:
    """How one dialect's client opens a session and configures it."""

    name: str
    path: str
    """The WebSocket path and query ("" for Wyoming's TCP)."""
    messages: tuple[dict[str, Any], ...]
    """What the client sends once connected."""
    ack: Callable[[Message], bool] | None
    """The server's reply that says the configuration was applied; None: the dialect answers nothing."""
    summary: str


STREAM_CONFIG = {"type": "session.config", "voice": "alloy", "response_format": "pcm", "stream_audio": True}
ELEVENLABS_QUERY = f"?output_format=pcm_24000&inactivity_timeout={ELEVENLABS_INACTIVITY_S}"
ELEVENLABS_INIT = {"text": " ", "voice_settings": {"stability": 0.5, "similarity_boost": 0.8, "speed": 1.0},
                   "generation_config": {"chunk_length_schedule": [120, 160, 250, 290]}}  # fmt: skip
VOICE_ID = "21m00Tcm4TlvDq8ikWAM"
CARTESIA_CONTEXT = {"context_id": "idle-1", "model_id": "sonic-3", "transcript": "", "continue": True,
                    "voice": {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"}, "language": "en",
                    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}  # fmt: skip
MAGPIE_UPDATE = {"type": "synthesize_session.update", "event_id": "idle-1", "session": {
    "input_text_synthesis": {"voice_name": "Magpie-Multilingual.EN-US.Aria", "language_code": "en-US"},
    "output_audio_params": {"sample_rate_hz": 16000, "num_channels": 1, "audio_format": "LINEAR_PCM"}}}  # fmt: skip

DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    Dialect("vllm-omni", "/v1/audio/speech/stream", (STREAM_CONFIG, {"type": "voice.list"}), _typed("voice.listed"),
            "session.config (voice, pcm, stream_audio), voice.list as a barrier"),
    Dialect("sagemaker", "/invocations-bidirectional-stream", (STREAM_CONFIG, {"type": "voice.list"}),
            _typed("voice.listed"), "SageMaker's bidirectional path, the speech stream's session.config"),
    Dialect("magpie", "/invocations-bidirectional-stream", (MAGPIE_UPDATE,), _typed("synthesize_session.updated"),
            "SageMaker's bidirectional path, NVIDIA Magpie's synthesize_session.update"),
    Dialect("elevenlabs", f"/v1/text-to-speech/{VOICE_ID}/stream-input{ELEVENLABS_QUERY}", (ELEVENLABS_INIT,), None,
            "stream-input, the SDK's init message (text ' ', voice_settings, generation_config)"),
    Dialect("elevenlabs-multi", f"/v1/text-to-speech/{VOICE_ID}/multi-stream-input{ELEVENLABS_QUERY}",
            ({**ELEVENLABS_INIT, "context_id": "idle-1"},), None, "multi-stream-input, one context's init message"),
    Dialect("cartesia", "/tts/websocket?cartesia_version=2026-08-14", (CARTESIA_CONTEXT,), None,
            "/tts/websocket, a context opened (voice, format) with an empty transcript and continue: waiting for text"),
    Dialect("cartesia-pooled", "/tts/websocket?cartesia_version=2026-08-14", (), None,
            "/tts/websocket with no context: a pooled connection between turns (LiveKit keeps them 300 s)"),
    Dialect("deepgram", "/v1/speak?model=aura-2-thalia-en&encoding=linear16&sample_rate=24000", (), _typed("Metadata"),
            "/v1/speak, configured by its query; Metadata answers the upgrade"),
    Dialect("wyoming", "", (), None, "Wyoming over TCP: describe, answered by info"),
)}  # fmt: skip
"""Every dialect and how its client configures an idle session (Deepgram and Wyoming are configured by the
query and by nothing; the SageMaker bidirectional path is the server's own route on loopback)."""


class SessionRefused(Exception):
    """A session the server did not open or configure (an error, a close, or no acknowledgement in time)."""


# ----- one idle session -------------------------------------------------------------------------


@dataclass(eq=False)
class IdleSession:
    """One open, configured session, held without reading (its library still answers pings)."""

    dialect: str
    ws: ClientConnection | None = None
    tcp: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    received: list[Message] = field(default_factory=list)

    def ended(self) -> str | None:
        """None while the server keeps it open; otherwise how it ended (close code and reason)."""
        if self.ws is not None:
            if self.ws.state is State.OPEN:
                return None
            close = self.ws.protocol.close_rcvd
            return f"closed {close.code} {close.reason!r}" if close is not None else "dropped"
        assert self.tcp is not None
        reader, writer = self.tcp
        return "closed" if reader.at_eof() or writer.is_closing() else None

    async def aclose(self) -> None:
        """Close it the client's way: a close frame (1000), or the TCP connection."""
        with contextlib.suppress(Exception):
            if self.ws is not None:
                await self.ws.close()
            elif self.tcp is not None:
                self.tcp[1].close()
                await self.tcp[1].wait_closed()


async def open_session(dialect: Dialect, http_url: str, wyoming_port: int | None, timeout_s: float) -> IdleSession:
    """Open and configure one session of ``dialect``; raises ``SessionRefused``."""
    try:
        async with asyncio.timeout(timeout_s):
            if not dialect.path:
                return await _open_wyoming(wyoming_port)
            ws = await connect(websocket_url(http_url, dialect.path), ping_interval=None, max_size=None,
                               max_queue=16, open_timeout=None, close_timeout=10)  # fmt: skip
            session = IdleSession(dialect.name, ws=ws)
            for config in dialect.messages:
                await ws.send(json.dumps(config))
            while dialect.ack is not None:
                message = await ws.recv()
                session.received.append(message)
                if _json(message).get("type") == "error":
                    raise SessionRefused(f"{dialect.name}: {str(message)[:300]}")
                if dialect.ack(message):
                    break
            return session
    except SessionRefused:
        raise
    except Exception as exc:  # a refused handshake, a close, a timeout
        raise SessionRefused(f"{dialect.name}: {type(exc).__name__}: {exc}") from exc


async def _open_wyoming(port: int | None) -> IdleSession:
    from wyoming.event import async_read_event

    if port is None:
        raise SessionRefused("wyoming: the server has no Wyoming port")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    session = IdleSession("wyoming", tcp=(reader, writer))
    writer.write(json.dumps({"type": "describe", "version": "1.10.2"}).encode() + b"\n")
    await writer.drain()
    event = await async_read_event(reader)
    if event is None or event.type != "info":
        raise SessionRefused(f"wyoming: describe answered {event.type if event else 'nothing'}")
    return session


@dataclass
class Opened:
    sessions: list[IdleSession] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


async def open_sessions(
    dialect: Dialect, count: int, http_url: str, wyoming_port: int | None, *, concurrency: int, timeout_s: float
) -> Opened:
    """``count`` idle sessions of ``dialect``, at most ``concurrency`` opening at once."""
    limit = asyncio.Semaphore(concurrency)
    opened = Opened()

    async def one() -> None:
        async with limit:
            try:
                opened.sessions.append(await open_session(dialect, http_url, wyoming_port, timeout_s))
            except SessionRefused as exc:
                opened.refused.append(str(exc))

    await asyncio.gather(*(one() for _ in range(count)))
    return opened


async def close_sessions(sessions: Sequence[IdleSession], *, concurrency: int) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(session: IdleSession) -> None:
        async with limit:
            await session.aclose()

    await asyncio.gather(*(one(s) for s in sessions))


def spread(total: int, dialects: Sequence[str]) -> dict[str, int]:
    """``total`` sessions over ``dialects`` as evenly as whole numbers allow (the first ones get the rest)."""
    share, rest = divmod(total, len(dialects))
    return {name: share + (i < rest) for i, name in enumerate(dialects)}


def ended_sessions(sessions: Sequence[IdleSession]) -> dict[str, list[str]]:
    """The sessions the server no longer holds, by dialect: how each ended."""
    out: dict[str, list[str]] = {}
    for session in sessions:
        if (how := session.ended()) is not None:
            out.setdefault(session.dialect, []).append(how)
    return out


# ----- a live stream meanwhile ------------------------------------------------------------------


async def live_first_audio(http_url: str, utterances: int, *, pause_s: float = 0.2) -> dict[str, Any]:
    """A new vLLM-Omni session per utterance, ``LIVE_SENTENCE`` sent whole: first audio frame and first audible
    sample (``speakwire.bench.audible``), milliseconds from the ``input.text``."""
    url = websocket_url(http_url, "/v1/audio/speech/stream")
    first: list[float] = []
    audible: list[float] = []
    errors: list[str] = []
    for _ in range(utterances):
        reply = await websocket_reply(url, [LIVE_SENTENCE], piece_interval_s=0.0, timeout_s=60)
        if reply.error or not reply.arrivals or reply.first_sent is None:
            errors.append(reply.error or "no audio")
        else:
            first.append(1000 * (reply.arrivals[0][0] - reply.first_sent))
            heard = reply.onset.heard_at(reply.sample_rate)
            if heard is not None:
                audible.append(1000 * (heard - reply.first_sent))
        await asyncio.sleep(pause_s)
    return {"n": len(first), "first_audio_ms": _stats(first), "first_audible_ms": _stats(audible),
            "errors": errors}  # fmt: skip


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    p95 = percentile(values, 95)
    return {"p50": round(statistics.median(values), 1), "p95": None if p95 is None else round(p95, 1),
            "max": round(max(values), 1)}  # fmt: skip


# ----- the server's figures ---------------------------------------------------------------------


def raise_nofile() -> tuple[int, int]:
    """The soft ``RLIMIT_NOFILE`` raised to the hard one (children inherit it); returns (soft, hard) now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        soft = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def server_figures(pid: int, ports: Sequence[int], *, samples: int = 3, interval_s: float = 0.3) -> dict[str, float]:
    """RSS, USS and PSS (MiB, the median of ``samples`` readings), fds, threads and established connections."""
    import psutil  # the [bench] extra; the tests run the rest of this module without it

    process = psutil.Process(pid)
    readings = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        readings.append(process.memory_full_info())
    mib = 1024 * 1024
    connections = [c for c in process.net_connections("tcp")
                   if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port in ports]  # fmt: skip
    return {
        "rss_mib": round(statistics.median(r.rss for r in readings) / mib, 2),
        "uss_mib": round(statistics.median(r.uss for r in readings) / mib, 2),
        "pss_mib": round(statistics.median(r.pss for r in readings) / mib, 2),
        "fds": process.num_fds(),
        "threads": process.num_threads(),
        "connections": len(connections),
    }


def per_session(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float | None]:
    """Memory (KiB) and fds per session between two readings."""
    if n <= 0:
        return {"rss_kib": None, "uss_kib": None, "pss_kib": None, "fds": None}
    out: dict[str, float | None] = {
        f"{kind}_kib": round((after[f"{kind}_mib"] - before[f"{kind}_mib"]) * 1024 / n, 2)
        for kind in ("rss", "uss", "pss")
    }
    out["fds"] = round((after["fds"] - before["fds"]) / n, 3)
    return out


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """``SPEAKWIRE_*`` variables for the server the block starts (``ServerProcess`` passes the environment)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ----- the run ----------------------------------------------------------------------------------


async def warm_up(http_url: str, wyoming_port: int, dialects: Sequence[str]) -> None:
    """Utterances and one session per dialect, so what the server makes once is in the idle figures."""
    await live_first_audio(http_url, 2, pause_s=0.0)
    for name in dialects:
        session = await open_session(DIALECTS[name], http_url, wyoming_port, timeout_s=30)
        await session.aclose()


async def run(args: argparse.Namespace, http_url: str, pid: int, ports: list[int]) -> dict[str, Any]:
    wyoming_port = ports[1]
    await warm_up(http_url, wyoming_port, args.dialects)
    await asyncio.sleep(args.settle_s)
    live_idle = await live_first_audio(http_url, args.utterances)
    await asyncio.sleep(args.settle_s)
    idle = await asyncio.to_thread(server_figures, pid, ports)
    print(f"idle: {idle}; first audio {live_idle['first_audio_ms']}", flush=True)

    plan = spread(args.sessions, args.dialects)
    sessions: list[IdleSession] = []
    by_dialect: dict[str, Any] = {}
    previous = idle
    opening_started = time.monotonic()
    for name, count in plan.items():
        started = time.monotonic()
        opened = await open_sessions(DIALECTS[name], count, http_url, wyoming_port, concurrency=args.concurrency,
                                     timeout_s=args.open_timeout_s)  # fmt: skip
        open_s = time.monotonic() - started
        sessions += opened.sessions
        await asyncio.sleep(args.batch_settle_s)
        now = await asyncio.to_thread(server_figures, pid, ports)
        by_dialect[name] = {
            "summary": DIALECTS[name].summary, "planned": count, "opened": len(opened.sessions),
            "refused": len(opened.refused), "refusals": sorted(Counter(opened.refused).items())[:5],
            "open_s": round(open_s, 2), "figures_after": now,
            "per_session": per_session(previous, now, len(opened.sessions)),
        }  # fmt: skip
        print(f"{name}: {len(opened.sessions)}/{count} open in {open_s:.1f} s; per session "
              f"{by_dialect[name]['per_session']}", flush=True)  # fmt: skip
        previous = now
    opening_s = time.monotonic() - opening_started

    await asyncio.sleep(args.settle_s)
    held = await asyncio.to_thread(server_figures, pid, ports)
    print(f"held: {held}", flush=True)
    live_held = await live_first_audio(http_url, args.utterances)
    print(f"first audio with sessions held: {live_held['first_audio_ms']}", flush=True)
    held_after_live = await asyncio.to_thread(server_figures, pid, ports)
    hold_s = time.monotonic() - opening_started
    ended = ended_sessions(sessions)

    await close_sessions(sessions, concurrency=args.concurrency * 4)
    await asyncio.sleep(args.settle_s)
    after = await asyncio.to_thread(server_figures, pid, ports)
    print(f"after: {after}", flush=True)
    # Speech after the close: the server still serves, and its engine work wakes the allocator's releaser
    # (speakwire.engines.allocator), which gives freed heap pages back only after engine work.
    live_after = await live_first_audio(http_url, args.utterances)
    await asyncio.sleep(args.settle_s)
    after_live = await asyncio.to_thread(server_figures, pid, ports)
    print(f"after a live stream: {after_live}", flush=True)
    rounds = [await again(args, http_url, wyoming_port, pid, ports) for _ in range(args.rounds - 1)]

    n = len(sessions)
    ended_counts = {k: sorted(Counter(v).items()) for k, v in ended.items()}
    ratio, ratio_after = {}, {}
    for key in ("first_audio_ms", "first_audible_ms"):
        for stat in ("p50", "p95"):
            base, loaded, later = live_idle[key][stat], live_held[key][stat], live_after[key][stat]
            ratio[f"{key}_{stat}"] = round(loaded / base, 2) if base and loaded else None
            ratio_after[f"{key}_{stat}"] = round(loaded / later, 2) if later and loaded else None
    return {
        "sessions": {"planned": args.sessions, "opened": n, "ended_during_hold": ended_counts,
                     "still_open_at_end_of_hold": n - sum(len(v) for v in ended.values()),
                     "opening_s": round(opening_s, 1), "hold_s": round(hold_s, 1)},
        "idle": idle,
        "held": held,
        "held_after_live_stream": held_after_live,
        "after_close": after,
        "after_close_and_live_stream": after_live,
        "later_rounds": rounds,
        "per_session_overall": per_session(idle, held, n),
        "after_close_vs_idle": {k: round(after[k] - idle[k], 2) for k in idle},
        "after_close_and_live_stream_vs_idle": {k: round(after_live[k] - idle[k], 2) for k in idle},
        "per_dialect": by_dialect,
        "live_stream": {"sentence": LIVE_SENTENCE, "idle": live_idle, "with_sessions_held": live_held,
                        "after_close": live_after, "ratio_held_to_idle": ratio,
                        "ratio_held_to_after_close": ratio_after},
    }  # fmt: skip


async def again(
    args: argparse.Namespace, http_url: str, wyoming_port: int, pid: int, ports: list[int]
) -> dict[str, Any]:
    """One more round (the same sessions opened, held, closed): memory that grows round after round is held."""
    sessions: list[IdleSession] = []
    refused = 0
    for name, count in spread(args.sessions, args.dialects).items():
        opened = await open_sessions(DIALECTS[name], count, http_url, wyoming_port, concurrency=args.concurrency,
                                     timeout_s=args.open_timeout_s)  # fmt: skip
        sessions += opened.sessions
        refused += len(opened.refused)
    await asyncio.sleep(args.settle_s)
    held = await asyncio.to_thread(server_figures, pid, ports)
    await close_sessions(sessions, concurrency=args.concurrency * 4)
    await live_first_audio(http_url, 2)
    await asyncio.sleep(args.settle_s)
    after = await asyncio.to_thread(server_figures, pid, ports)
    print(f"round again: {len(sessions)} opened, held {held}, after {after}", flush=True)
    return {"opened": len(sessions), "refused": refused, "held": held, "after_close_and_live_stream": after}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--dialects", type=lambda s: s.split(","), default=list(DIALECTS),
                        help=f"comma-separated, opened in this order (default: all: {','.join(DIALECTS)})")  # fmt: skip
    parser.add_argument("--utterances", type=int, default=10, help="live-stream utterances, idle and with sessions")
    parser.add_argument("--rounds", type=int, default=2, help="open/hold/close rounds (figures in detail: the first)")
    parser.add_argument("--concurrency", type=int, default=32, help="sessions opening at once")
    parser.add_argument("--open-timeout-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=8.0, help="pause before the idle/held/after readings")
    parser.add_argument("--batch-settle-s", type=float, default=1.5, help="pause before each dialect's reading")
    parser.add_argument("--out", type=Path, required=True, help="a folder: idle_sessions.json and the server's log")
    args = parser.parse_args(argv)
    if unknown := [d for d in args.dialects if d not in DIALECTS]:
        parser.error(f"unknown dialects {unknown}; known: {', '.join(DIALECTS)}")

    nofile = raise_nofile()
    if nofile[0] < 2 * args.sessions + 256:
        parser.error(f"RLIMIT_NOFILE is {nofile}: too few descriptors for {args.sessions} sessions on both sides")
    machine = describe()
    wyoming_port = free_port()
    with tempfile.TemporaryDirectory() as data_dir, environment(SPEAKWIRE_WS_IDLE_TIMEOUT=str(IDLE_TIMEOUT_S)):
        server = speakwire_server(args.out, "--wyoming-port", str(wyoming_port), "--data-dir", data_dir)
        with server:
            assert server.pid is not None
            figures = asyncio.run(run(args, server.url, server.pid, [server.port, wyoming_port]))

    report = {
        "command": " ".join(["python -m bench.idle_sessions", *(argv if argv is not None else sys.argv[1:])]),
        "machine": {**machine, "load_average_at_end": list(os.getloadavg())},
        "rlimit_nofile": list(nofile),
        "server": {"ws_idle_timeout_s": IDLE_TIMEOUT_S, "elevenlabs_inactivity_timeout_s": ELEVENLABS_INACTIVITY_S},
        "args": {k: (v if isinstance(v, int | float | list) else str(v)) for k, v in vars(args).items()},
        **figures,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "idle_sessions.json").write_text(json.dumps(report, indent=2) + "\n")
    print(one_line(machine))
    print(json.dumps({k: report[k] for k in ("sessions", "per_session_overall", "after_close_vs_idle")}, indent=2))
    print(json.dumps({k: report["live_stream"][k] for k in ("ratio_held_to_idle", "ratio_held_to_after_close")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
