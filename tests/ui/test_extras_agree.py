"""The extras share one environment: whatever of them is installed, pip finds nothing broken and they import together.

CI installs every extra into one environment, one after another in the README's order (scripts/test), so
these run there against exactly what a user gets. The [ui] extra carries the pins that make this hold:
transformers 4.57.3 ([qwen], for qwen-tts) needs huggingface-hub < 1, which gradio 6.17 is the last to accept.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# qwen-tts and qwen-asr go in with --no-deps (README, "Why --no-deps"), so pip knows that qwen-tts's torchaudio
# requirement is unmet and that qwen-asr's transformers pin differs from [qwen]'s.
KNOWN = re.compile(
    r"qwen-tts [\w.]+ requires torchaudio, which is not installed\."
    r"|qwen-asr [\w.]+ has requirement transformers==[\w.]+, but you have transformers [\w.]+\."
)
ROOT = Path(__file__).resolve().parents[2]
EXTRAS_INSTALLED = re.compile(r"""-e\s+["']?\.\[([\w,-]+)\]""")


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


@pytest.mark.skipif(not installed("pip"), reason="this environment has no pip to ask")
def test_pip_finds_no_broken_requirement_in_this_environment() -> None:
    check = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    problems = [line for line in check.stdout.splitlines() if line and not KNOWN.fullmatch(line)]
    assert problems in ([], ["No broken requirements found."]), check.stdout + check.stderr


@pytest.mark.skipif(not installed("gradio", "transformers"), reason="needs the [ui] and [qwen] extras")
def test_the_ui_and_the_qwen3_engine_import_into_one_process() -> None:
    # transformers checks the huggingface-hub it finds when imported, and refuses one gradio 6.18+ would bring.
    code = (
        "import gradio, transformers\n"
        "from speakwire.ui.app import build_ui\n"
        "from speakwire.ui.backend import SpeechBackend\n"
        "from speakwire.engines.qwen3.compat import import_qwen_tts\n"
        "build_ui(SpeechBackend.for_server())\n"
        "import_qwen_tts()\n"
    )
    if not installed("qwen_tts"):
        code = code.replace("import_qwen_tts()\n", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr


def test_scripts_test_and_the_readme_install_every_extra_the_package_declares() -> None:
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])

    def installed_by(text: str) -> set[str]:
        return {extra for group in EXTRAS_INSTALLED.findall(text) for extra in group.split(",")}

    assert installed_by((ROOT / "scripts" / "test").read_text()) == declared
    assert installed_by((ROOT / "README.md").read_text()) == declared


@pytest.mark.skipif(not installed("psutil", "matplotlib", "flask"), reason="needs the [bench] extra")
def test_the_bench_extra_gives_the_load_benchmark_its_cpu_meter_plot_and_piper_server() -> None:
    code = (
        "from speakwire.bench.process import CpuMeter\n"
        "import os; meter = CpuMeter(os.getpid()); meter.start(); assert meter.stop() is not None\n"
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot\n"
        "import flask, piper.http_server\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
