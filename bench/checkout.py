"""The tests' helpers, for the developer benchmarks that build the tests' models or servers.

The Qwen3 benchmarks here run the tiny random checkpoints and EOS steering of ``tests/qwen3/`` and the live
server of ``tests/support/``, so that a benchmark measures exactly what the tests hold to behaviour. This
folder sits beside ``tests/`` in the source checkout, and only it reaches into the tests: the installed
package (``speakwire.bench``) never does.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def tests_on_path() -> Path:
    """Put ``tests/`` and ``tests/qwen3/`` of this checkout first on ``sys.path``; returns ``tests/``."""
    for entry in (TESTS / "qwen3", TESTS):
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))
    return TESTS
