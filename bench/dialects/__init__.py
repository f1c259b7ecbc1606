"""Each vendor's own client against speakwire: one module per dialect, each naming its probes in ``PROBES``.

A probe is ``probe(base_url, text) -> seconds`` (or a coroutine of that): from the moment its client sends
the text to the first audio the client hands back, the rest read to its end (``bench.timing``).
``python -m bench.dialect_latency`` runs every probe round-robin against one server. The vendor SDKs come
with the ``[test]`` extra; each module imports its own, so a missing SDK costs only that module's probes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

DIALECTS = ("cartesia", "deepgram", "elevenlabs", "openai_http", "openai_sse", "vllm_omni", "wyoming")
"""The modules, in the order their probes run each round."""

Probe = Callable[[str, str], float | Awaitable[float]]
