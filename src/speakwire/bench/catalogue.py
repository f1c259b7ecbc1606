"""The packaged benchmarks by name, and ``speakwire bench [NAME] [options]`` choosing one of them.

Names map to modules, not to imported functions: a benchmark's module (and its heavy dependencies,
torch or a vendor SDK) is imported only when that benchmark runs, so ``speakwire --help`` costs nothing.
Each module has a ``main(argv=None)``, so ``python -m speakwire.bench.<module>`` runs the same code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Benchmark:
    module: str
    summary: str


DEFAULT = "load"
"""What ``speakwire bench`` runs with no name (or with options first), as before benchmarks had names."""

BENCHMARKS: dict[str, Benchmark] = {
    "load": Benchmark("load", "closed loop: first audio, underruns and throughput vs concurrent streams"),
    "open-loop": Benchmark("open_loop", "Poisson arrivals of LLM-fed WebSocket streams near capacity, then a burst"),
    "first-audio": Benchmark("first_audio", "first audio of one paragraph over HTTP and the WebSocket"),
    "qwen3-gpu": Benchmark("qwen3.gpu", "the real 0.6B/1.7B architectures on a GPU (random weights)"),
}
"""The benchmarks a user runs, shipped in the package behind the ``[bench]`` extra."""

DEVELOPER: dict[str, str] = {
    "dialect-latency": "bench.dialect_latency",
    "wyoming": "bench.wyoming",
    "stalled-readers": "bench.stalled_readers",
    "soak": "bench.soak",
    "memory-growth": "bench.memory_growth",
    "ort-tuning": "bench.ort_tuning",
    "piper-first-chunk": "bench.piper_first_chunk",
    "qwen3-batching": "bench.qwen3.batching",
    "qwen3-first-audio": "bench.qwen3.first_audio",
    "qwen3-http-concurrency": "bench.qwen3.http_concurrency",
    "qwen3-voice-library": "bench.qwen3.voice_library",
    "qwen3-step-profile": "bench.qwen3.step_profile",
}
"""Names that were ``speakwire bench`` commands and now live in the checkout's ``bench/`` folder: their modules.

They need the source checkout (the tests' fixtures) or the vendor SDKs of the ``[test]`` extra, so the
package does not carry them; ``speakwire bench NAME`` answers with the command that runs them now.
"""


def module_name(name: str) -> str:
    return f"speakwire.bench.{BENCHMARKS[name].module}"


def argument_parser(module: str, doc: str | None, **kwargs: object) -> argparse.ArgumentParser:
    """The parser of the benchmark in ``module`` (its ``__name__``): named as ``speakwire bench`` runs it.

    The description is the docstring's first line; the rest of it (how to run, what is measured) is the epilog.
    """
    if module == "__main__":  # python -m speakwire.bench.<module>: the module's own name is in its spec
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    name = next((n for n, b in BENCHMARKS.items() if module == f"speakwire.bench.{b.module}"), None)
    first, _, rest = (doc or "").strip().partition("\n")
    return argparse.ArgumentParser(
        prog=f"speakwire bench {name}" if name else f"python -m {module}",
        description=first,
        epilog=rest.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,  # type: ignore[arg-type]
    )


def overview() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [
        "usage: speakwire bench [NAME] [options]",
        "",
        f"Run one benchmark (see bench/README.md). Without a NAME, or with options first, runs '{DEFAULT}'.",
        "'speakwire bench NAME --help' lists a benchmark's options; 'python -m <module>' runs the same code.",
        "",
        "benchmarks:",
        *(f"  {name:<{width}}  {b.summary} ({module_name(name)})" for name, b in BENCHMARKS.items()),
        "",
        "Developer benchmarks (the tests' fixtures, vendor SDKs, tuning studies) run from a source checkout's",
        "root as 'python -m bench.<module>' (bench/README.md lists them).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``speakwire bench [NAME] [options]``: run benchmark NAME (default ``load``) with the rest of ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(overview(), end="")
        return 0
    if args and args[0] in DEVELOPER:
        print(
            f"speakwire bench: {args[0]!r} is a developer benchmark, not shipped in the package: from a source "
            f"checkout's root run\n  python -m {DEVELOPER[args[0]]} {' '.join(args[1:])}".rstrip(),
            file=sys.stderr,
        )
        return 2
    if args and args[0] in BENCHMARKS:
        name, rest = args[0], args[1:]
    elif args and not args[0].startswith("-"):
        print(f"speakwire bench: unknown benchmark {args[0]!r}\n\n{overview()}", end="", file=sys.stderr)
        return 2
    else:
        name, rest = DEFAULT, args
    module = importlib.import_module(module_name(name))
    code: int | None = module.main(rest)
    return code or 0
