"""The source checkout's test helpers, for benchmarks that build the tests' models or servers.

The Qwen3 benchmarks run the tiny random checkpoints and EOS steering of ``tests/qwen3/`` and the live
server of ``tests/support/``, so that a benchmark measures exactly what the tests hold to behaviour. Those
helpers are not part of the installed package: these benchmarks need a source checkout, found from the
package's own location (``src/speakwire/``) or the current directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

_SRC_ROOT = Path(__file__).resolve().parents[3]


def tests_on_path() -> Path:
    """Put ``tests/`` and ``tests/qwen3/`` of the source checkout first on ``sys.path``; returns ``tests/``.

    Raises:
        SystemExit: No checkout found (an installed wheel has no tests).
    """
    for root in (_SRC_ROOT, Path.cwd()):
        tests = root / "tests"
        if (tests / "qwen3" / "tiny_checkpoint.py").is_file():
            for entry in (tests / "qwen3", tests):
                if str(entry) not in sys.path:
                    sys.path.insert(0, str(entry))
            return tests
    raise SystemExit("this benchmark needs a source checkout of speakwire (its tests/ helpers): run it from one")
