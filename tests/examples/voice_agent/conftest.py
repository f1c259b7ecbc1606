"""The voice agent example (examples/voice_agent) against its own stand-ins, speakwire and pipecat, on loopback.

pipecat's SageMaker client needs Python >= 3.12 (aws-sdk-sagemaker-runtime-http2), so these tests are collected
only there (scripts/test's .venv312, with examples/voice_agent/requirements-ci.txt installed).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "voice_agent"
NEEDED = ("pipecat", "aws_sdk_sagemaker_runtime_http2", "pocketsphinx", "openai", "onnxruntime")

if sys.version_info < (3, 12) or any(importlib.util.find_spec(name) is None for name in NEEDED):
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, str(EXAMPLE))


@pytest.fixture(scope="module")
def standin() -> Iterator[Any]:
    """The Voxtral stand-in (PocketSphinx) on a loopback port."""
    import voxtral_standin

    running = voxtral_standin.start()
    yield running
    running.stop()
