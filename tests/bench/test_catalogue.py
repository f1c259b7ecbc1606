"""``speakwire bench [NAME]``: every packaged benchmark is reachable by name, the old commands still run the load
one, the developer benchmarks are pointed to, naming them costs ``speakwire --help`` nothing, and the package
never reaches into the tests or the checkout's ``bench/``."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from bench.dialects import DIALECTS

import speakwire.bench as packaged_bench
from speakwire.bench.catalogue import BENCHMARKS, DEVELOPER, main, module_name
from speakwire.bench.metrics import parse
from speakwire.bench.servers import websocket_url
from speakwire.cli.main import main as speakwire


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_answers_help_under_its_own_name(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        speakwire(["bench", name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: speakwire bench {name} ")


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_module_has_a_main(name: str) -> None:
    assert callable(importlib.import_module(module_name(name)).main)


def test_bench_help_lists_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert speakwire(["bench", "--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert listed == list(BENCHMARKS)


@pytest.mark.parametrize("name", sorted(DEVELOPER))
def test_every_developer_benchmark_runs_as_a_checkout_module(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(DEVELOPER[name])
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m {DEVELOPER[name]} ")


def test_a_developer_benchmark_by_its_old_name_is_answered_with_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qwen3-http-concurrency", "--rounds", "2"]) == 2
    assert "python -m bench.qwen3.http_concurrency --rounds 2" in capsys.readouterr().err


def test_the_package_imports_nothing_from_the_tests_or_the_checkouts_bench_folder() -> None:
    package = Path(packaged_bench.__file__).parents[1]  # src/speakwire
    offenders = []
    for path in package.rglob("*.py"):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] in ("tests", "bench", "support")]
            offenders += [f"{path}: {n}" for n in names if n in ("qwen3_testing", "tiny_checkpoint", "loop_rows")]
        if "sys.path.insert" in source or "sys.path.append" in source:
            offenders.append(f"{path}: changes sys.path")
    assert offenders == []


def test_options_without_a_name_go_to_the_load_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--min-streams", "many"])  # refused by the load benchmark's parser, before anything runs
    assert exit_.value.code == 2
    assert "speakwire bench load: error: argument --min-streams" in capsys.readouterr().err


def test_an_unknown_name_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-benchmark"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'no-such-benchmark'" in err and "qwen3-gpu" in err


def test_the_cli_imports_no_benchmark_until_one_runs() -> None:
    probe = (
        "import sys; from speakwire.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith('speakwire.bench') or m == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_dialect_module_names_its_probes() -> None:
    probes = {}
    for dialect in DIALECTS:
        probes.update(importlib.import_module(f"bench.dialects.{dialect}").PROBES)
    assert set(DIALECTS) <= set(probes)  # each module's main probe carries the module's name
    assert {"cartesia_sse", "wyoming_streaming"} <= set(probes)
    assert all(callable(probe) for probe in probes.values())


def test_metrics_are_summed_over_label_sets_by_exact_name() -> None:
    body = "\n".join([
        "# HELP speakwire_underruns_total Audio that arrived after its playback deadline.",
        "# TYPE speakwire_underruns_total counter",
        'speakwire_underruns_total{engine="piper",protocol="http"} 2.0',
        'speakwire_underruns_total{engine="piper",protocol="websocket"} 3.0',
        'speakwire_underruns_created{engine="piper",protocol="http"} 1.7e9',
        "speakwire_engine_steps_total 7",
        'speakwire_active_streams{engine="piper",protocol="label with spaces"} 1',
    ])  # fmt: skip
    totals = parse(body)
    assert totals["speakwire_underruns_total"] == 5.0
    assert totals["speakwire_engine_steps_total"] == 7.0
    assert totals["speakwire_active_streams"] == 1.0
    assert "speakwire_underruns" not in totals


@pytest.mark.parametrize(
    ("http", "path", "ws"),
    [
        ("http://127.0.0.1:8000", "/v1/audio/speech/stream", "ws://127.0.0.1:8000/v1/audio/speech/stream"),
        ("https://tts.example/", "", "wss://tts.example"),
    ],
)
def test_websocket_url_keeps_host_and_security(http: str, path: str, ws: str) -> None:
    assert websocket_url(http, path) == ws
