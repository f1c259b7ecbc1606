"""Time to first audio per dialect: the same reply, the same server, each vendor's own client.

Starts ``python -m speakwire serve`` (embedded Piper voice, Wyoming port on) on loopback, or measures
``--url``, then runs every probe of ``bench.dialects`` round-robin (one request at a time, so
they never compete; round 0 warms every path up and is not counted) and reports min / median / max per
probe and the ratio of each median to the plain OpenAI HTTP one. A probe whose client is not installed
or that fails is reported as an error; the others still run.

    python -m bench.dialect_latency --out bench/results/dialects-2core [--rounds 7]
    python -m bench.dialect_latency --probes cartesia,cartesia_sse --rounds 5   # some probes, no files
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.dialects import DIALECTS, Probe
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line
from speakwire.bench.results import write_results
from speakwire.bench.servers import free_port, speakwire_server
from speakwire.bench.texts import REPLY

BASELINE = "openai_http"


def load_probes(errors: dict[str, str]) -> dict[str, Probe]:
    """Every dialect module's probes, by name; a module whose client is missing goes into ``errors``."""
    probes: dict[str, Probe] = {}
    for dialect in DIALECTS:
        try:
            module = importlib.import_module(f"bench.dialects.{dialect}")
        except ImportError as exc:
            errors[dialect] = f"{exc} (pip install -e '.[test]' installs every vendor client)"
            continue
        probes.update(module.PROBES)
    return probes


def measure(probe: Probe, base_url: str, text: str) -> float:
    result = probe(base_url, text)
    if inspect.isawaitable(result):
        result = asyncio.run(result)  # type: ignore[arg-type]
    return float(result)  # type: ignore[arg-type]


def run_rounds(probes: dict[str, Probe], base_url: str, rounds: int, errors: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in probes}
    for round_index in range(rounds + 1):  # round 0 warms every path up and is not counted
        for name, probe in probes.items():
            if name in errors:
                continue
            try:
                seconds = measure(probe, base_url, REPLY)
            except Exception as exc:  # a broken probe is reported, the others still run
                errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            if round_index:
                times[name].append(seconds)
    return times


def table(times: dict[str, list[float]]) -> list[dict[str, Any]]:
    baseline = statistics.median(times[BASELINE]) if times.get(BASELINE) else None
    rows = []
    for name, values in times.items():
        if not values:
            continue
        median = statistics.median(values)
        rows.append({"dialect": name, "rounds": len(values), "min_ms": round(min(values) * 1000, 1),
                     "median_ms": round(median * 1000, 1), "max_ms": round(max(values) * 1000, 1),
                     "ratio_to_openai_http": round(median / baseline, 2) if baseline else None})  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]], errors: dict[str, str]) -> str:
    lines = ["| dialect | rounds | min ms | median ms | max ms | median ÷ OpenAI HTTP |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['dialect']} | {r['rounds']} | {r['min_ms']} | {r['median_ms']} | {r['max_ms']} | "
              f"{r['ratio_to_openai_http']} |" for r in rows]  # fmt: skip
    lines += [f"| {name} | error: {message} |" for name, message in errors.items()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--out", type=Path, help="write dialect_latency.json and .md here")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--probes", help="comma-separated probe names (default: all)")
    parser.add_argument("--url", help="measure this running server instead of starting one")
    parser.add_argument("--wyoming-port", type=int, help="the --url server's Wyoming port (default 10200)")
    args = parser.parse_args(argv)
    errors: dict[str, str] = {}
    probes = load_probes(errors)
    if args.probes:
        wanted = [name.strip() for name in args.probes.split(",") if name.strip()]
        unknown = sorted(set(wanted) - set(probes) - set(errors))
        if unknown:
            parser.error(f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(probes)}")
        probes = {name: probes[name] for name in wanted if name in probes}
        errors = {name: message for name, message in errors.items() if name in wanted}
    machine = describe()
    if args.url:
        if args.wyoming_port:
            os.environ["SPEAKWIRE_WYOMING_PORT"] = str(args.wyoming_port)
        times = run_rounds(probes, args.url.rstrip("/"), args.rounds, errors)
    else:
        wyoming_port = free_port()
        os.environ["SPEAKWIRE_WYOMING_PORT"] = str(wyoming_port)  # where the wyoming probes connect
        with (
            tempfile.TemporaryDirectory() as logs,
            speakwire_server(Path(logs), "--wyoming-port", str(wyoming_port)) as server,
        ):
            times = run_rounds(probes, server.url, args.rounds, errors)
    rows = table(times)
    text = markdown(rows, errors)
    if args.out:
        result = {"text": REPLY, "machine": machine, "rows": rows, "errors": errors}
        write_results(args.out, result, text, json_name="dialect_latency.json", markdown_name="dialect_latency.md")
    print(f"{one_line(machine)}\n\n{text}", end="")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
