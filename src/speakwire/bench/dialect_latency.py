"""Time to first audio per dialect: the same paragraph, the same server, each vendor's own client.

Starts ``python -m speakwire serve`` (embedded Piper voice, Wyoming port on) on loopback, then runs
every probe in ``bench/dialects/`` round-robin — one request at a time, so they never compete — and
reports min / median / max per dialect and the ratio of each median to the plain OpenAI HTTP one.

    python bench/dialect_latency.py --out bench/results/dialects-2core [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType

# Run as a script, bench/ is first on sys.path, and bench/wyoming.py would hide the wyoming package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from speakwire.bench.servers import ServerProcess, free_port  # noqa: E402

PARAGRAPH = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. "
    "Is there anything else I can help you with today?"
)
PROBES = Path(__file__).parent / "dialects"
BASELINE = "openai_http"


def load_probes() -> dict[str, ModuleType]:
    probes = {}
    for path in sorted(PROBES.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"dialect_probe_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "first_audio_s"):
            probes[path.stem] = module
    return probes


def measure(probe: ModuleType, base_url: str) -> float:
    result = probe.first_audio_s(base_url, PARAGRAPH)
    if inspect.isawaitable(result):
        result = asyncio.run(result)  # type: ignore[arg-type]
    return float(result)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    probes = load_probes()
    port, wyoming_port = free_port(), free_port()
    argv = [sys.executable, "-m", "speakwire", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--wyoming-port", str(wyoming_port), "--log-level", "warning"]  # fmt: skip
    os.environ["SPEAKWIRE_WYOMING_PORT"] = str(wyoming_port)  # where bench/dialects/wyoming.py connects
    times: dict[str, list[float]] = {name: [] for name in probes}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as logs:
        server = ServerProcess("speakwire", argv, ready_url=f"http://127.0.0.1:{port}/ready", log_dir=Path(logs))
        with server:
            base_url = f"http://127.0.0.1:{port}"
            for round_index in range(args.rounds + 1):  # round 0 warms every path up and is not counted
                for name, probe in probes.items():
                    if name in errors:
                        continue
                    try:
                        seconds = measure(probe, base_url)
                    except Exception as exc:  # a broken probe is reported, the others still run
                        errors[name] = f"{type(exc).__name__}: {exc}"
                        continue
                    if round_index:
                        times[name].append(seconds)
    baseline = statistics.median(times[BASELINE]) if times.get(BASELINE) else None
    rows = []
    for name, values in times.items():
        if not values:
            continue
        median = statistics.median(values)
        rows.append({"dialect": name, "rounds": len(values), "min_ms": round(min(values) * 1000, 1),
                     "median_ms": round(median * 1000, 1), "max_ms": round(max(values) * 1000, 1),
                     "ratio_to_openai_http": round(median / baseline, 2) if baseline else None})  # fmt: skip
    result = {"text": PARAGRAPH, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
              "python": platform.python_version()}, "rows": rows, "errors": errors}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dialect_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| dialect | rounds | min ms | median ms | max ms | median ÷ OpenAI HTTP |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['dialect']} | {r['rounds']} | {r['min_ms']} | {r['median_ms']} | {r['max_ms']} | "
              f"{r['ratio_to_openai_http']} |" for r in rows]  # fmt: skip
    lines += [f"| {name} | error: {message} |" for name, message in errors.items()]
    table = "\n".join(lines)
    (args.out / "dialect_latency.md").write_text(table + "\n")
    print(table)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
