"""Run the speakwire load benchmark: ``python bench/run.py --out bench/results/<name>`` (see README.md).

A thin entry point: the runner lives in ``speakwire.bench`` so ``speakwire bench`` runs the same code.
"""

from __future__ import annotations

import sys

from speakwire.bench.runner import main

if __name__ == "__main__":
    sys.exit(main())
