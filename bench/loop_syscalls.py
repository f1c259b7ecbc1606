"""System calls the event loop makes per Piper utterance, two source trees side by side (counts, not times).

``bench/front_ab.py`` measures the event loop's CPU per utterance; on a shared VM that figure moves with the
neighbours, and ``bench/loop_profile.py`` sees only Python. The kernel side is countable exactly: ``strace -c``
attached to uvicorn's main thread (``-p <pid>`` follows that one thread) while ``--requests`` utterances of
one kind are served. Each ``epoll_wait`` is one turn of the loop, each ``write``/``sendto`` one write to a
socket or to the loop's self-pipe, so a design that wakes the loop more often or writes smaller pieces shows
here whatever the machine is doing.

    python -m bench.loop_syscalls --tree base=/work/base570 --tree head=. --kind http-pcm --out /tmp/sys
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from bench.front_ab import one
from speakwire.bench.servers import ServerProcess, speakwire_server

_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def count_syscalls(server: ServerProcess, kind: str, requests: int, out: Path) -> dict[str, float]:
    """Calls per utterance by name, from ``strace -c`` on the server's main thread."""
    assert server.pid is not None
    for _ in range(3):
        one(server.url, kind)  # warm
    log = out / f"strace-{server.name}-{kind}.txt"
    tracer = subprocess.Popen(["strace", "-c", "-o", str(log), "-p", str(server.pid)], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    for _ in range(requests):
        one(server.url, kind)
    time.sleep(0.5)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=30)
    counts: dict[str, float] = {}
    for line in log.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            counts[match.group(2)] = int(match.group(1)) / requests
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (its src/ is used)")
    parser.add_argument("--kinds", default="http-pcm,http-mp3,ws-pcm")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = dict(item.split("=", 1) for item in args.tree)
    result: dict[str, dict[str, dict[str, float]]] = {}
    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for name, path in trees.items():
            os.environ["PYTHONPATH"] = str(Path(path).resolve() / "src")
            servers[name] = stack.enter_context(speakwire_server(args.out / "logs", name=name))
        os.environ.pop("PYTHONPATH", None)
        for kind in args.kinds.split(","):
            for name, server in servers.items():
                counts = count_syscalls(server, kind, args.requests, args.out)
                result.setdefault(name, {})[kind] = counts
                total = sum(counts.values())
                print(f"{name} {kind}: {total:.1f} syscalls per utterance", flush=True)
    names = list(trees)
    for kind in args.kinds.split(","):
        calls = sorted({c for n in names for c in result[n][kind]})
        print(f"\n{kind}: " + "  ".join(f"{n}" for n in names))
        for call in calls:
            values = [result[n][kind].get(call, 0.0) for n in names]
            if max(values) >= 0.5:
                print(f"  {call:<16}" + "".join(f"{v:>9.1f}" for v in values))
    (args.out / "loop_syscalls.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
