"""Event-loop CPU per Piper utterance and open-loop p95 at one load, two source trees interleaved (an A/B).

Issue 27 asks that one audio-out front cost the event loop no more than seven hand-written ones did. The
event loop is uvicorn's main thread, so its CPU is the main thread's run time (``/proc/<pid>/task/<pid>/schedstat``,
nanoseconds), read before and after each request: ``http-pcm`` and ``http-mp3`` (``POST /v1/audio/speech``,
raw stream) and ``ws-pcm`` (the speech stream, ``stream_audio: true``, the text in one ``input.text``).

Paired: every tree's server is up at once (``PYTHONPATH`` at that tree's ``src/``, same virtualenv) and the
requests go to them in turn, one at a time, the order reversed every other request, so each tree sees the same
machine at the same moments; a figure is the median over a round's requests. (Running one tree's server after
the other instead showed differences of 1-3 ms that were the order and the server instance, not the code.)
With ``--open-loop-s`` each round then runs ``speakwire bench open-loop --url ... --levels 70`` at a fixed
``--capacity`` against each server in turn.

    python -m bench.front_ab --tree base=/work/base570 --tree head=. --rounds 3 --out bench/results/front-ab-2core
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from speakwire.bench.loadgen import websocket_reply
from speakwire.bench.servers import ServerProcess, speakwire_server, websocket_url

TEXT = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step, "
    "they say today."
)


def loop_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread (uvicorn's event loop): the scheduler's own count in
    ``/proc/<pid>/task/<pid>/schedstat``, to the nanosecond (``stat``'s user + system are 10 ms ticks)."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def http_request(url: str, fmt: str) -> int:
    body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": fmt, "stream_format": "audio"}
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{url}/v1/audio/speech", json=body)
        response.raise_for_status()
        return len(response.content)


async def ws_request(url: str) -> int:
    """Bytes of audio of one speech-stream utterance, the text in one ``input.text``."""
    stream_url = websocket_url(url, "/v1/audio/speech/stream")
    reply = await websocket_reply(stream_url, [TEXT], piece_interval_s=0, timeout_s=60)
    if reply.error is not None:
        raise RuntimeError(f"speech stream: {reply.error}")
    return sum(count for _, count in reply.arrivals)


def one(url: str, kind: str) -> int:
    if kind == "ws-pcm":
        return asyncio.run(ws_request(url))
    return http_request(url, kind.removeprefix("http-"))


def measure(servers: dict[str, ServerProcess], kind: str, requests: int) -> dict[str, float]:
    """Each server's median event-loop CPU milliseconds per utterance of ``kind``, requests taking turns."""
    for server in servers.values():
        for _ in range(2):
            one(server.url, kind)  # warm: encoders opened, caches filled
    costs: dict[str, list[float]] = {name: [] for name in servers}
    order = list(servers.items())
    for index in range(requests):
        for name, server in order if index % 2 == 0 else reversed(order):
            assert server.pid is not None
            before = loop_cpu_s(server.pid)
            one(server.url, kind)
            costs[name].append((loop_cpu_s(server.pid) - before) * 1000)
    return {name: statistics.median(values) for name, values in costs.items()}


def open_loop_p95(url: str, out: Path, level_s: float, capacity: float) -> dict[str, object]:
    cmd = [sys.executable, "-m", "speakwire", "bench", "open-loop", "--url", url, "--levels", "70",
           "--level-s", str(level_s), "--burst", "0", "--capacity", str(capacity), "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    found = sorted(out.rglob("*.json"))
    return json.loads(found[-1].read_text()) if found else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (its src/ is used)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--kinds", default="http-pcm,http-mp3,ws-pcm")
    parser.add_argument("--open-loop-s", type=float, default=0.0, help="seconds of arrivals at 70%% (0: skip)")
    parser.add_argument("--capacity", type=float, default=10.0, help="real-time streams taken as 100%%")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree)
    kinds = args.kinds.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[float]]] = {name: {k: [] for k in kinds} for name in trees}
    open_loop: dict[str, list[object]] = {name: [] for name in trees}
    for round_index in range(args.rounds):
        with contextlib.ExitStack() as stack:
            servers: dict[str, ServerProcess] = {}
            for name, path in trees.items():
                os.environ["PYTHONPATH"] = str(Path(path).resolve() / "src")  # the server's tree, not the clients'
                servers[name] = stack.enter_context(speakwire_server(args.out / "logs", name=f"{name}-{round_index}"))
            os.environ.pop("PYTHONPATH", None)
            for kind in kinds:
                for name, ms in measure(servers, kind, args.requests).items():
                    results[name][kind].append(round(ms, 2))
                    print(f"round {round_index} {name} {kind}: {ms:.2f} ms loop CPU per utterance", flush=True)
            if args.open_loop_s:
                for name, server in servers.items():
                    report = open_loop_p95(server.url, args.out / f"open-loop-{name}-{round_index}",
                                           args.open_loop_s, args.capacity)  # fmt: skip
                    open_loop[name].append(report)
        time.sleep(2)
    os.environ.pop("PYTHONPATH", None)
    summary = {
        "machine": f"{os.cpu_count()} cores",
        "requests_per_kind": args.requests,
        "design": "paired: all servers up, requests alternate between them; median per round",
        "text_chars": len(TEXT),
        "loop_cpu_ms": results,
        "loop_cpu_ms_median": {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()},
    }
    (args.out / "loop_cpu.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["loop_cpu_ms_median"], indent=2))


if __name__ == "__main__":
    main()
