"""Run the voxserve load benchmark: ``python bench/run.py --out bench/results/<name>`` (see README.md).

A thin entry point: the runner lives in ``voxserve.bench`` so ``voxserve bench`` runs the same code.
"""

from __future__ import annotations

import sys

from voxserve.bench.runner import main

if __name__ == "__main__":
    sys.exit(main())
