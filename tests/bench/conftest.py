"""The developer benchmarks (the checkout's top-level ``bench/``) import as ``bench``, whatever the working directory.

``tests/`` is on ``sys.path`` (the root conftest) and ``tests/bench/`` has no ``__init__.py``: without the
checkout's root in front, ``import bench`` would find this folder as a namespace package.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
