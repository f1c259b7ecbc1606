"""Kept path (an open issue names it): ``speakwire bench qwen3-step-profile``, the same code and options."""

from speakwire.bench.qwen3.step_profile import main

raise SystemExit(main())
