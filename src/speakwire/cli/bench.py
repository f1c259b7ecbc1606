"""``speakwire bench [NAME] [options]``: run one of the benchmarks in ``speakwire.bench`` (default: ``load``)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="Run a benchmark (default: the load benchmark); 'speakwire bench --help' lists them.",
        # Every word after 'bench' (its own --help included) belongs to the chosen benchmark's parser: '-' is
        # no option prefix here, so argparse hands the options through instead of rejecting them.
        prefix_chars="+",
        add_help=False,
    )
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from speakwire.bench.catalogue import main

    return main(args.argv)
