"""First audio over SSE (``stream_format: "sse"``), as LiveKit's OpenAI plugin asks for it."""

from __future__ import annotations

import time

import httpx


def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending the request to the first ``speech.audio.delta`` event."""
    body = {"input": text, "voice": "alloy", "response_format": "pcm", "stream_format": "sse"}
    first: float | None = None
    started = time.perf_counter()
    with httpx.stream("POST", f"{base_url}/v1/audio/speech", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if first is None and '"speech.audio.delta"' in line:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("no audio")
    return first
