"""``speakwire bench``: the load benchmark (the same code as ``python bench/run.py``)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from speakwire.bench.runner import add_arguments

    p = sub.add_parser(
        "bench",
        help="Load benchmark: time to first audio, underruns and throughput vs concurrent streams.",
        description="Start a speakwire server (or use --url) and Piper's own server on loopback, run N concurrent "
        "streams over HTTP and the WebSocket, compare with the raw engine, and write JSON, markdown and a plot. "
        "See bench/README.md.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from speakwire.bench.runner import run as run_bench

    code: int = run_bench(args)
    return code
