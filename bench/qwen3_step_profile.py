"""Kept path (an open issue names it): ``python -m bench.qwen3.step_profile``, the same code and options."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the checkout's root, for ``bench``

from bench.qwen3.step_profile import main

raise SystemExit(main())
