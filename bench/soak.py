"""Soak: does the server's memory stay put under mixed, messy traffic? (not in CI; ~30 minutes by default)

Starts ``speakwire serve`` (the embedded Piper voice) on a free loopback port, warms it up, records its
resident memory, then drives ``--clients`` concurrent clients for ``--minutes`` with a mix of what real
traffic brings: long inputs (up to the 10,000-character limit), text without punctuation, odd text
(control characters, lone surrogates, emoji, CJK, numbers and symbols), WebSocket utterances fed like an
LLM and cancelled mid-way, and HTTP streams abandoned after their first bytes. It samples the server's
RSS (``/proc/PID/status``) every ``--sample-s`` seconds and writes the series, the peak and the final
value against the warm-up baseline to ``--out`` (JSON and markdown). The warm-up runs every kind of
request ``--clients`` at a time, so the baseline is the memory of the traffic mix, not of one request.

Every request's outcome is recorded as the client saw it: HTTP status codes, and for the WebSocket how the
utterance ended (``done``, ``cancelled``) or the close code it was refused with. A refusal by admission
control (HTTP 429, WebSocket ``busy`` error + close 1013) is the server working as designed and is
counted apart from real errors (exceptions, 5xx, other close codes).

    python -m bench.soak --minutes 30 --out bench/results/soak-2core
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe
from speakwire.bench.process import rss_mib
from speakwire.bench.results import write_results
from speakwire.bench.servers import speakwire_server, websocket_url
from speakwire.bench.texts import WORDS

ODD = ["Hello\x00 there\x07.", "Caf\u00e9 \ud800 cr\u00e8me br\u00fbl\u00e9e!", "\u200b\u202eevil\u202c text.",
       "Emoji \U0001f600\U0001f680 time.", "\u4f60\u597d\uff0c\u4e16\u754c\u3002", "$3.50, 1,000 km/h @ 3:30 p.m.",
       "!!!???...", "a" * 300, "Line one.\r\nLine two.\x0bThree."]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/soak"))
    args = parser.parse_args(argv)
    machine = describe()
    with speakwire_server(args.out) as server:
        assert server.pid is not None
        result = asyncio.run(_soak(server.url, server.pid, args))
    result["machine"] = machine
    write_results(args.out, result, _markdown(result))
    print(_markdown(result))
    return 0


REFUSED = ("http 429", "ws 1013")
"""Outcomes that are admission control saying "retry later", not failures."""


async def _soak(base: str, pid: int, args: Any) -> dict[str, Any]:
    kinds = [_long, _unpunctuated, _odd, _cancelled_ws, _abandoned_http, _ws_llm]
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for round_ in range(2):  # warm-up: every kind, --clients at a time
            for kind in kinds:
                await asyncio.gather(
                    *(kind(http, random.Random(round_ * 100 + i)) for i in range(args.clients)), return_exceptions=True
                )
    await asyncio.sleep(10)
    baseline = rss_mib(pid)
    counts: dict[str, int] = {}
    outcomes: dict[str, dict[str, int]] = {}
    errors: dict[str, int] = {}
    samples = [(0.0, baseline)]
    started = time.monotonic()
    deadline = started + args.minutes * 60

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            while time.monotonic() < deadline:
                kind = rng.choice(kinds)
                name = kind.__name__.lstrip("_")
                counts[name] = counts.get(name, 0) + 1
                try:
                    outcome = await kind(http, rng)
                except Exception as exc:  # count, and keep going: the soak is about the server
                    outcome = f"exception {type(exc).__name__}"
                per_kind = outcomes.setdefault(name, {})
                per_kind[outcome] = per_kind.get(outcome, 0) + 1
                if not _expected(outcome):
                    key = f"{name}: {outcome}"
                    errors[key] = errors.get(key, 0) + 1

    async def sampler() -> None:
        while time.monotonic() < deadline:
            await asyncio.sleep(args.sample_s)
            samples.append((round(time.monotonic() - started, 1), rss_mib(pid)))

    await asyncio.gather(sampler(), *(client(i) for i in range(args.clients)))
    await asyncio.sleep(10)  # let the last requests' buffers go (the engine returns free pages every 5 s)
    final = rss_mib(pid)
    peak = max(rss for _, rss in samples)
    return {
        "minutes": args.minutes,
        "clients": args.clients,
        "baseline_mib": baseline,
        "final_mib": final,
        "peak_mib": peak,
        "final_over_baseline": final / baseline,
        "requests": counts,
        "outcomes": outcomes,
        "refused": sum(n for per_kind in outcomes.values() for o, n in per_kind.items() if o in REFUSED),
        "client_errors": errors,
        "samples": samples,
    }


def _expected(outcome: str) -> bool:
    """Success, a refusal by admission control, or (odd text) a 400 for nothing speakable."""
    return outcome in ("http 200", "http 400", "ws done", "ws cancelled", *REFUSED)


async def _long(http: httpx.AsyncClient, rng: random.Random) -> str:
    text = ". ".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(70))[:9_900] + "."
    response = await http.post("/v1/audio/speech", json={"input": text, "response_format": "mp3"})
    return f"http {response.status_code}"


async def _unpunctuated(http: httpx.AsyncClient, rng: random.Random) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 400)))
    response = await http.post("/v1/audio/speech", json={"input": text, "response_format": "opus"})
    return f"http {response.status_code}"


async def _odd(http: httpx.AsyncClient, rng: random.Random) -> str:
    body = json.dumps({"input": " ".join(rng.sample(ODD, 3)), "response_format": "wav"}, ensure_ascii=True)
    response = await http.post("/v1/audio/speech", content=body, headers={"Content-Type": "application/json"})
    return f"http {response.status_code}"  # 400 is fine: nothing speakable left, said as such


async def _abandoned_http(http: httpx.AsyncClient, rng: random.Random) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(200)) + "."
    body = {"input": text, "response_format": "pcm", "stream_format": "audio"}
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        async for _ in response.aiter_bytes():
            break  # the client hangs up after its first bytes
        return f"http {response.status_code}"


def _ws(http: httpx.AsyncClient) -> Any:
    return connect(websocket_url(str(http.base_url), "/v1/audio/speech/stream"))


async def _cancelled_ws(http: httpx.AsyncClient, rng: random.Random) -> str:
    async with _ws(http) as ws:
        try:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
            for _ in range(rng.randint(3, 12)):
                await ws.send(json.dumps({"type": "input.text", "text": " ".join(rng.sample(WORDS, 5)) + ", "}))
            if _busy(await ws.recv()):
                return await _closed_with(ws)
            await ws.send(json.dumps({"type": "input.cancel"}))
            await _drain_until(ws, "input.cancelled")
            return "ws cancelled"
        except ConnectionClosed as exc:
            return _close_outcome(exc)


async def _ws_llm(http: httpx.AsyncClient, rng: random.Random) -> str:
    async with _ws(http) as ws:
        try:
            await ws.send(json.dumps({"type": "session.config", "response_format": "pcm"}))
            for _ in range(rng.randint(5, 20)):
                await ws.send(json.dumps({"type": "input.text", "text": " ".join(rng.sample(WORDS, 5)) + " "}))
                await asyncio.sleep(0.05)
            await ws.send(json.dumps({"type": "input.done"}))
            await _drain_until(ws, "session.done")
            return "ws done"
        except ConnectionClosed as exc:
            return _close_outcome(exc)


def _busy(message: str | bytes) -> bool:
    return isinstance(message, str) and json.loads(message).get("code") == "busy"


async def _closed_with(ws: Any) -> str:
    """Read until the server closes (after its error event); the close code is the outcome."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed as exc:
        return _close_outcome(exc)


