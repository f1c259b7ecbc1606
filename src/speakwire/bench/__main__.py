"""``python -m speakwire.bench [NAME] [options]``: the same as ``speakwire bench``."""

from speakwire.bench.catalogue import main

raise SystemExit(main())
