"""What the event loop does per Piper utterance, by function: two source trees profiled on the same requests.

``bench/front_ab.py`` says *how much* event-loop CPU an utterance costs (``/proc`` ticks); this says *where*.
Each tree's server runs under ``cProfile`` switched on by ``SIGUSR1`` after a warm-up and dumped on
``SIGUSR2`` (cProfile follows only the thread that enables it: uvicorn's main thread, the event loop), so the
profile holds exactly ``--requests`` utterances of one kind. Call counts are exact whatever the machine is
doing; the times are inflated by the profiler and only comparable between trees in one run.

    python -m bench.loop_profile --tree base=/work/base570 --tree head=. --kind ws-pcm --out /tmp/prof

Prints, per tree, function calls per utterance, and the functions whose calls or own time per utterance
differ most between the first tree and the others.
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import time
from pathlib import Path

from bench.front_ab import one
from speakwire.bench.servers import ServerProcess, free_port

WRAPPER = """
import cProfile, os, runpy, signal, sys, time
# CPU time of the loop's thread, not wall time: a wall clock also counts the waits for the GIL while the
# synthesis and encode threads hold it, which are not the loop's work (and not in front_ab's schedstat figure).
profile = cProfile.Profile(time.thread_time) if os.environ.get("LOOP_PROFILE_CPU") else cProfile.Profile()
stats_path = sys.argv[1]
def start(*_): profile.enable()
def stop(*_):
    profile.disable()
    profile.dump_stats(stats_path)
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
sys.argv = ["speakwire", *sys.argv[2:]]
runpy.run_module("speakwire", run_name="__main__", alter_sys=True)
"""

Key = tuple[str, int, str]


def profile_tree(
    path: Path, kind: str, requests: int, out: Path, name: str, *, cpu_timer: bool = False
) -> pstats.Stats:
    stats_file = out / f"{name}.prof"
    port = free_port()
    argv = [sys.executable, "-c", WRAPPER, str(stats_file), "serve", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning"]  # fmt: skip
    os.environ["PYTHONPATH"] = str(path.resolve() / "src")
    if cpu_timer:
        os.environ["LOOP_PROFILE_CPU"] = "1"
    server = ServerProcess(name, argv, port=port, log_dir=out)
    with server:
        os.environ.pop("PYTHONPATH", None)
        os.environ.pop("LOOP_PROFILE_CPU", None)
        assert server.pid is not None
        for _ in range(3):
            one(server.url, kind)
        os.kill(server.pid, signal.SIGUSR1)
        time.sleep(0.2)
        for _ in range(requests):
            one(server.url, kind)
        os.kill(server.pid, signal.SIGUSR2)
        for _ in range(100):
            if stats_file.exists() and stats_file.stat().st_size:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    return pstats.Stats(str(stats_file))


def per_utterance(stats: pstats.Stats, requests: int) -> dict[Key, tuple[float, float, float]]:
    """(calls, own ms, cumulative ms) per utterance, by function."""
    table = stats.stats  # type: ignore[attr-defined]
    scale = 1000 / requests
    return {key: (nc / requests, tt * scale, ct * scale) for key, (_, nc, tt, ct, _) in table.items()}


def label(key: Key) -> str:
    file, line, func = key
    short = file.split("/site-packages/")[-1].split("/src/")[-1]
    return f"{short}:{line}({func})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (its src/ is used)")
    parser.add_argument("--kind", default="ws-pcm", help="http-pcm, http-mp3 or ws-pcm")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--cpu-timer",
        action="store_true",
        help="time functions by the loop thread's CPU (time.thread_time), not the wall clock",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = dict(item.split("=", 1) for item in args.tree)
    tables: dict[str, dict[Key, tuple[float, float, float]]] = {}
    for name, path in trees.items():
        stats = profile_tree(
            Path(path), args.kind, args.requests, args.out, f"{name}-{args.kind}", cpu_timer=args.cpu_timer
        )
        tables[name] = per_utterance(stats, args.requests)
        calls = sum(v[0] for v in tables[name].values())
        own = sum(v[1] for v in tables[name].values())
        print(f"{name}: {calls:.0f} function calls, {own:.1f} ms (profiled) per {args.kind} utterance")
    names = list(tables)
    base = tables[names[0]]
    for other in names[1:]:
        head = tables[other]
        keys = set(base) | set(head)

        def delta(key: Key, i: int) -> float:
            return head.get(key, (0, 0, 0))[i] - base.get(key, (0, 0, 0))[i]  # noqa: B023

        print(f"\n{other} - {names[0]}: function calls per utterance, largest differences")
        for key in sorted(keys, key=lambda k: -abs(delta(k, 0)))[: args.top]:
            print(f"  {delta(key, 0):+8.1f}  {label(key)}")
        print(f"\n{other} - {names[0]}: own ms per utterance (profiled), largest differences")
        for key in sorted(keys, key=lambda k: -abs(delta(k, 1)))[: args.top]:
            print(f"  {delta(key, 1):+8.3f}  {label(key)}")


if __name__ == "__main__":
    main()