def _close_outcome(exc: ConnectionClosed) -> str:
    return f"ws {exc.rcvd.code if exc.rcvd is not None else 'dropped'}"


async def _drain_until(ws: Any, kind: str) -> None:
    """Until an event of ``kind``; a ``busy`` error is followed by close 1013 (raised as ConnectionClosed)."""
    while True:
        message = await ws.recv()
        if isinstance(message, str) and json.loads(message).get("type") == kind:
            return


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Soak: server memory under mixed traffic (embedded Piper voice)",
        "",
        f"{result['minutes']:g} minutes, {result['clients']} concurrent clients; {result['machine']['os']}.",
        "",
        f"- RSS after warm-up: {result['baseline_mib']:.0f} MiB; peak {result['peak_mib']:.0f} MiB; "
        f"final {result['final_mib']:.0f} MiB (**{result['final_over_baseline']:.2f}×** the warm-up figure).",
        f"- Requests: {json.dumps(result['requests'])}",
        f"- Refused by admission control (HTTP 429 / WebSocket 1013, with Retry-After): {result['refused']}",
        f"- Client-side errors (anything else): "
        f"{json.dumps(result['client_errors']) if result['client_errors'] else 'none'}",
        "",
        "| request | outcomes as the client saw them |",
        "|---|---|",
        *(f"| {kind} | {json.dumps(per_kind)} |" for kind, per_kind in sorted(result["outcomes"].items())),
        "",
        "| minute | RSS MiB |",
        "|---:|---:|",
    ]
    for at, rss in result["samples"][:: max(1, len(result["samples"]) // 30)]:
        lines.append(f"| {at / 60:.1f} | {rss:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
