"""``speakwire bench [NAME]``: every benchmark is reachable by name, the old commands still run the load one,
and naming them costs ``speakwire --help`` nothing."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from speakwire.bench.catalogue import BENCHMARKS, main, module_name
from speakwire.bench.dialects import DIALECTS
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


def test_options_without_a_name_go_to_the_load_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--min-streams", "many"])  # refused by the load benchmark's parser, before anything runs
    assert exit_.value.code == 2
    assert "speakwire bench load: error: argument --min-streams" in capsys.readouterr().err


def test_an_unknown_name_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-benchmark"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'no-such-benchmark'" in err and "qwen3-step-profile" in err


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
        probes.update(importlib.import_module(f"speakwire.bench.dialects.{dialect}").PROBES)
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
