"""The load benchmark's result files: ``results.json`` (everything), ``results.md`` (tables), ``results.png`` (plot).

The markdown leads with ratios to the raw engine and to Piper's own server, because absolute numbers
change with the machine while ratios mostly do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speakwire.bench.machine import one_line
from speakwire.bench.results import LevelResult, write_results

TARGET_ORDER = ("engine", "speakwire-http", "speakwire-ws", "piper-http")


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ordered(levels: Sequence[LevelResult]) -> list[LevelResult]:
    rank = {name: i for i, name in enumerate(TARGET_ORDER)}
    return sorted(levels, key=lambda lv: (rank.get(lv.target, len(rank)), lv.target, lv.concurrency))


def markdown(levels: Sequence[LevelResult], machine: dict[str, Any], config: dict[str, Any]) -> str:
    """A results table per target plus a ratio table; the same numbers as the JSON summaries."""
    lines = [
        "# speakwire load benchmark",
        "",
        f"Machine: {one_line(machine)}.",
        f"Run: concurrency {config.get('concurrency')}, at least {config.get('min_streams')} streams per level, "
        f"{config.get('texts')} paragraphs; WebSocket feed {config.get('words_per_piece')} words every "
        f"{config.get('piece_interval_s')} s.",
        "",
        "TTFA: time to first audio byte (p50/p95 over the level's streams); audible: to the first sample above "
        "−40 dBFS, as a player started at the first byte hears it. RTF: stream wall time / its audio "
        "(lower is better). Underruns: a real-time player at the client started at the first byte ran dry "
        "(events per stream; stall = silence heard). Throughput: audio seconds delivered per wall second, "
        "all streams together. CPU: the server process, % of all cores.",
        "",
        "| target | streams | n | err | TTFA p50 ms | TTFA p95 ms | audible p50 ms | audible p95 ms | RTF p50 "
        "| underruns/stream | stall s/stream | throughput ×RT | server CPU % | client CPU % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in _ordered(levels):
        s = level.summary()
        lines.append(
            f"| {s['target']} | {s['concurrency']} | {s['streams']} | {s['errors']} | {_ms(s['ttfa_p50_s'])} "
            f"| {_ms(s['ttfa_p95_s'])} | {_ms(s['audible_p50_s'])} | {_ms(s['audible_p95_s'])} "
            f"| {_num(s['rtf_p50'], 3)} | {_num(s['underruns_per_stream'])} "
            f"| {_num(s['stall_s_per_stream'])} | {_num(s['throughput'], 1)} | {_num(s['server_cpu_pct'], 0)} "
            f"| {_num(s['client_cpu_pct'], 0)} |"
        )
    lines += ["", *_ratio_table(levels)]
    errors = [(lv.target, lv.concurrency, lv.summary()["first_error"]) for lv in levels if lv.summary()["errors"]]
    if errors:
        lines += ["", "## Errors (first per level)", ""]
        lines += [f"- {target} × {conc}: {error}" for target, conc, error in errors]
    return "\n".join(lines) + "\n"


def _ratio_table(levels: Sequence[LevelResult]) -> list[str]:
    by = {(lv.target, lv.concurrency): lv.summary() for lv in levels}
    concurrencies = sorted({lv.concurrency for lv in levels})
    servers = [t for t in ("speakwire-http", "speakwire-ws") if any((t, c) in by for c in concurrencies)]
    if not servers:
        return []
    lines = [
        "## Ratios",
        "",
        "Throughput as a share of the raw engine at the same concurrency (1.00 = the server costs nothing), "
        "and TTFA p50/p95 of Piper's own server divided by ours (2.0 = we are twice as fast to first audio).",
        "",
        "| streams | "
        + " | ".join(f"{t} throughput / engine" for t in servers)
        + " | "
        + " | ".join(f"piper / {t} TTFA p50, p95" for t in servers)
        + " |",
        "|---:|" + "---:|" * (2 * len(servers)),
    ]
    for conc in concurrencies:
        engine, piper = by.get(("engine", conc)), by.get(("piper-http", conc))
        cells = []
        for t in servers:
            ours = by.get((t, conc))
            cells.append(_num(_div(ours and ours["throughput"], engine and engine["throughput"])))
        for t in servers:
            ours = by.get((t, conc))
            p50 = _div(piper and piper["ttfa_p50_s"], ours and ours["ttfa_p50_s"])
            p95 = _div(piper and piper["ttfa_p95_s"], ours and ours["ttfa_p95_s"])
            cells.append(f"{_num(p50, 1)}, {_num(p95, 1)}")
        lines.append(f"| {conc} | " + " | ".join(cells) + " |")
    return lines


def _div(a: Any, b: Any) -> float | None:
    """``a / b``, or None when either is missing (a target or level that did not run)."""
    return float(a) / float(b) if a is not None and b else None


def plot(levels: Sequence[LevelResult], path: Path, *, title: str = "") -> bool:
    """TTFA p50 (solid) / p95 (dashed) and throughput vs concurrency, one colour per target.

    Returns False (and draws nothing) when matplotlib is not installed: it is a bench-only dependency.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax_ttfa, ax_tput) = plt.subplots(1, 2, figsize=(12, 4.5))
    targets = [t for t in TARGET_ORDER if any(lv.target == t for lv in levels)]
    targets += sorted({lv.target for lv in levels} - set(targets))
    for i, target in enumerate(targets):
        rows = sorted((lv for lv in levels if lv.target == target), key=lambda lv: lv.concurrency)
        summaries = [lv.summary() for lv in rows]
        x = [s["concurrency"] for s in summaries]
        color = f"C{i}"
        p50 = [s["ttfa_p50_s"] if s["ttfa_p50_s"] is not None else float("nan") for s in summaries]
        p95 = [s["ttfa_p95_s"] if s["ttfa_p95_s"] is not None else float("nan") for s in summaries]
        ax_ttfa.plot(x, p50, "o-", color=color, label=f"{target} p50")
        ax_ttfa.plot(x, p95, "s--", color=color, alpha=0.7, label=f"{target} p95")
        tput = [s["throughput"] if s["throughput"] is not None else float("nan") for s in summaries]
        ax_tput.plot(x, tput, "o-", color=color, label=target)
    ticks = sorted({lv.concurrency for lv in levels})
    for ax in (ax_ttfa, ax_tput):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("concurrent streams")
        ax.grid(True, which="both", alpha=0.3)
    ax_ttfa.set_yscale("log")
    ax_ttfa.set_ylabel("time to first audio (s)")
    ax_ttfa.set_title("Time to first audio (p50 solid, p95 dashed)")
    ax_ttfa.legend(fontsize=7)
    ax_tput.set_ylim(bottom=0)
    ax_tput.set_ylabel("audio seconds per wall second")
    ax_tput.set_title("Throughput (all streams)")
    ax_tput.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_all(
    out_dir: Path, levels: Sequence[LevelResult], machine: dict[str, Any], config: dict[str, Any]
) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and (with matplotlib) ``results.png``; return their paths."""
    document = {"machine": machine, "config": config, "levels": [lv.to_dict() for lv in _ordered(levels)]}
    json_path, markdown_path = write_results(out_dir, document, markdown(levels, machine, config))
    paths = {"json": json_path, "markdown": markdown_path}
    if plot(levels, out_dir / "results.png", title=one_line(machine)):
        paths["plot"] = out_dir / "results.png"
    return paths
