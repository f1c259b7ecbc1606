"""The benchmarks' name for ``speakwire.concurrency.together``: N workers released at once, timed to the last.

The engine-level benchmarks (Piper threads, Qwen3 streams, concurrent HTTP requests) start their workers
together, as a burst of clients arrives; the server's capacity probe does the same, so the helper lives
outside ``bench`` (the server may not import benchmark code) and is re-exported here.
"""

from __future__ import annotations

from speakwire.concurrency import together

__all__ = ["together"]
