"""``speakwire`` entry point: each subcommand lives in its own module with a ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules under speakwire.cli that add subcommands. A module whose optional
# dependencies are missing still registers: it fails with an install hint when run.
COMMAND_MODULES = ("serve", "say", "stream", "sagemaker", "ui", "voices", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speakwire", description="Real-time streaming text-to-speech server.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"speakwire.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"speakwire.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int | None = args.func(args)
    return result or 0


if __name__ == "__main__":
    sys.exit(main())
